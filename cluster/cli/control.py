"""CLI for cluster control: up, down, restart, status, logs, boot, clocks.

`commands` holds them, merged into the main app (the `boot` command is `cli.boot`'s); each
takes `-i/--inventory`.
Rendering (tables, progress bars, exit codes) lives here and only here.
"""

from __future__ import annotations

import time
from typing import Annotated

import tpwarden.cluster.cli.completion_values as values
import typer
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.cli.boot import BootView, print_crash, print_notes, report_boot
from tpwarden.cluster.cli.boot import commands as boot_commands
from tpwarden.cluster.cli.common import (
    console,
    emit_json,
    err_console,
    error_line,
    handle_errors,
    load,
    plain,
)
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.watchdog_view import watchdog_line
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import ApplyResult, ClockResult, ControlEvent
from tpwarden.cluster.control.status_model import ClusterStatus
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.operations import control as operations
from tpwarden.cluster.reports.status_view import REASON_MIN, status_view

commands = typer.Typer()
clocks_app = typer.Typer(
    help="Show, cap or reset GPU clocks on every node (NVML).", no_args_is_help=True
)
commands.add_typer(boot_commands)
commands.add_typer(clocks_app, name="clocks")

DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]
Timeout = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the server.")]


def _print_plan(plan: ControlPlan) -> None:
    table = Table(title=f"plan for {plan.cluster} (config {plan.config_hash})")
    for col in ("node", "action", "reason", "remove", "argv"):
        table.add_column(col, overflow="fold")
    for s in plan.steps:
        argv = " ".join(s.container.vllm_argv) if s.container is not None else ""
        cells = (s.node, s.action.value, s.reason, ", ".join(s.remove), argv)
        table.add_row(*(Text(c) for c in cells))  # user text (argv, reasons): never markup
    console.print(table)
    if plan.waves:
        console.print("start order: " + " -> ".join("+".join(w) for w in plan.waves))
    if not plan.changes:
        console.print("[green]nothing to change[/]")


def _report(done: operations.Operated, command: str, as_json: bool = False) -> int:
    """Render what `up`, `down` or `restart` did; the ledger's record of a server that became
    healthy goes into --json as `ledger` (its id, cfg, whether it changed; or its error)."""
    result = done.result
    code = 0 if result.ok else 1
    if as_json:
        ledger: JSONObject = {} if done.ledger is None else {"ledger": done.ledger.to_json()}
        emit_json(command, apply_json(result) | ledger)
        return code
    failed = [o for o in result.outcomes if not o.ok]
    for o in failed:
        err_console.print(f"[red]{plain(o.node)}[/]: {plain(o.message)}")
    if result.boot is not None:
        report_boot(result.boot)
    return code


def apply_json(result: ApplyResult) -> JSONObject:
    """What up/down/restart did, as JSON (schema_version in cli.common)."""
    boot = result.boot
    return {
        "ok": result.ok,
        "dry_run": False,
        "plan": result.plan.to_json(),
        "outcomes": [{"node": o.node, "ok": o.ok, "message": o.message} for o in result.outcomes],
        "boot": None
        if boot is None
        else {
            "ready": boot.ready,
            "elapsed_s": boot.elapsed_s,
            "reason": boot.reason,
            "phase": boot.progress.describe(),
            "kv_cache_gib": boot.progress.kv_cache_gib,
            "kv_cache_tokens": boot.progress.kv_cache_tokens,
        },
        "transport": dict(result.transport) if result.transport is not None else None,
    }


def _show_plan(plan: ControlPlan, command: str, as_json: bool) -> None:
    if as_json:
        emit_json(command, {"ok": not plan.refused, "dry_run": True, "plan": plan.to_json()})
    else:
        _print_plan(plan)


def _quiet(_ev: ControlEvent) -> None:
    """With --json, progress stays off stdout (one JSON document there, nothing else)."""


@commands.command("up")
@handle_errors
def up(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a drifted config.")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return once started.")] = False,
    dry_run: DryRun = False,
    timeout: Timeout = 2400.0,
    as_json: JsonOption = False,
) -> None:
    """Start the server on every node (idempotent), then follow the boot until it answers.
    With --dry-run, exit 1 when the plan is refused (config drift without --replace)."""
    spec = load(inventory)
    view = BootView()
    with Controller(spec, on_event=_quiet if as_json else view) as ctl:
        plan = ctl.plan_up(replace)
        if dry_run:
            _show_plan(plan, "up", as_json)
            raise typer.Exit(1 if plan.refused else 0)
        done = operations.up(
            ctl,
            plan,
            replace=replace,
            wait_ready=not no_wait,
            timeout_s=timeout,
            showing=None if as_json else view.progress,
        )
    raise typer.Exit(_report(done, "up", as_json))


@commands.command("down")
@handle_errors
def down(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
) -> None:
    """Stop and remove the serving containers on every node (found by label)."""
    spec = load(inventory)

    def show(e: ControlEvent) -> None:
        console.print(f"[dim]{plain(e.node)}[/] {plain(e.message)}")

    with Controller(spec, on_event=_quiet if as_json else show) as ctl:
        plan = ctl.plan_down()
        if dry_run or not plan.changes:
            _show_plan(plan, "down", as_json)
            raise typer.Exit(0)
        result = operations.down(ctl, plan)
    raise typer.Exit(_report(operations.Operated(result), "down", as_json))


@commands.command("restart")
@handle_errors
def restart(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (event log).")] = "manual",
    dry_run: DryRun = False,
    timeout: Timeout = 2400.0,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Return once started; do not wait for the server.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Down + up with one plan; the restart is recorded in the event log. --json needs --yes
    (or --dry-run): a prompt would corrupt the JSON on stdout."""
    if as_json and not (yes or dry_run):
        raise ConfigError("restart --json asks nothing", key="--json", hint="add --yes")
    spec = load(inventory)
    view = BootView()
    with Controller(spec, on_event=_quiet if as_json else view) as ctl:
        plan = ctl.plan_restart()
        if dry_run or not as_json:
            _show_plan(plan, "restart", as_json)
        if dry_run:
            raise typer.Exit(0)
        if not yes and not typer.confirm(f"restart {spec.name} on {len(spec.nodes)} nodes?"):
            raise typer.Exit(1)
        done = operations.restart(
            ctl,
            reason,
            timeout_s=timeout,
            wait_ready=not no_wait,
            showing=None if as_json else view.progress,
        )
    raise typer.Exit(_report(done, "restart", as_json))


WIDE_WIDTH = 400


def status_renderables(
    st: ClusterStatus, width: int, wide: bool = False, zone_roles: dict[str, str] | None = None
) -> list[Table]:
    """The status screen for a terminal ``width`` columns wide (see cluster.reports.status_view)."""
    view = status_view(st, width, wide, zone_roles)
    colour = "green" if view.ok else "red"
    title = view.title.replace(st.verdict.value, f"[{colour}]{st.verdict.value}[/]", 1)
    nodes = Table(title=title, title_justify="left")
    for key, header in zip(view.keys, view.headers, strict=True):
        if key == "reason":  # the only column that may wrap, and only between words
            nodes.add_column(header, overflow="fold", min_width=REASON_MIN)
        else:
            nodes.add_column(header, no_wrap=True)
    for row in view.rows:
        verdict = row[view.keys.index("verdict")]
        style = "green" if verdict == "ok" else ("yellow" if verdict == "drift" else "red")
        nodes.add_row(
            *(
                f"[{style}]{c}[/]" if k == "verdict" else Text(c)
                for k, c in zip(view.keys, row, strict=True)
            )
        )
    # no frame: the on-call screen of a healthy cluster fits in 20 lines at 80 columns
    server = Table(title="server", show_header=False, title_justify="left", box=None)
    server.add_column("k", no_wrap=True)
    server.add_column("v", overflow="fold")
    for k, v in view.server:
        server.add_row(k, Text(v))
    for note in view.notes:
        server.add_row("note", Text(note))
    return [nodes, server]


def _print_status(st: ClusterStatus, wide: bool, zone_roles: dict[str, str] | None = None) -> None:
    width = console.width
    try:
        if wide:  # the natural width even on a narrow terminal: rich would squeeze every cell
            console.width = WIDE_WIDTH
        for table in status_renderables(st, width, wide, zone_roles):
            console.print(table, crop=not wide)
    finally:
        console.width = width


@commands.command("status")
@handle_errors
def status(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
    watch: Annotated[
        float, typer.Option("--watch", min=0, help="Refresh every N s (0: once).")
    ] = 0,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Per-node seconds.")] = 5.0,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column, however wide the terminal.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also the boot notes of a healthy server (--json has them)."
        ),
    ] = False,
) -> None:
    """One screen: every node (reachable, container, drift, GPU) and the server; exit 0 only
    if all is well. The boot's notes (non-fatal warnings) show when the server is not healthy,
    or with --verbose."""
    spec = load(inventory)
    with Controller(spec, node_timeout_s=timeout) as ctl:
        while True:
            st = ctl.status(timeout_s=timeout)
            wd_doc, wd_text = watchdog_line(spec.watchdog.state_dir)
            boot_state = _head_boot(ctl)
            if as_json:
                doc = {**st.to_json(), "watchdog": wd_doc}
                doc["boot"] = boot_state.to_json() if boot_state is not None else None
                emit_json("status", doc)
            else:
                if watch:
                    console.clear()
                _print_status(st, wide, dict(getattr(spec.thermal, "zone_roles", {}) or {}))
                console.print(wd_text)
                if boot_state is not None:
                    console.print(f"boot: {plain(boot_state.describe())}", highlight=False)
                    if not any(n.startswith("crash: ") for n in st.notes):
                        print_crash(boot_state.crash)  # the head's log: a worker that died
                    _status_notes(boot_state, st.ok, verbose)
                if st.transport is not None:  # NCCL's network per rank (warnings: notes)
                    console.print(plain(str(st.transport["summary"])), highlight=False)
            if not watch:
                break
            time.sleep(watch)
    raise typer.Exit(0 if st.ok else 1)


def _status_notes(boot_state: BootProgress, healthy: bool, verbose: bool) -> None:
    """The on-call screen shows what matters: a healthy server's boot notes (ulimit, eager mode,
    ...) only on request; one line says how many there are."""
    if not boot_state.notes:
        return
    if healthy and not verbose:
        n = len(boot_state.notes)
        console.print(f"[dim]{n} boot note{'s' if n > 1 else ''} (--verbose shows them)[/]")
        return
    print_notes(boot_state.notes, limit=6)


def _head_boot(ctl: Controller) -> BootProgress | None:
    """The head log's boot verdict and notes (non-fatal ERROR/WARNING lines) for `status`; a
    node that cannot be read leaves it out rather than failing the status screen."""
    try:
        return ctl.boot_progress()
    except TpwardenError:
        return None


@commands.command("logs")
@handle_errors
def logs(
    node: Annotated[
        str | None, typer.Argument(help="Node (default: all).", autocompletion=values.nodes)
    ] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until Ctrl-C.")
    ] = False,
    tail: Annotated[
        int, typer.Option("--tail", "-n", min=0, help="Lines from the end of each log first.")
    ] = 100,
) -> None:
    """Show (or follow) the serving containers' logs."""
    spec = load(inventory)
    names = [n.name for n in spec.nodes]
    if node is not None and node not in names:
        raise ConfigError(
            f"no node {node!r} in {inventory}", key="NODE", hint=f"one of: {', '.join(names)}"
        )
    with Controller(spec) as ctl:
        if follow:
            try:
                for name, line in ctl.follow_logs(node, tail=tail):
                    # log lines are not markup: a "[/]" in them must print as written
                    console.print(Text.assemble((name, "cyan"), " ", line), highlight=False)
            except KeyboardInterrupt:
                pass
            return
        unread = []
        for name, text in ctl.logs(node, tail=tail).items():
            console.rule(name)
            # a node that could not be read comes back as "<its error>" (control.logs.tail_logs)
            if text.startswith("<") and text.endswith(">") and "\n" not in text:
                unread.append(name)
                err_console.print(error_line(f"{name}: not read: {text[1:-1]}"), soft_wrap=True)
                continue
            console.print(text, markup=False, highlight=False)
    if unread:
        raise typer.Exit(1)


def _clock_report(results: list[ClockResult], as_json: bool) -> None:
    if as_json:
        nodes = [
            {"node": r.node, "ok": r.ok, "message": r.message, "gpus": [dict(g) for g in r.gpus]}
            for r in results
        ]
        emit_json("clocks", {"ok": all(r.ok for r in results), "nodes": nodes})
    else:
        t = Table(title="GPU clocks")
        for col in ("node", "GPU", "SM MHz", "max MHz", "cap MHz", "cap (lock call's answer)"):
            t.add_column(col)
        for r in sorted(results, key=lambda r: r.node):
            for g in r.gpus or [{}]:
                t.add_row(
                    Text(r.node),
                    str(g.get("index", "-")),
                    str(g.get("sm_clock_mhz", "-")),
                    str(g.get("sm_clock_max_mhz", "-")),
                    str(g.get("locked_clock_max_mhz") or "-"),
                    Text(r.message, "green" if r.ok else "red"),
                )
        console.print(t)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


@clocks_app.command("show")
@handle_errors
def clocks_show(
    inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False
) -> None:
    """Read SM clocks and each node's record of its clock cap (NVML has no read-back)."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("show"), as_json)


@clocks_app.command("cap")
@handle_errors
def clocks_cap(
    mhz: Annotated[int, typer.Argument(min=200, max=5000, help="Max SM clock, MHz.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Lock SM clocks to 0..MHZ on every node (like nvidia-smi -lgc 0,MHZ); the driver's answer
    is recorded on each node (NVML has no read-back)."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("cap", mhz), as_json)


@clocks_app.command("reset")
@handle_errors
def clocks_reset(
    inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False
) -> None:
    """Remove the clock cap on every node (like nvidia-smi -rgc); the answer is recorded."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("reset"), as_json)
