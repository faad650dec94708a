"""Prometheus /metrics for the thermal agent, on its own registry, bound to
`tpwarden.thermal.metrics_host` (loopback unless the inventory opens it to a scraper).

Names are tpwarden's own (``tpwarden_*``, docs/metrics.md, generated from this code), so a node
that also runs node_exporter or dcgm-exporter does not get the same series twice. Every series
carries ``node``. Sample-derived values come from the latest sample only, and only while it is
fresh: a stale reading is not served (a frozen metric is worse than none, thermal.md 5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.errors import TpwardenError
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.metrics_gpu import gpu_metrics
from tpwarden.node.thermal.roles import zone_role
from tpwarden.node.thermal.zones import critical_trip_c

NODE = ["node"]
ZONE_LABELS = ["node", "zone", "type", "role"]

# (AgentStats field, name without _total, help)
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("samples", "tpwarden_thermal_samples", "Samples taken."),
    ("late_ticks", "tpwarden_thermal_late_ticks", "Samples taken late on their grid slot."),
    ("skipped_slots", "tpwarden_thermal_skipped_slots", "Grid slots with no sample."),
    ("dropped", "tpwarden_thermal_dropped_records", "Records the writer could not store."),
)


class ThermalCollector(Collector):
    """Builds the exposition from an agent's latest record and counters at scrape time.

    ``zone_roles`` (inventory thermal.zone_roles) fills the zones' ``role`` label ("" when
    unmapped); the alert margin is the agent's own (its AlertPolicy, from --alert-margin)."""

    def __init__(
        self,
        agent: ThermalAgent,
        clock: Callable[[], float],
        stale_after_s: float | None = None,
        zone_roles: Mapping[str, str] | None = None,
    ):
        self.agent = agent
        self.zone_roles = dict(zone_roles or {})
        self.clock = clock
        self.stale_after_s = stale_after_s if stale_after_s is not None else 3 * agent.interval_s

    def collect(self) -> Iterator[Metric]:
        node = self.agent.node
        yield from self._health(node)
        rec = self.agent.latest
        last = GaugeMetricFamily(
            "tpwarden_thermal_last_sample_timestamp_seconds",
            "Time of the latest sample (whether or not it is still fresh).",
            labels=NODE,
        )
        if rec is not None:
            last.add_metric([node], rec["ts"])
        yield last
        if rec is None or self.clock() - rec["ts"] > self.stale_after_s:
            return
        yield from _node_memory(rec, node)
        yield from zone_metrics(rec, node, self.zone_roles)
        yield _hwmon(rec, node)
        yield from gpu_metrics(rec, node)

    def _health(self, node: str) -> Iterator[Metric]:
        for field, name, help_ in _COUNTERS:
            c = CounterMetricFamily(name, help_, labels=NODE)
            c.add_metric([node], getattr(self.agent.stats, field))
            yield c
        margin = GaugeMetricFamily(
            "tpwarden_thermal_alert_margin_celsius",
            "The agent's --alert-margin: it raises zone_near_critical when a zone is this close "
            "to its critical trip (absent when the agent has none).",
            labels=NODE,
        )
        if self.agent.alerts.zone_margin_c is not None:
            margin.add_metric([node], float(self.agent.alerts.zone_margin_c))
        yield margin


def _node_memory(rec: Mapping[str, JSONValue], node: str) -> Iterator[Metric]:
    mem = rec.get("memory") or {}
    for key, help_ in (
        ("total", "Node memory size (psutil; on GB10 the GPU's memory too)."),
        ("used", "Node memory in use: total minus available (on GB10 shared with the GPU)."),
        ("available", "Node memory available without swapping (psutil)."),
    ):
        g = GaugeMetricFamily(f"tpwarden_node_memory_{key}_bytes", help_, labels=NODE)
        if mem.get(f"{key}_bytes") is not None:
            g.add_metric([node], mem[f"{key}_bytes"])
        yield g


def zone_metrics(
    rec: Mapping[str, JSONValue], node: str, zone_roles: Mapping[str, str]
) -> Iterator[Metric]:
    """ACPI zones: temperature, every trip point, and the margin to the lowest critical trip.
    ``zone`` is the number ("0" for thermal_zone0); ``trip`` the trip's position in the zone."""
    temp = GaugeMetricFamily(
        "tpwarden_thermal_zone_temperature_celsius", "ACPI thermal zone temperature.",
        labels=ZONE_LABELS,
    )  # fmt: skip
    trips = GaugeMetricFamily(
        "tpwarden_thermal_zone_trip_celsius",
        "ACPI thermal zone trip point (trip_type: critical, hot, passive, active).",
        labels=[*ZONE_LABELS, "trip", "trip_type"],
    )
    margin = GaugeMetricFamily(
        "tpwarden_thermal_zone_critical_margin_celsius",
        "Lowest critical trip minus the zone temperature (zones with a critical trip only).",
        labels=ZONE_LABELS,
    )
    for z in rec.get("zones") or []:
        labels = [
            node,
            z["name"].removeprefix("thermal_zone"),
            z.get("type") or "",
            zone_role(z["name"], z.get("type"), zone_roles) or "",
        ]
        t = z.get("temp_c")
        if t is not None:
            temp.add_metric(labels, t)
        for i, trip in enumerate(z.get("trips") or []):
            if trip.get("temp_c") is not None and trip["temp_c"] > 0:  # <= 0: a disabled trip
                trips.add_metric([*labels, str(i), trip.get("type") or ""], trip["temp_c"])
        crit = critical_trip_c(z.get("trips") or [])
        if crit is not None and t is not None:
            margin.add_metric(labels, round(crit - t, 3))
    yield from (temp, trips, margin)


def _hwmon(rec: Mapping[str, JSONValue], node: str) -> Metric:
    g = GaugeMetricFamily(
        "tpwarden_hwmon_temperature_celsius",
        "hwmon temperature sensor (chip is hwmonN, unstable across boots; chip_name is not).",
        labels=["node", "chip", "chip_name", "sensor", "label"],
    )
    for h in rec.get("hwmon") or []:
        if h.get("temp_c") is not None:
            labels = [node, h["chip"], h.get("chip_name") or "", h["sensor"], h.get("label") or ""]
            g.add_metric(labels, h["temp_c"])
    return g


class MetricsServer:
    """Serves a ThermalCollector on ``host:port``. Nothing listens until :meth:`start`."""

    def __init__(self, collector: Collector, host: str = "127.0.0.1", port: int = 9835):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host = host
        self.port = port
        self._server: WSGIServer | None = None

    def start(self) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        try:
            server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise TpwardenError(
                f"cannot serve /metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._server = server
        self.port = server.server_port
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
