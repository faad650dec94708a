"""Vocabularies are enums, and what lists them is checked against them (issue 51 item 5).

The policy's docstring listed six alert categories while the policy also raised `hold_expired`;
the `Restart.cause` comment left out `boot_failed`; the phase table had no BLIND row. Each list
is now checked here against its enum (`AlertCategory`, `RestartCause`, `WatchdogPhase`, the
probe's `Outcome` and `ProbeVerdict`), or generated from it (the metrics' help, docs/metrics.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from tpwarden.cluster.vllm.probe_types import Outcome
from tpwarden.watchdog import policy
from tpwarden.watchdog.alertmanager import CATEGORIES
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.policy_state import AlertCategory, RestartCause, WatchdogPhase
from tpwarden.watchdog.verdict import ProbeVerdict

ROOT = Path(__file__).resolve().parents[2]
POLICY_SOURCE = (ROOT / "watchdog" / "policy.py").read_text(encoding="utf-8")
DOC = policy.__doc__ or ""


def used(enum_name: str, source: str) -> set[str]:
    """The members of ``enum_name`` that ``source`` names (``AlertCategory.GAVE_UP``)."""
    return {m.lower() for m in re.findall(rf"\b{enum_name}\.([A-Z_]+)\b", source)}


def test_every_alert_category_has_its_alertname_severity_and_runbook() -> None:
    assert set(CATEGORIES) == set(AlertCategory)


def test_the_policy_docstring_lists_the_categories_the_policy_raises() -> None:
    sentence = DOC.split("the policy's categories (`AlertCategory`) are", 1)[1].split(".")[0]
    sentence = sentence.replace("`alert_on_restart`", "")  # the setting, not a category
    listed = set(re.findall(r"[a-z]+(?:_[a-z]+)+|restarted|misconfig", sentence))
    assert listed == used("AlertCategory", POLICY_SOURCE) != set()


def test_the_daemon_raises_the_other_categories() -> None:
    daemon = "".join(
        (ROOT / "watchdog" / name).read_text(encoding="utf-8")
        for name in ("daemon.py", "daemon_io.py", "daily.py", "morning_delivery.py")
    )
    assert used("AlertCategory", POLICY_SOURCE) | used("AlertCategory", daemon) == set(
        AlertCategory
    )


def test_the_policy_docstring_names_every_restart_cause() -> None:
    sentence = DOC.split("A restart's cause (`RestartCause`) is", 1)[1].split(".")[0]
    assert set(re.findall(r"[a-z]+_[a-z]+", sentence)) == set(RestartCause)
    assert used("RestartCause", POLICY_SOURCE) == set(RestartCause)


def test_the_phase_table_has_a_row_per_phase() -> None:
    rows = set(re.findall(r"^\| ([A-Z_]+) +\|", DOC, re.M))
    assert rows == {p.name for p in WatchdogPhase}


def test_the_counting_rules_name_every_probe_outcome_and_verdict() -> None:
    rules = DOC.split("Counting rules", 1)[1].split("Boot grace", 1)[0]
    words = set(re.findall(r"\b[A-Z][A-Z_0-9]+\b", rules))
    assert {o.name for o in Outcome} <= words
    assert {v.name for v in ProbeVerdict} <= words | {"HARD"}


def test_the_metrics_help_lists_the_label_values_from_the_enums() -> None:
    metrics = WatchdogMetrics()
    helps = {m.name: m.documentation for m in metrics.registry.collect()}
    assert ", ".join(RestartCause) in helps["tpwarden_watchdog_restarts"]
    assert ", ".join(AlertCategory) in helps["tpwarden_watchdog_alerts"]


def test_the_runbook_names_only_real_categories() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    named = set(re.findall(r"category\s+`([a-z_]+)`", runbook))
    assert named and named <= set(AlertCategory)
