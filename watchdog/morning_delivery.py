"""What the daily delivery posts (issue 31 item 6): the morning report of the window that ends
now, built by the same code as `tpwarden report` (`tpwarden.cluster.reports.morning_io`) from what the
watchdog's host has: its own event log, and the thermal files in `thermal.dir` (the head's own
agent writes there; other nodes' files are on their nodes). What it did not have is named in
`missing`, never silently left out."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.reports.morning import headline, morning_to_json
from tpwarden.cluster.reports.morning_io import Sources, morning_from_files
from tpwarden.cluster.reports.thermal.localtime import local_iso, parse_tz, span_text
from tpwarden.watchdog.config import ReportConfig
from tpwarden.watchdog.policy_state import AlertCategory

CATEGORY = AlertCategory.MORNING_REPORT
NOT_HERE = "bench and eval runs and operator restarts are recorded on the control machine"


def morning_payload(report: ReportConfig, events_path: str, now: float) -> JSONObject:
    """The incident record the alert hooks get: window, headline, what is missing, and the
    report's facts (`tpwarden report --json`'s document)."""
    zone = parse_tz(report.tz)
    since, until = now - report.window_h * 3600.0, now
    src = Sources(Path(events_path), Path(report.thermal_dir),
                  ledger=Path(report.ledger) if report.ledger else None)  # fmt: skip
    # the summary uses the window's event records only: older ones are left unread, so the
    # daemon does not hold its whole log (up to 2 x events_max_bytes) in memory once a day
    rep, _records = morning_from_files(src, since=since, until=until, events_from=since)
    missing: dict[str, str] = {}
    if not Path(events_path).is_file():
        missing["watchdog"] = f"no event log at {events_path}"
    have = {n.node for n in rep.thermal.nodes if n.samples_received}
    absent = [n for n in report.nodes if n not in have]
    if absent:
        missing["thermal"] = (
            f"no thermal samples of {', '.join(absent)} in the window on the watchdog's host "
            f"({report.thermal_dir}); `tpwarden report -i` reads every node's"
        )
    missing["bench"] = NOT_HERE
    head = headline(rep)
    text = f"Night report, {span_text(since, until, zone)}: {head}"
    if "watchdog" in missing or "thermal" in missing:
        text += "; missing: " + ", ".join(k for k in ("watchdog", "thermal") if k in missing)
    day = datetime.fromtimestamp(until, zone).date().isoformat()
    return {
        "incident_id": f"morning-report-{day}",
        "category": CATEGORY,
        "message": text,
        "headline": head,
        "window": {
            "since": since,
            "until": until,
            "tz": report.tz,
            "since_local": local_iso(since, zone),
            "until_local": local_iso(until, zone),
            "hours": report.window_h,
        },
        "missing": missing,
        "report": morning_to_json(rep),
    }
