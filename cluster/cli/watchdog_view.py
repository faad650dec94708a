"""Rendering of the watchdog's state document (`tpwarden.watchdog.state_doc`) for the CLI.

Shared by `tpwarden watchdog status` and the watchdog line of `tpwarden status`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.state_doc import state_document


def iso(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def watchdog_line(state_dir: str) -> tuple[dict[str, Any] | None, str]:
    """For `tpwarden status`: the watchdog's state from `state_dir` on this machine (file reads
    only, never blocks) as (JSON doc or None, one line of text)."""
    try:
        doc = state_document(state_dir, time.time())
    except (OSError, ValueError, TpwardenError) as exc:
        return None, f"watchdog: state unreadable in {state_dir} ({exc})"
    st = doc["state"]
    if st is None:
        return None, f"watchdog: no state in {state_dir}"
    lp = st["last_probe"] or {}
    running = "running" if doc["daemon"] else "[yellow]not running[/]"
    text = (
        f"watchdog: [bold]{st['phase']}[/] ({running}), {st['consecutive_failures']} failure(s), "
        f"last probe {lp.get('outcome', '-')}/{st['last_verdict'] or '-'} at {iso(lp.get('at'))}, "
        f"{len(st['restart_times'])} restart(s) in window"
    )
    if doc["hold"] and doc["hold"]["kind"] == "down":
        text += f", [bold]intentional stop[/] ({doc['hold']['reason']}): no restart until `up`"
    elif doc["hold"]:
        text += f", held until {iso(doc['hold']['until'])}: {doc['hold']['reason']}"
    if st["phase"] == "blind":
        text += f", [red]blind[/] since {iso(st['blind_since'])} (probe rejected: key/model)"
    if doc["undelivered_alerts"]:
        text += f", [red]{len(doc['undelivered_alerts'])} alert(s) undelivered[/]"
    return doc, text + _last_incident(doc, state_dir)


def _last_incident(doc: dict[str, Any], state_dir: str) -> str:
    """The newest incident dossier's suspect (issue 32), into ``doc["last_incident"]`` and as
    text for the line; nothing when there is none."""
    last = IncidentStore(state_dir).last()
    doc["last_incident"] = last
    if last is None:
        return ""
    who = f"suspect {last['suspect']}" if last.get("suspect") else "no single suspect"
    return escape(f", last incident {last['id']} ({iso(last.get('taken_at_unix_s'))}): {who}")
