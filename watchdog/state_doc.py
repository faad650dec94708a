"""The watchdog's state as one JSON document, read from its state directory (file reads only).

What `tpwarden watchdog status` and `tpwarden status` show: the daemon's `state.json`, whether
a daemon holds the lock, the operator hold and the alerts still waiting to be delivered; and
what `tpwarden watchdog history` shows (`events_document`). Never blocks, never writes.
"""

from __future__ import annotations

import os

from tpwarden.cluster.durable import JSONObject, read_json
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.hold import hold_path, read_hold
from tpwarden.cluster.operator_lock import lock_holder
from tpwarden.watchdog.state import StateStore


def state_document(state_dir: str, now: float) -> JSONObject:
    """The document for `state_dir` at `now` (a hold that ended before `now` is `hold_expired`).

    `state` is None when the daemon never wrote one. Raises OSError/ValueError/TpwardenError
    when a file is unreadable."""
    sd = state_dir
    state = StateStore(os.path.join(sd, "state.json")).load()
    hold, _released = read_hold(hold_path(sd))
    doc: JSONObject = {
        "state_dir": sd,
        "daemon": lock_holder(os.path.join(sd, "watchdog.lock")),
        "hold": None,
        "state": None,
    }
    if hold is not None and hold.until > now:
        doc["hold"] = {"until": hold.until, "reason": hold.reason, "by": hold.by, "kind": hold.kind}
    elif hold is not None:
        doc["hold_expired"] = {"until": hold.until, "reason": hold.reason, "by": hold.by}
    pending = (read_json(os.path.join(sd, "outbox.json")) or {}).get("pending") or []
    doc["undelivered_alerts"] = [
        {
            "category": p["incident"].get("category"),
            "attempts": p.get("attempts"),
            "next_attempt_at": p.get("next_at"),
            "problems": p.get("problems"),
        }
        for p in pending
        if isinstance(p, dict) and isinstance(p.get("incident"), dict)
    ]
    if state is not None:
        doc["state"] = {
            "phase": state.phase.value,
            "consecutive_failures": state.consecutive_failures,
            "last_probe": state.last_probe,
            "last_verdict": state.last_verdict,
            "last_ok_at": state.last_ok_at,
            "restart_times": list(state.restart_times),
            "restart_in_progress": state.restart_in_progress,
            "incident_id": state.incident_id,
            "boot_deadline_at": state.boot_deadline_at,
            "boot_failures": state.boot_failures,
            "updated_at": state.updated_at,
            "blind_since": state.blind_since,
        }
    return doc


def events_document(state_dir: str, limit: int, probes: bool = False) -> JSONObject:
    """The last ``limit`` records of the watchdog's event log (every probe's too with
    ``probes``), oldest first, and how many unreadable lines were skipped."""
    got = read_events(os.path.join(state_dir, "events.jsonl"))
    events = [e for e in got.events if probes or e.get("kind") != "probe"][-limit:]
    return {"events": list(events), "skipped_lines": got.skipped_lines}
