"""Which metric names exist, taken from the code that exports them, and which names a PromQL
expression uses. Shared by the alert-rule and the dashboard tests, so a query naming a metric that
nobody exports (a typo, a rename on one side only) fails CI.

Known names: the watchdog's registry (`WatchdogMetrics`), the thermal agent's collector
(`ThermalCollector`) fed by a real `ThermalAgent` tick over a fake sysfs and a GB10-like GPU with a
thermal clock event, vLLM's names from the real /metrics captures in tests/fixtures/real/metrics,
and what Prometheus adds itself (`up`, `ALERTS`).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

REPO = Path(__file__).resolve().parents[2]
VLLM_CAPTURES = REPO / "tests" / "fixtures" / "real" / "metrics"
PROMETHEUS_OWN = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"})


def _names(collector: Collector) -> set[str]:
    names: set[str] = set()
    for family in collector.collect():
        names.update(s.name for s in family.samples)
        if not family.samples:  # a family with no sample this scrape still has its name
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def watchdog_names() -> set[str]:
    from servectl.watchdog.exporter import WatchdogMetrics

    return _names(WatchdogMetrics().registry)


def thermal_names() -> set[str]:
    from servectl.watchdog.thermal.agent import ThermalAgent
    from servectl.watchdog.thermal.fakes import FakeGpuSampler, build_fake_sysfs, gb10_sample
    from servectl.watchdog.thermal.metrics import ThermalCollector
    from servectl.watchdog.thermal.zones import SysfsZoneReader

    class _Writer:
        def write(self, record: dict) -> bool:
            return True

    now = [1000.0]
    gpu = FakeGpuSampler([gb10_sample(reasons=("sw_thermal_slowdown", "gpu_idle"))])
    with tempfile.TemporaryDirectory() as tmp:
        reader = SysfsZoneReader(build_fake_sysfs(Path(tmp) / "sys"))
        agent = ThermalAgent("node1", 10.0, gpu, reader, _Writer(), lambda: now[0], lambda s: None)
        agent.tick()
        roles = {"thermal_zone0": "soc", "thermal_zone1": "cpu"}
        return _names(ThermalCollector(agent, lambda: now[0], zone_roles=roles))


def vllm_names() -> set[str]:
    names: set[str] = set()
    for capture in sorted(VLLM_CAPTURES.glob("*.prom.txt")):
        for family in text_string_to_metric_families(capture.read_text()):
            names.update(s.name for s in family.samples)
    return names


def known_metric_names() -> set[str]:
    return watchdog_names() | thermal_names() | vllm_names() | set(PROMETHEUS_OWN)


# -- names used by an expression ------------------------------------------------------------------
_KEYWORDS = frozenset(
    "and or unless by without on ignoring group_left group_right bool offset inf nan".split()
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")


def metric_names_in(expr: str) -> set[str]:
    """The metric names an expression selects (functions, keywords, labels and strings removed).
    Grafana's `$variables` are dropped; `label_values(metric, label)` yields `metric`."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _CLAUSE.sub("", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    text = re.sub(r"\blabel_values\s*\(([^,)]+)(?:,[^)]*)?\)", r"\1", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", "", text)
    found = set()
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if not call and name not in _KEYWORDS:
            found.add(name)
    return found


def unknown_names(exprs: Iterable[str], known: set[str]) -> dict[str, set[str]]:
    """expression -> the names it uses that nothing exports (empty dict: all known)."""
    out = {}
    for expr in exprs:
        missing = metric_names_in(expr) - known
        if missing:
            out[expr] = missing
    return out
