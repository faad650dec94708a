"""docs/metrics.md is generated from the exporters: a metric added, renamed or re-labelled
without regenerating the page fails here (issue 19)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge
from tpwarden.watchdog import metrics_reference as ref

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
FIX = "python -m tpwarden.watchdog.metrics_reference --write docs/metrics.md"


def undocumented(docs: list[ref.MetricDoc], page: str) -> list[str]:
    return [d.name for d in docs if f"| `{d.name}` |" not in page]


def test_every_exported_metric_is_documented() -> None:
    docs = ref.exported_metrics()
    assert not undocumented(docs, DOC.read_text()), f"undocumented metrics; run: {FIX}"


def test_the_page_is_what_the_generator_writes() -> None:
    assert DOC.read_text() == ref.render(), f"docs/metrics.md is stale; run: {FIX}"


def test_a_new_metric_without_docs_is_caught() -> None:
    registry = CollectorRegistry()
    Gauge("tpwarden_new_thing_celsius", "Added without docs.", ["node"], registry=registry)
    extra = ref._families(ref.JOB_THERMAL, registry, {"tpwarden_new_thing_celsius": ("node",)})
    assert undocumented(ref.exported_metrics() + extra, DOC.read_text()) == [
        "tpwarden_new_thing_celsius"
    ]
    assert "tpwarden_new_thing_celsius" in ref.render(ref.exported_metrics() + extra)


def test_the_reference_covers_both_jobs_labels_and_the_alert_rules() -> None:
    docs = {d.name: d for d in ref.exported_metrics()}
    # families only exported for some hardware are still documented (GB10 and discrete GPUs)
    for name in ("tpwarden_gpu_memory_unified", "tpwarden_gpu_memory_used_bytes",
                 "tpwarden_node_memory_used_bytes", "tpwarden_thermal_alert_margin_celsius"):  # fmt: skip
        assert docs[name].job == ref.JOB_THERMAL, name
    assert docs["tpwarden_thermal_zone_temperature_celsius"].labels == (
        "node", "role", "type", "zone",
    )  # fmt: skip
    assert docs["tpwarden_watchdog_restarts_total"].labels == ("cause",)
    assert docs["tpwarden_watchdog_restarts_total"].type == "counter"
    page = DOC.read_text()
    for alert in ("TpwardenServerHung", "TpwardenNodeNearCritical", "TpwardenWatchdogBlind"):
        assert f"| `{alert}` |" in page
