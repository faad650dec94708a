"""tpwarden's own alerts in Alertmanager's webhook format, so they can feed a receiver that an
Alertmanager already feeds (`tpwarden.watchdog.alert_webhook_format: alertmanager`).

The format is the JSON body Alertmanager's `webhook_config` POSTs, payload version "4":
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config (receiver, status,
alerts[] with status/labels/annotations/startsAt/endsAt/generatorURL/fingerprint, groupLabels,
commonLabels, commonAnnotations, externalURL, version, groupKey, truncatedAlerts); a real sample:
https://docs.rs/crate/alertmanager-webhook-types/latest/source/assets/sample-v4-payload.json

An incident is one firing alert. Where the event is the one a Prometheus rule in
`monitoring/tpwarden-rules.yml` also sees (gave up, held, blind), the alertname and severity are
the rule's, so one receiver route and one silence cover both paths.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tpwarden.cluster.durable import JSONObject
from tpwarden.watchdog.policy_state import AlertCategory

RECEIVER = "tpwarden-watchdog"
NEVER = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert that has not resolved

# incident category -> (alertname, severity, runbook anchor in docs/runbook.md); one row per
# AlertCategory (tests/unit/test_vocabularies.py)
CATEGORIES: dict[str, tuple[str, str, str]] = {
    AlertCategory.GAVE_UP: ("TpwardenWatchdogGaveUp", "critical", "watchdog-gave-up"),
    AlertCategory.BUDGET_EXHAUSTED: ("TpwardenWatchdogHeld", "warning", "watchdog-held"),
    AlertCategory.MISCONFIG: ("TpwardenWatchdogBlind", "warning", "watchdog-is-blind"),
    AlertCategory.HOLD_EXPIRED: (
        "TpwardenWatchdogHoldExpired", "warning", "watchdog-hold-expired"),
    AlertCategory.RESTART_FAILED: (
        "TpwardenWatchdogRestartFailed", "critical", "nothing-answers-a-container-exited"),
    AlertCategory.RESTARTED: (
        "TpwardenWatchdogRestarted", "warning", "requests-hang-but-health-says-200"),
    AlertCategory.BUSY_CEILING: (
        "TpwardenServerBusy", "warning", "requests-hang-but-health-says-200"),
    AlertCategory.UNWRITABLE: (
        "TpwardenWatchdogUnwritable", "warning", "watchdog-cannot-write-its-files"),
    AlertCategory.TICK_ERRORS: ("TpwardenWatchdogTickErrors", "warning", "watchdog-tick-errors"),
    AlertCategory.STATE_INVALID: (
        "TpwardenWatchdogStateInvalid", "warning", "watchdog-state-file-invalid"),
    AlertCategory.MORNING_REPORT: (
        "TpwardenMorningReport", "info", "morning-how-did-the-night-go"),
    AlertCategory.PLAN_UNUSABLE: (
        "TpwardenWatchdogPlanUnusable", "warning", "which-config-does-the-watchdog-restart"),
}  # fmt: skip


def alert_identity(category: str) -> tuple[str, str, str]:
    """(alertname, severity, runbook) for an incident category. An unknown one (read from an
    outbox another version wrote) gets a warning named after it."""
    if category in CATEGORIES:
        name, severity, anchor = CATEGORIES[category]
        return name, severity, f"docs/runbook.md#{anchor}"
    camel = "".join(part.capitalize() for part in category.split("_"))
    return f"TpwardenWatchdog{camel}", "warning", "docs/runbook.md"


def fingerprint(labels: dict[str, str]) -> str:
    """Alertmanager's fingerprint of a label set: FNV-1a 64 over the sorted names and values, each
    followed by the separator byte 0xff (prometheus/common model.LabelSet.Fingerprint), as %016x."""
    h = 0xCBF29CE484222325
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode() + b"\xff":
                h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alertmanager_payload(incident: JSONObject, now: float) -> JSONObject:
    """The webhook body for one incident (firing; tpwarden sends no resolved notice)."""
    category = str(incident.get("category") or "unknown")
    name, severity, runbook = alert_identity(category)
    labels = {
        "alertname": name,
        "severity": severity,
        "category": category,
        "incident": str(incident.get("incident_id") or ""),
        "job": RECEIVER,
    }
    message = str(incident.get("message") or category)
    details = [f"{k}: {incident[k]}" for k in ("phase", "consecutive_failures") if k in incident]
    annotations = {
        "summary": message,
        "description": "; ".join([message, *details]),
        "runbook": runbook,
    }
    if incident.get("events_path"):
        annotations["events"] = str(incident["events_path"])
    at = incident.get("at")
    starts = float(at) if isinstance(at, int | float) else now
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(starts),
        "endsAt": NEVER,
        "generatorURL": str(incident.get("probe_url") or ""),
        "fingerprint": fingerprint(labels),
    }
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{name}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": RECEIVER,
        "groupLabels": {"alertname": name},
        "commonLabels": dict(labels),
        "commonAnnotations": dict(annotations),
        "externalURL": "",
        "alerts": [alert],
    }
