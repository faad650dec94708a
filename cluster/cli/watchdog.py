"""`tpwarden watchdog ...`: run the probe watchdog, show its state, hold and release it.

A thin layer: options, rendering (rich), exit codes. The work lives in `watchdog.*`; the daemon
owns `state.json`; the hold (`hold.json` and its event) is written by
`tpwarden.cluster.operations.watchdog_hold`, where the watchdog runs.

Examples:
    tpwarden watchdog run -i inventory.yml
    tpwarden watchdog status --json
    tpwarden watchdog hold --for 30m --reason "k=3 rollout"
    tpwarden watchdog release
    tpwarden watchdog history --limit 50
"""

from __future__ import annotations

import logging
import re
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load
from tpwarden.cluster.cli.narrow import pairs, table_lines
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.watchdog_view import StateDirOption, at_the_watchdog, iso, passed_on
from tpwarden.cluster.operations.watchdog_hold import (
    HoldKind,
    WatchdogHold,
    check_duration,
)
from tpwarden.watchdog.state_doc import events_document, state_document

app = typer.Typer(
    help="The probe watchdog: run it, see its state, hold or release it.", no_args_is_help=True
)

ByOption = Annotated[
    str | None,
    typer.Option("--by", help="Who, for the event log (default: you, at this machine)."),
]


# ---- helpers -----------------------------------------------------------------------------------
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str, option: str = "--for") -> float:
    """'30m', '2h', '1h30m', '90s', '1d' -> seconds."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise typer.BadParameter(f"{text!r}: use e.g. 30m, 2h, 1h30m, 90s", param_hint=option)
    return sum(float(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts)


def _state_dir(state_dir: Path | None, inventory: Path) -> str:
    if state_dir is not None:
        return str(state_dir)
    return load(inventory).watchdog.state_dir


def _hold(state_dir: Path | None, inventory: Path, by: str | None) -> WatchdogHold:
    """The watchdog's hold: in --state-dir here, else where the inventory's watchdog runs."""
    if state_dir is not None:
        return WatchdogHold.here(str(state_dir), by)
    return WatchdogHold.of(load(inventory), by)


# ---- commands ----------------------------------------------------------------------------------
@app.command("run")
@handle_errors
def run(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    applied: Annotated[
        Path | None,
        typer.Option(
            "--applied",
            help="Follow this applied-plan record (applied.json) instead of an inventory: what "
            "the provisioned watchdog does. Waits for the first `tpwarden up` if absent.",
        ),
    ] = None,
    ssh_key: Annotated[
        Path | None,
        typer.Option(
            "--ssh-key",
            exists=True,
            dir_okay=False,
            help="Private key for every node and jump host, in place of the plan's (which is "
            "the control machine's). The provisioned watchdog passes its own.",
        ),
    ] = None,
    known_hosts: Annotated[
        Path | None,
        typer.Option(
            "--known-hosts",
            exists=True,
            dir_okay=False,
            help="known_hosts file for every connection, in place of the plan's.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", help="Debug logging.")] = False,
) -> None:
    """Run the watchdog in the foreground until SIGTERM/SIGINT. It watches and restarts the
    applied plan (what `up`/`restart`/`rollout` last applied), following it when it changes.
    As provisioned on the head node, it reaches the nodes with its own key and known_hosts
    (--ssh-key, --known-hosts), not the control machine's that the plan names."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # only `watchdog run` needs the daemon, SSH and Docker (not --help, TAB or status)
    from tpwarden.cluster.ssh.identity import SshIdentity
    from tpwarden.watchdog.daemon import build_watchdog
    from tpwarden.watchdog.wiring import watched_plan

    identity = SshIdentity(
        str(ssh_key) if ssh_key else None, str(known_hosts) if known_hosts else None
    )
    cfg, actuator, follower = watched_plan(
        inventory,
        str(applied) if applied else None,
        str(state_dir) if state_dir else None,
        identity,
    )
    wd = build_watchdog(cfg, actuator, follow=follower)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: wd.stop())
    console.print(
        f"watchdog: probing {cfg.probe_url} every {cfg.interval_s:g}s "
        f"(timeout {cfg.timeout_s:g}s, {cfg.failures} failures), state in {cfg.state_dir}, "
        f"/metrics on {cfg.metrics_host}:{cfg.metrics_port}"
    )
    wd.run()


@app.command("status")
@handle_errors
def status(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """State, consecutive failures, last probe, restarts used of the budget, hold. Runs where
    the watchdog runs (see --state-dir)."""
    code = at_the_watchdog(state_dir, inventory, ("watchdog", "status"), ["--json"] * as_json)
    if code is not None:
        raise typer.Exit(code)
    sd = _state_dir(state_dir, inventory)
    doc = state_document(sd, time.time())
    if as_json:
        emit_json("watchdog status", doc)
        return
    st = doc["state"]
    if st is None:
        console.print(Text(f"no watchdog state in {sd} (never run?)"))
        raise typer.Exit(1)
    t = Table(show_header=False, box=None)
    t.add_row("phase", f"[bold]{st['phase']}[/]")
    t.add_row("daemon", "running" if doc["daemon"] else "[yellow]not running[/]")
    t.add_row("consecutive failures", str(st["consecutive_failures"]))
    lp = st["last_probe"] or {}
    t.add_row(
        "last probe",
        Text(
            f"{lp.get('outcome', '-')} ({st['last_verdict'] or '-'}) "
            f"{lp.get('latency_s', '-')}s at {iso(lp.get('at'))} {lp.get('detail', '')}"
        ),
    )
    t.add_row("last OK", iso(st["last_ok_at"]))
    t.add_row("restarts in window", str(len(st["restart_times"])))
    if st["boot_deadline_at"]:
        t.add_row("boot deadline", iso(st["boot_deadline_at"]))
    if st["incident_id"]:
        t.add_row("incident", Text(str(st["incident_id"])))
    h = doc["hold"]
    t.add_row("hold", Text(f"until {iso(h['until'])} by {h['by']}: {h['reason']}" if h else "none"))
    if h and h["kind"] == "down":
        t.add_row("", "[bold]intentional stop[/]: no restart until `tpwarden up`")
    if doc.get("hold_expired"):
        e = doc["hold_expired"]
        t.add_row("hold expired", Text(f"at {iso(e['until'])} ({e['reason']}), never released"))
    if st["phase"] == "blind":
        t.add_row("blind since", iso(st["blind_since"]))
    for a in doc["undelivered_alerts"]:
        t.add_row(
            "alert undelivered",
            Text(
                f"{a['category']}: {a['attempts']} attempt(s), next at "
                f"{iso(a['next_attempt_at'])}: {'; '.join(a['problems'] or [])}"
            ),
        )
    console.print(t)


@app.command("hold")
@handle_errors
def hold(
    duration: Annotated[str, typer.Option("--for", help="How long, e.g. 30m, 2h (max 7d).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the event log).")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    by: ByOption = None,
    kind: Annotated[
        HoldKind,
        typer.Option("--kind", hidden=True, help="down: an intentional stop (`tpwarden down`)."),
    ] = HoldKind.HOLD,
) -> None:
    """Suppress automatic restarts for a limited time (probing and recording continue), on the
    machine where the watchdog runs (see --state-dir)."""
    seconds = parse_duration(duration)
    check_duration(seconds, duration)
    done = _hold(state_dir, inventory, by).set(reason, seconds, kind, duration=duration)
    if (code := passed_on(done.relayed)) is not None:
        raise typer.Exit(code)
    console.print(Text(f"restarts held until {iso(done.until)}: {reason}"))


@app.command("release")
@handle_errors
def release(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    by: ByOption = None,
) -> None:
    """End an operator hold, and re-arm restarts after an automatic hold or give-up, where the
    watchdog runs (see --state-dir)."""
    if (code := passed_on(_hold(state_dir, inventory, by).lift().relayed)) is not None:
        raise typer.Exit(code)
    console.print("released: automatic restarts re-armed (takes effect at the next probe)")


@app.command("history")
@handle_errors
def history(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    limit: Annotated[int, typer.Option(min=1, help="Last N events.")] = 50,
    probes: Annotated[bool, typer.Option(help="Include every probe record.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Events from events.jsonl: decisions, restarts (with evidence), alerts, holds, where the
    watchdog runs (see --state-dir)."""
    args = [
        "--limit",
        str(limit),
        *(["--probes"] if probes else []),
        *(["--json"] if as_json else []),
    ]
    code = at_the_watchdog(state_dir, inventory, ("watchdog", "history"), args)
    if code is not None:
        raise typer.Exit(code)
    doc = events_document(_state_dir(state_dir, inventory), limit, probes)
    if as_json:
        emit_json("watchdog history", doc)
        return
    # one line per event at any width: the detail as key=value pairs, long values shortened
    # (--json and events.jsonl keep them whole; evidence and metrics are in --json only)
    events, skipped = doc["events"], doc["skipped_lines"]
    values = max(40, console.width - 40)
    rows = [(iso(e.get("ts")), str(e.get("kind")), pairs(_detail(e), values)) for e in events]
    for i, line in enumerate(table_lines(("time", "event", "detail"), rows, console.width)):
        console.print(Text(line, style="bold" if i == 0 else ""), no_wrap=True, overflow="crop")
    if skipped:
        console.print(f"[yellow]{skipped} unreadable line(s) skipped[/]")


def _detail(event: dict[str, object]) -> dict[str, object]:
    """An event's fields for its table line: all but its time, its kind and the bulky evidence
    and metrics."""
    return {k: v for k, v in event.items() if k not in ("ts", "kind", "evidence", "metrics")}
