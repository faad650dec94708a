"""Rendering of the watchdog's state document (`tpwarden.watchdog.state_doc`) for the CLI.

Shared by `tpwarden watchdog status` and the watchdog line of `tpwarden status`; and
`at_the_watchdog` and `--state-dir`, which `watchdog` and `incident` commands run on the
watchdog's host with.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from tpwarden.cluster.cli.common import load
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.state_doc import state_document

if TYPE_CHECKING:  # the relay's SSH is imported only when a command runs remotely
    from tpwarden.cluster.operations.watchdog_host import Relayed


# `--state-dir` of the commands that act on the watchdog's state (`watchdog ...`, `incident ...`)
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Watchdog state dir on this machine. Without it the command runs where the "
        "inventory's watchdog runs (tpwarden_watchdog_host: the head by default), over SSH.",
    ),
]


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


def at_the_watchdog(
    state_dir: Path | None, inventory: Path, command: tuple[str, ...], args: list[str]
) -> int | None:
    """With no --state-dir, where the inventory's watchdog runs on another machine, the command
    runs there: its output is passed on here and its exit code returned, for the command to
    exit with. None when the watchdog runs here (the command acts in-process)."""
    if state_dir is not None:
        return None
    from tpwarden.cluster.operations.watchdog_host import relay  # deferred: SSH only when remote

    return passed_on(relay(load(inventory), command, args))


def passed_on(relayed: Relayed | None) -> int | None:
    """The watchdog host's answer printed as ours; its exit code (None: nothing was relayed)."""
    if relayed is None:
        return None
    sys.stdout.write(relayed.stdout)
    sys.stderr.write(relayed.stderr)
    return relayed.exit_code
