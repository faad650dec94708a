"""Prometheus /metrics for the thermal agent, on its own registry, bound to
`servectl.thermal.metrics_host` (loopback unless the inventory opens it to a scraper).

Names follow node_exporter (``node_thermal_zone_temp{zone,type}``, ``node_hwmon_temp_celsius``)
and dcgm-exporter (``DCGM_FI_DEV_*{gpu,UUID}``) where they overlap, so existing dashboards work.
Values come from the latest sample only, and only while it is fresh: a stale reading is not
served (a frozen metric is worse than none, thermal.md 5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from servectl.watchdog.thermal.agent import ThermalAgent
from servectl.watchdog.thermal.records import clock_event_mask

# (record field, metric name, help); units converted to dcgm-exporter's (W, MHz, C, %).
_GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("temp_c", "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("power_w", "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("util_pct", "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("slowdown_temp_c", "DCGM_FI_DEV_SLOWDOWN_TEMP", "Slowdown temperature (in C)."),
    ("shutdown_temp_c", "DCGM_FI_DEV_SHUTDOWN_TEMP", "Shutdown temperature (in C)."),
)


class ThermalCollector(Collector):
    """Builds the exposition from an agent's latest record and counters at scrape time."""

    def __init__(
        self,
        agent: ThermalAgent,
        clock: Callable[[], float],
        stale_after_s: float | None = None,
        zone_roles: dict[str, str] | None = None,
    ):
        self.agent = agent
        self.zone_roles = zone_roles or {}  # thermal.zone_roles: exported as an info metric
        self.clock = clock
        self.stale_after_s = stale_after_s if stale_after_s is not None else 3 * agent.interval_s

    def collect(self) -> Iterator[Metric]:
        st = self.agent.stats
        for name, value, help_ in (
            ("servectl_thermal_samples", st.samples, "Samples taken."),
            (
                "servectl_thermal_late_ticks",
                st.late_ticks,
                "Samples taken late on their grid slot.",
            ),
            ("servectl_thermal_skipped_slots", st.skipped_slots, "Grid slots with no sample."),
            ("servectl_thermal_dropped_records", st.dropped, "Records the writer could not store."),
        ):
            c = CounterMetricFamily(name, help_)
            c.add_metric([], value)
            yield c
        rec = self.agent.latest
        if rec is None:
            return
        last = GaugeMetricFamily(
            "servectl_thermal_last_sample_timestamp_seconds", "Time of the latest sample."
        )
        last.add_metric([], rec["ts"])
        yield last
        if self.clock() - rec["ts"] > self.stale_after_s:
            return
        yield from _zone_metrics(rec)
        if self.zone_roles:
            yield _zone_role_info(rec, self.zone_roles)
        yield from _gpu_metrics(rec, self.agent.node)


def _zone_role_info(rec: dict[str, Any], zone_roles: dict[str, str]) -> Metric:
    """``servectl_thermal_zone_role{zone,type,role} 1``: join on ``zone`` to label
    node_thermal_zone_temp by role (GB10 zones all say "acpitz"), without changing its labels."""
    from servectl.watchdog.thermal.roles import zone_role

    info = GaugeMetricFamily(
        "servectl_thermal_zone_role", "Role of a thermal zone (inventory thermal.zone_roles).",
        labels=["zone", "type", "role"],
    )  # fmt: skip
    for z in rec.get("zones", []):
        role = zone_role(z["name"], z.get("type"), zone_roles)
        if role:
            info.add_metric([z["name"].removeprefix("thermal_zone"), z.get("type") or "", role], 1)
    return info


def _zone_metrics(rec: dict[str, Any]) -> Iterator[Metric]:
    zt = GaugeMetricFamily(
        "node_thermal_zone_temp", "Zone temperature in Celsius", labels=["zone", "type"]
    )
    for z in rec.get("zones", []):
        if z.get("temp_c") is not None:
            zt.add_metric(
                [z["name"].removeprefix("thermal_zone"), z.get("type") or ""], z["temp_c"]
            )
    yield zt
    ht = GaugeMetricFamily(
        "node_hwmon_temp_celsius",
        "Hardware monitor for temperature (input)",
        labels=["chip", "sensor"],
    )
    names = GaugeMetricFamily(
        "node_hwmon_chip_names",
        "Annotation metric for human-readable chip names",
        labels=["chip", "chip_name"],
    )
    labels = GaugeMetricFamily(
        "node_hwmon_sensor_label",
        "Label for given chip and sensor",
        labels=["chip", "sensor", "label"],
    )
    seen: set[str] = set()
    for h in rec.get("hwmon", []):
        if h["chip"] not in seen and h.get("chip_name"):
            names.add_metric([h["chip"], h["chip_name"]], 1)
            seen.add(h["chip"])
        if h.get("label"):
            labels.add_metric([h["chip"], h["sensor"], h["label"]], 1)
        if h.get("temp_c") is not None:
            ht.add_metric([h["chip"], h["sensor"]], h["temp_c"])
    yield from (ht, names, labels)


def _gpu_metrics(rec: dict[str, Any], node: str) -> Iterator[Metric]:
    lbl = ["gpu", "UUID", "modelName", "Hostname"]
    for field, name, help_ in _GPU_GAUGES:
        g = GaugeMetricFamily(name, help_, labels=lbl)
        for gpu in rec.get("gpus", []):
            if gpu.get(field) is not None:
                g.add_metric(_gpu_labels(gpu, node), gpu[field])
        yield g
    ev = GaugeMetricFamily(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "Current clock event reasons (bitmask of NVML clocks event reasons).",
        labels=lbl,
    )
    for gpu in rec.get("gpus", []):
        mask = clock_event_mask(gpu.get("clock_event_reasons"), gpu.get("clock_event_reasons_mask"))
        if mask is not None:
            ev.add_metric(_gpu_labels(gpu, node), mask)
    yield ev


def _gpu_labels(gpu: dict[str, Any], node: str) -> list[str]:
    return [str(gpu.get("index")), str(gpu.get("uuid") or ""), str(gpu.get("name") or ""), node]


class MetricsServer:
    """Serves a ThermalCollector on ``host:port``. Nothing listens until :meth:`start`."""

    def __init__(self, collector: Collector, host: str = "127.0.0.1", port: int = 9835):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host = host
        self.port = port
        self._server: Any = None

    def start(self) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        try:
            server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            from servectl.cluster.errors import ServectlError

            raise ServectlError(
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
