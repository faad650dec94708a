"""Which metric names exist, taken from the code that exports them, and which names a PromQL
expression uses. Shared by the alert-rule and the dashboard tests, so a query naming a metric that
nobody exports (a typo, a rename on one side only) fails CI.

Known names: what tpwarden.watchdog.metrics_reference finds in the real exporters (the
watchdog's registry, the thermal agent's collector after a real tick; the same source as
docs/metrics.md), vLLM's names from the real /metrics captures in tests/fixtures/real/metrics,
and what Prometheus adds itself (`up`, `ALERTS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
VLLM_CAPTURES = REPO / "tests" / "fixtures" / "real" / "metrics"
PROMETHEUS_OWN = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"})


def watchdog_names() -> set[str]:
    from tpwarden.watchdog.metrics_reference import JOB_WATCHDOG, exported_metrics, sample_names

    return sample_names(d for d in exported_metrics() if d.job == JOB_WATCHDOG)


def thermal_names() -> set[str]:
    from tpwarden.watchdog.metrics_reference import JOB_THERMAL, exported_metrics, sample_names

    return sample_names(d for d in exported_metrics() if d.job == JOB_THERMAL)


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
