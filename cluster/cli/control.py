"""CLI for cluster control: up, down, restart, status, logs, boot, clocks.

The lead mounts these on the main app (`register(app)`); each takes `-i/--inventory`.
Rendering (tables, progress bars, exit codes) lives here and only here.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from servectl.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    err_console,
    handle_errors,
    load,
)
from servectl.cluster.cli.watchdog import watchdog_line
from servectl.cluster.control import ApplyResult, BootResult, ControlEvent, Controller
from servectl.cluster.control_plan import Action, ControlPlan
from servectl.cluster.errors import ConfigError
from servectl.cluster.status import ClusterStatus

clocks_app = typer.Typer(
    help="Show, cap or reset GPU clocks on every node (NVML).", no_args_is_help=True
)

DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]
Timeout = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the server.")]


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _print_plan(plan: ControlPlan) -> None:
    table = Table(title=f"plan for {plan.cluster} (config {plan.config_hash})")
    for col in ("node", "action", "reason", "remove", "argv"):
        table.add_column(col, overflow="fold")
    for s in plan.steps:
        argv = " ".join(s.container.vllm_argv) if s.container is not None else ""
        table.add_row(s.node, s.action.value, s.reason, ", ".join(s.remove), argv)
    console.print(table)
    if plan.waves:
        console.print("start order: " + " -> ".join("+".join(w) for w in plan.waves))
    if not plan.changes:
        console.print("[green]nothing to change[/]")


class _BootView:
    """Event callback that drives one rich progress bar (phase, shards a/b, ETA)."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("eta {task.fields[eta]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(
            "boot", total=1.0, phase="starting", eta="-", visible=False
        )

    def __call__(self, ev: ControlEvent) -> None:
        if ev.progress is None or ev.kind not in ("boot", "ready", "failed"):
            if ev.kind in ("remove", "start", "preflight", "info"):
                self.progress.console.print(f"[dim]{ev.node or '*'}[/] {ev.message}")
            return
        p = ev.progress
        eta = "no history" if p.eta_s is None and not p.failed else _fmt_s(p.eta_s)
        self.progress.update(
            self.task, completed=p.fraction, phase=p.describe(), eta=eta, visible=True
        )


def _report(result: ApplyResult) -> int:
    failed = [o for o in result.outcomes if not o.ok]
    for o in failed:
        err_console.print(f"[red]{o.node}[/]: {o.message}")
    if result.boot is not None:
        _report_boot(result.boot)
    return 0 if result.ok else 1


def _report_boot(boot: BootResult) -> None:
    if boot.ready:
        p = boot.progress
        console.print(
            f"[green]ready[/] in {_fmt_s(boot.elapsed_s)}"
            + (
                f", KV cache {p.kv_cache_gib} GiB / {p.kv_cache_tokens} tokens"
                if p.kv_cache_gib
                else ""
            )
        )
        return
    err_console.print(f"[red]boot failed[/] after {_fmt_s(boot.elapsed_s)}: {boot.reason}")
    for node, text in boot.last_lines.items():
        err_console.rule(node)
        err_console.print(text, markup=False, highlight=False)


def up(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a drifted config.")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return once started.")] = False,
    dry_run: DryRun = False,
    timeout: Timeout = 2400.0,
) -> None:
    """Start the server on every node (idempotent), then follow the boot until it answers."""
    spec = load(inventory)
    view = _BootView()
    with Controller(spec, on_event=view) as ctl:
        plan = ctl.plan_up(replace)
        if dry_run:
            _print_plan(plan)
            raise typer.Exit(3 if plan.refused else 0)
        with view.progress:
            result = ctl.up(replace, wait_ready=not no_wait, timeout_s=timeout, plan=plan)
    raise typer.Exit(_report(result))


def down(inventory: InventoryOption = DEFAULT_INVENTORY, dry_run: DryRun = False) -> None:
    """Stop and remove the serving containers on every node (found by label)."""
    spec = load(inventory)
    with Controller(spec, on_event=lambda e: console.print(f"[dim]{e.node}[/] {e.message}")) as ctl:
        plan = ctl.plan_down()
        if dry_run or not plan.changes:
            _print_plan(plan)
            raise typer.Exit(0)
        raise typer.Exit(_report(ctl.down(plan)))


def restart(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (event log).")] = "manual",
    dry_run: DryRun = False,
    timeout: Timeout = 2400.0,
    no_wait: Annotated[bool, typer.Option("--no-wait")] = False,
) -> None:
    """Down + up with one plan; the restart is recorded in the event log."""
    spec = load(inventory)
    view = _BootView()
    with Controller(spec, on_event=view) as ctl:
        plan = ctl.plan_restart()
        _print_plan(plan)
        if dry_run:
            raise typer.Exit(0)
        if not yes and not typer.confirm(f"restart {spec.name} on {len(spec.nodes)} nodes?"):
            raise typer.Exit(1)
        with view.progress:
            result = ctl.restart(reason, timeout_s=timeout, wait_ready=not no_wait)
    raise typer.Exit(_report(result))


def _status_table(st: ClusterStatus) -> Table:
    colour = "green" if st.ok else "red"
    t = Table(
        title=f"{st.cluster}: [{colour}]{st.verdict.value}[/] (config {st.config_hash}, "
        f"{st.elapsed_s:.2f} s)"
    )
    for col in (
        "node",
        "role",
        "reach",
        "container",
        "up",
        "config",
        "GPU °C",
        "SM MHz",
        "W",
        "cap",
        "events",
    ):
        t.add_column(col, overflow="fold")
    for n in st.nodes:
        g = n.gpus[0] if n.gpus else {}
        t.add_row(
            n.node,
            n.role,
            "yes" if n.reachable else f"[red]no[/]: {n.reason}",
            n.state or "-",
            _fmt_s(n.uptime_s),
            "-"
            if not n.config_hash
            else (f"[yellow]{n.config_hash} (drift)[/]" if n.drift else n.config_hash),
            str(g.get("temp_c", "-")),
            str(g.get("sm_clock_mhz", "-")),
            str(g.get("power_w", "-")),
            str(g.get("locked_clock_max_mhz") or "-"),
            ",".join(g.get("clock_event_reasons") or []) or (n.gpu_reason or "-"),
        )
    return t


def _server_table(st: ClusterStatus) -> Table:
    s = st.server
    t = Table(title="server", show_header=False)
    t.add_column("k")
    t.add_column("v")
    t.add_row("url", s.url)
    t.add_row("health", str(s.health_status or s.health_error))
    t.add_row("model", f"{s.model} (max_model_len {s.max_model_len})")
    t.add_row("drafter k", str(s.drafter_k))
    t.add_row(
        "1-token probe", f"{s.probe_latency_ms} ms" if s.probe_ok else f"[red]{s.probe_error}[/]"
    )
    t.add_row("running / waiting", f"{s.requests_running} / {s.requests_waiting}")
    t.add_row("KV cache usage", f"{s.kv_cache_usage_pct} %")
    for note in st.notes:
        t.add_row("note", note)
    return t


def status(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
    watch: Annotated[
        float, typer.Option("--watch", min=0, help="Refresh every N s (0: once).")
    ] = 0,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Per-node seconds.")] = 5.0,
) -> None:
    """One screen: every node (reachable, container, drift, GPU) and the server; exit 0 only
    if all is well."""
    spec = load(inventory)
    with Controller(spec, node_timeout_s=timeout) as ctl:
        while True:
            st = ctl.status(timeout_s=timeout)
            wd_doc, wd_text = watchdog_line(spec.watchdog.state_dir)
            if as_json:
                print(json.dumps({**st.to_json(), "watchdog": wd_doc}, default=str))
            else:
                if watch:
                    console.clear()
                console.print(_status_table(st))
                console.print(_server_table(st))
                console.print(wd_text)
            if not watch:
                break
            time.sleep(watch)
    raise typer.Exit(0 if st.ok else 1)


def logs(
    node: Annotated[str | None, typer.Argument(help="Node (default: all).")] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    tail: Annotated[int, typer.Option("--tail", "-n", min=0)] = 100,
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
        for name, text in ctl.logs(node, tail=tail).items():
            console.rule(name)
            console.print(text, markup=False, highlight=False)


def boot(inventory: InventoryOption = DEFAULT_INVENTORY, timeout: Timeout = 2400.0) -> None:
    """Attach to a boot in progress: phase, shards, ETA, until the server answers."""
    spec = load(inventory)
    view = _BootView()
    with Controller(spec, on_event=view) as ctl, view.progress:
        result = ctl.attach_boot(timeout_s=timeout)
    _report_boot(result)
    raise typer.Exit(0 if result.ready else 1)


def _clock_report(results, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "node": r.node,
                        "ok": r.ok,
                        "message": r.message,
                        "gpus": [dict(g) for g in r.gpus],
                    }
                    for r in results
                ]
            )
        )
    else:
        t = Table(title="GPU clocks")
        for col in ("node", "GPU", "SM MHz", "max MHz", "cap MHz", "ok"):
            t.add_column(col)
        for r in sorted(results, key=lambda r: r.node):
            for g in r.gpus or [{}]:
                t.add_row(
                    r.node,
                    str(g.get("index", "-")),
                    str(g.get("sm_clock_mhz", "-")),
                    str(g.get("sm_clock_max_mhz", "-")),
                    str(g.get("locked_clock_max_mhz") or "-"),
                    "[green]ok[/]" if r.ok else f"[red]{r.message}[/]",
                )
        console.print(t)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


@clocks_app.command("show")
@handle_errors
def clocks_show(inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False):
    """Read SM clocks and the locked cap on every node."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("show"), as_json)


@clocks_app.command("cap")
@handle_errors
def clocks_cap(
    mhz: Annotated[int, typer.Argument(min=200, max=5000, help="Max SM clock, MHz.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
):
    """Lock SM clocks to 0..MHZ on every node (like nvidia-smi -lgc 0,MHZ) and read it back."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("cap", mhz), as_json)


@clocks_app.command("reset")
@handle_errors
def clocks_reset(inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False):
    """Remove the clock cap on every node and read it back."""
    with Controller(load(inventory)) as ctl:
        _clock_report(ctl.clocks("reset"), as_json)


def register(app: typer.Typer) -> None:
    """Mount the control commands on the main `servectl` app."""
    for fn in (up, down, restart, status, logs, boot):
        app.command(fn.__name__)(handle_errors(fn))
    app.add_typer(clocks_app, name="clocks")


__all__ = ["register", "clocks_app", "Action"]
