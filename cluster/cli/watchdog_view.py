"""Rendering of the watchdog's state document (`tpwarden.watchdog.state_doc`) for the CLI.

Shared by `tpwarden watchdog status` and the watchdog line of `tpwarden status`; and
`run_where_the_watchdog_is`, which sends `watchdog`/`incident` commands to the watchdog's host.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.markup import escape
from tpwarden.cluster.cli.common import load
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.state_doc import state_document


def iso(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def watchdog_line(state_dir: str) -> tuple[JSONObject | None, str]:
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


def _last_incident(doc: JSONObject, state_dir: str) -> str:
    """The newest incident dossier's suspect (issue 32), into ``doc["last_incident"]`` and as
    text for the line; nothing when there is none."""
    last = IncidentStore(state_dir).last()
    doc["last_incident"] = last
    if last is None:
        return ""
    who = f"suspect {last['suspect']}" if last.get("suspect") else "no single suspect"
    return escape(f", last incident {last['id']} ({iso(last.get('taken_at_unix_s'))}): {who}")


def run_where_the_watchdog_is(
    state_dir: Path | None, inventory: Path, command: tuple[str, ...], args: list[str]
) -> None:
    """With no --state-dir, a watchdog on another machine gets the command (its output relayed,
    its exit code ours); returns only when the watchdog runs here."""
    if state_dir is not None:
        return
    from tpwarden.watchdog.remote import (  # deferred: SSH only when remote
        NODE_TPWARDEN,
        run_on_watchdog_host,
        watchdog_place,
    )

    spec = load(inventory)
    place = watchdog_place(spec)
    if place.node is None:
        return
    rc, out, err = run_on_watchdog_host(spec, place.node, command, args)
    if rc == 127:  # the shell's "command not found"
        raise ConfigError(
            f"{place.host}: {NODE_TPWARDEN} not found (the watchdog runs there)",
            hint="provision the nodes first (`tpwarden provision`)",
        )
    sys.stdout.write(out)
    sys.stderr.write(err)
    raise typer.Exit(rc if rc in (0, 1, 2) else 1)
