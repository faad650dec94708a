"""The metrics reference (docs/metrics.md), generated from the code that exports the metrics.

Every family comes from the real exporters: the watchdog's registry (`WatchdogMetrics`) and the
thermal agent's collector (`ThermalCollector`) after one real `ThermalAgent` tick over a fake
sysfs, a GB10-like GPU (memory Not Supported, a thermal clock event) and a discrete GPU (memory
reported), so every family the agent can export has a sample. The alert rules are read from the
rule file shipped with the package. A test regenerates the page and fails when it differs, so a
metric cannot be added without its line in the docs.

    python -m tpwarden.watchdog.metrics_reference --write docs/metrics.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.registry import Collector
from ruamel.yaml import YAML
from tpwarden.cluster.durable import THERMAL_METRICS_HOST, THERMAL_METRICS_PORT, JSONObject
from tpwarden.cluster.reports.thermal.fakes import (
    FakeGpuSampler,
    FakeReading,
    build_fake_sysfs,
    gb10_sample,
)
from tpwarden.cluster.settings import WatchdogSpec
from tpwarden.node.memory import NodeMemory
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.alerts import AlertPolicy
from tpwarden.node.thermal.metrics import ThermalCollector
from tpwarden.node.thermal.zones import SysfsZoneReader
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.monitoring_files import rules_path

JOB_THERMAL, JOB_WATCHDOG = "tpwarden-thermal", "tpwarden-watchdog"
_SAMPLE_LABELS = frozenset({"le", "quantile"})  # added by the histogram/summary format


@dataclass(frozen=True, kw_only=True)
class MetricDoc:
    job: str
    name: str  # as exposed (counters with _total)
    type: str
    labels: tuple[str, ...]
    help: str


def _families(
    job: str, collector: Collector, declared: dict[str, tuple[str, ...]] | None = None
) -> list[MetricDoc]:
    """``declared``: label names by family for labelled metrics that have no sample yet (a
    counter never incremented exposes no series, but its labels are part of the contract)."""
    out = []
    for fam in collector.collect():
        labels: set[str] = set((declared or {}).get(fam.name, ()))
        for s in fam.samples:
            labels.update(k for k in s.labels if k not in _SAMPLE_LABELS)
        name = fam.name + ("_total" if fam.type == "counter" else "")
        out.append(
            MetricDoc(
                job=job,
                name=name,
                type=fam.type,
                labels=tuple(sorted(labels)),
                help=fam.documentation,
            )
        )
    return out


def watchdog_collector() -> tuple[Collector, dict[str, tuple[str, ...]]]:
    """The watchdog's registry and the label names its metric objects declare."""
    metrics = WatchdogMetrics()
    declared = {
        m._name: tuple(m._labelnames)  # prometheus_client keeps these private; stable since 0.4
        for m in vars(metrics).values()
        if hasattr(m, "_labelnames") and hasattr(m, "_name")
    }
    return metrics.registry, declared


def thermal_collector(sysfs_dir: Path) -> Collector:
    """A ThermalCollector after one real tick that exercises every family the agent exports."""

    class _Writer:
        def write(self, record: JSONObject) -> bool:
            return True

    discrete = dataclasses.replace(
        gb10_sample(index=1),
        name="NVIDIA discrete",
        uuid="GPU-fake-0001",
        memory_used_mib=FakeReading(1024.0),
        memory_total_mib=FakeReading(8192.0),
        slowdown_temp_c=FakeReading(90.0),
        shutdown_temp_c=FakeReading(95.0),
    )
    gpus = FakeGpuSampler([gb10_sample(reasons=("sw_thermal_slowdown", "gpu_idle")), discrete])
    now = 1000.0
    agent = ThermalAgent(
        "node1", 10.0, gpus, SysfsZoneReader(build_fake_sysfs(sysfs_dir)), _Writer(),
        lambda: now, lambda _s: None,
        alerts=AlertPolicy(zone_margin_c=5.0, clock_events=False),
        memory=lambda: NodeMemory(128 * 2**30, 40 * 2**30, "psutil"),
    )  # fmt: skip
    agent.tick()
    return ThermalCollector(agent, lambda: now, zone_roles={"thermal_zone0": "soc"})


def exported_metrics() -> list[MetricDoc]:
    with tempfile.TemporaryDirectory() as tmp:
        thermal = _families(JOB_THERMAL, thermal_collector(Path(tmp) / "sys"))
    return thermal + _families(JOB_WATCHDOG, *watchdog_collector())


def sample_names(docs: Iterable[MetricDoc]) -> set[str]:
    """The names a query can select: a histogram's _bucket/_sum/_count, not its family name."""
    names: set[str] = set()
    for d in docs:
        if d.type == "histogram":
            names.update(d.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(d.name)
    return names


def _alert_rows() -> list[tuple[str, str, str, str]]:
    doc = YAML(typ="safe").load(rules_path().read_text())
    rows = []
    for group in doc["groups"]:
        for r in group["rules"]:
            if "alert" in r:
                ann = r.get("annotations", {})
                rows.append((r["alert"], r.get("labels", {}).get("severity", ""),
                             str(r.get("for", "-")), ann.get("summary", "")))  # fmt: skip
    return rows


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(docs: list[MetricDoc] | None = None) -> str:
    docs = exported_metrics() if docs is None else docs
    lines = [
        "# Metrics reference",
        "",
        "<!-- generated by `python -m tpwarden.watchdog.metrics_reference --write docs/metrics.md`;"
        " do not edit: tests/unit/test_metrics_reference.py fails when this page and the code"
        " differ -->",
        "",
        "tpwarden's own metrics, by scrape job (`tpwarden prometheus config` writes the jobs).",
        "The thermal agent serves sample values only while its latest sample is fresh; a reading",
        "NVML or sysfs did not give is absent, never 0. vLLM's own metrics (job `vllm`) are",
        "vLLM's and are not listed here.",
        "",
    ]
    watchdog = WatchdogSpec()
    for job, where in (
        (JOB_THERMAL, "every node: `tpwarden.thermal.metrics_host:metrics_port` (default "
                      f"{THERMAL_METRICS_HOST}:{THERMAL_METRICS_PORT})"),
        (JOB_WATCHDOG, "the watchdog: `tpwarden.watchdog.metrics_host:metrics_port` (default "
                       f"{watchdog.metrics_host}:{watchdog.metrics_port})"),
    ):  # fmt: skip
        lines += [f"## Job `{job}`", "", where, "", "| metric | type | labels | help |",
                  "|---|---|---|---|"]  # fmt: skip
        for d in sorted((d for d in docs if d.job == job), key=lambda d: d.name):
            labels = ", ".join(f"`{x}`" for x in d.labels) or "-"
            lines.append(f"| `{d.name}` | {d.type} | {labels} | {_cell(d.help)} |")
        lines.append("")
    lines += [
        "## Alert rules",
        "",
        "Group `tpwarden` in `tpwarden/watchdog/monitoring/tpwarden-rules.yml` (package data;",
        "`promtool test rules` runs its tests in CI). Each alert links its runbook section.",
        "",
        "| alert | severity | for | summary |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{a}` | {s} | {f} | {_cell(m)} |" for a, s, f, m in _alert_rows()]
    lines += [
        "",
        "## Dashboard",
        "",
        "`tpwarden/watchdog/monitoring/grafana-night.json`: the overnight view (per-node GPU and",
        "zone temperatures with the critical line, clocks and throttle, vLLM tokens/s and",
        "running/waiting, watchdog events as annotations); import it in Grafana and pick the",
        "Prometheus datasource.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", metavar="PATH", help="write the page here (default: stdout)")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        Path(args.write).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
