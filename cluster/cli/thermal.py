"""`tpwarden thermal ...`: the thermal agent on one node and the morning report.

Mounted by the lead as ``tpwarden thermal``. This layer parses options, renders tables and
sets exit codes; the work lives in ``tpwarden.cluster.reports.thermal``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from tpwarden.cluster.cli.common import emit_json, handle_errors, load, plain
from tpwarden.cluster.cli.thermal_common import fmt_temp, print_unreachable
from tpwarden.cluster.cli.thermal_report import commands as report_commands
from tpwarden.cluster.cli.thermal_zones import commands as zones_commands
from tpwarden.cluster.durable import (
    THERMAL_BUDGET_MB,
    THERMAL_DIR,
    THERMAL_METRICS_HOST,
    THERMAL_METRICS_PORT,
)
from tpwarden.cluster.node_zipapp import THERMAL_AGENT, build_node_zipapp
from tpwarden.cluster.reports.thermal.remote import (
    LiveRow,
    NodeCall,
    NodePlan,
    StatusRow,
    UnitFacts,
    apply_plan,
    call_each_node,
    live_row,
    node_status_doc,
    plan_start,
    plan_stop,
    read_latest,
    read_units,
    status_row,
)
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.cluster.ssh.gateway import SshPool
from tpwarden.node.thermal.app import AgentOptions, run_agent

log = logging.getLogger("tpwarden.thermal")

app = typer.Typer(help="GPU and ACPI thermal logging: agent, report.", no_args_is_help=True)
app.add_typer(report_commands)  # `thermal report`, declared in its own module
app.add_typer(zones_commands)  # `thermal zones`, likewise

_DEFAULT_DIR = Path(THERMAL_DIR)
_SYS = Path("/sys")


@app.command()
@handle_errors
def agent(
    node: str = typer.Option(..., "--node", help="This node's name (as in the inventory)."),
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the JSON-lines files go.")
    ] = _DEFAULT_DIR,
    interval: float = typer.Option(10.0, "--interval", min=0.05, help="Seconds between samples."),
    metrics_port: int = typer.Option(
        THERMAL_METRICS_PORT, "--metrics-port", help="Port for /metrics (-1: off)."
    ),
    metrics_host: str = typer.Option(
        THERMAL_METRICS_HOST,
        "--metrics-host",
        help="Listen address of /metrics (loopback by default).",
    ),
    sysfs_root: Annotated[
        Path, typer.Option("--sysfs-root", help="Root of sysfs (a fake tree in the lab).")
    ] = _SYS,
    role: str | None = typer.Option(
        None, "--role", help="head or worker (recorded in each sample)."
    ),
    alert_margin: float | None = typer.Option(
        None, "--alert-margin", help="Alert when a zone is within this many C of its critical trip."
    ),
    max_file_mb: float = typer.Option(
        64.0, "--max-file-mb", min=0.01, help="Rotate files at this size."
    ),
    budget_mb: float = typer.Option(
        float(THERMAL_BUDGET_MB),
        "--budget-mb",
        min=1,
        help="Delete the oldest files beyond this total.",
    ),
    zone_role: Annotated[
        list[str], typer.Option("--zone-role", help="INDEX=ROLE for /metrics (repeatable).")
    ] = [],  # noqa: B006
) -> None:
    """Run the thermal agent on this node until SIGTERM or Ctrl-C (the unit's command)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_agent(
        AgentOptions(
            node=node, directory=directory, interval_s=interval, metrics_port=metrics_port,
            metrics_host=metrics_host,
            sysfs_root=sysfs_root, role=role, alert_margin_c=alert_margin,
            max_file_bytes=int(max_file_mb * 2**20), budget_bytes=int(budget_mb * 2**20),
            zone_roles=dict(x.split("=", 1) for x in zone_role if "=" in x) or None,
        )
    )  # fmt: skip


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


# -- all nodes: start, stop, status, watch (watchdog.thermal.remote does the work) ----------------
InvOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory file.")]
_INV = Path(os.environ.get("TPWARDEN_INVENTORY", "inventory.yml"))


# (node, its units) -> what to do there (`plan_start` / `plan_stop`)
MakePlan = Callable[[NodeSpec, dict[str, UnitFacts]], NodePlan]


def _node_timeout(spec: ClusterSpec) -> float:
    return float(spec.ssh.connect_timeout_s) * 4


def _plans(spec: ClusterSpec, pool: SshPool, make: MakePlan) -> list[NodeCall[NodePlan]]:
    t = _node_timeout(spec)
    return call_each_node(spec.nodes, lambda n: make(n, read_units(pool.session(n), t)))


def _run_plans(spec: ClusterSpec, make: MakePlan, dry_run: bool, as_json: bool, verb: str) -> None:

    console = Console()
    with SshPool(spec.ssh) as pool, tempfile.TemporaryDirectory() as tmp:
        planned = _plans(spec, pool, make)
        plans = {o.node: o.value for o in planned if o.ok and o.value is not None}
        failed = {o.node: o.error or "unknown error" for o in planned if not o.ok}
        if dry_run:
            doc = {n: [s.render() for s in p.steps] for n, p in plans.items()}
            if as_json:
                emit_json(f"thermal {verb}", {"ok": not failed, "dry_run": True, "plan": doc,
                                              "unreachable": failed})  # fmt: skip
            else:
                for n, steps in doc.items():
                    console.print(f"[bold]{plain(n)}[/]" + ("" if steps else ": nothing to do"))
                    for line in steps:
                        console.print(f"  {line}", highlight=False, markup=False)
                print_unreachable(console, failed)
            raise typer.Exit(1 if failed else 0)
        zipapp = build_node_zipapp(THERMAL_AGENT, Path(tmp) / "thermal-agent.pyz").path
        by_name = {n.name: n for n in spec.nodes}
        t = _node_timeout(spec)
        applied = call_each_node(
            [by_name[n] for n in plans],
            lambda n: apply_plan(pool.session(n), plans[n.name], zipapp, t),
        )
    rows = {o.node: ("ok", plans[o.node].unit or "-") for o in applied if o.ok}
    rows |= {o.node: (f"failed: {o.error}", "-") for o in applied if not o.ok}
    rows |= {n: (f"unreachable: {e}", "-") for n, e in failed.items()}
    if as_json:
        nodes = {n: {"result": r, "unit": u} for n, (r, u) in rows.items()}
        ok = all(r == "ok" for r, _ in rows.values())
        emit_json(f"thermal {verb}", {"ok": ok, "dry_run": False, "nodes": nodes})
    else:
        table = Table(title=f"thermal {verb}")
        for col in ("node", "unit", "result"):
            table.add_column(col)
        for n in sorted(rows):
            table.add_row(n, rows[n][1], rows[n][0])
        console.print(table)
    if any(r != "ok" for r, _ in rows.values()):
        raise typer.Exit(1)


@app.command()
@handle_errors
def start(
    inventory: InvOpt = _INV,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, change nothing."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Start the agent on every node: the installed tpwarden-thermal.service if present, else
    a copied zipapp as the transient unit tpwarden-thermal-agent (Restart=on-failure)."""
    spec = load(inventory)
    _run_plans(spec, lambda n, u: plan_start(spec, n, u), dry_run, as_json, "start")


@app.command("stop")
@handle_errors
def stop_cmd(
    inventory: InvOpt = _INV,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, change nothing."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Stop the agent on every node (whichever unit runs it)."""
    spec = load(inventory)
    _run_plans(spec, lambda n, u: plan_stop(n, u), dry_run, as_json, "stop")


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


@app.command()
@handle_errors
def status(
    inventory: InvOpt = _INV,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Per node: agent running, last sample age, samples today, disk vs budget, dropped records.
    Exit 1 unless every node runs an agent with a fresh sample."""

    spec = load(inventory)
    t = _node_timeout(spec)
    budget = int(spec.thermal.disk_budget_mb * 2**20)
    with SshPool(spec.ssh) as pool, tempfile.TemporaryDirectory() as tmp:
        built: list[Path] = []

        def zipapp() -> Path:  # only when a node has no installed agent
            if not built:
                built.append(build_node_zipapp(THERMAL_AGENT, Path(tmp) / "thermal-agent.pyz").path)
            return built[0]

        def one(n: NodeSpec) -> StatusRow:
            sess = pool.session(n)
            units = read_units(sess, t)
            return status_row(n.name, units, node_status_doc(sess, spec, n, zipapp, t), budget)

        outs = call_each_node(spec.nodes, one)
    rows = [
        o.value
        if o.ok and o.value is not None
        else StatusRow(node=o.node, reachable=False, reason=o.error)
        for o in outs
    ]
    stale_after = 3 * spec.thermal.interval_s + 2
    healthy = all(
        r.reachable and r.running and r.last_sample_age_s is not None
        and r.last_sample_age_s <= stale_after
        for r in rows
    )  # fmt: skip
    if as_json:
        emit_json("thermal status", {"ok": healthy, "nodes": [dataclasses.asdict(r) for r in rows]})
        raise typer.Exit(0 if healthy else 1)
    table = Table(title=f"thermal agents (every {spec.thermal.interval_s:g} s)")
    for col in ("node", "agent", "last sample", "today", "disk / budget", "dropped", "note"):
        table.add_column(col)
    for r in rows:
        if not r.reachable:
            table.add_row(r.node, "[red]unreachable[/]", "-", "-", "-", "-", r.reason or "")
            continue
        age = "-" if r.last_sample_age_s is None else f"{r.last_sample_age_s:g} s ago"
        if r.last_sample_age_s is not None and r.last_sample_age_s > stale_after:
            age = f"[yellow]{age}[/]"
        agent = f"{'[green]running[/]' if r.running else '[red]' + r.state + '[/]'}"
        if r.restarts:
            agent += f" ({r.restarts} restarts)"
        table.add_row(
            r.node, agent, age, str(r.samples_today if r.samples_today is not None else "-"),
            f"{_size(r.bytes_used)} / {_size(r.budget_bytes)}", str(r.dropped_today or 0),
            "; ".join(filter(None, [r.reason, *r.errors_in_latest])),
        )  # fmt: skip
    Console().print(table)
    raise typer.Exit(0 if healthy else 1)


@app.command()
@handle_errors
def watch(
    inventory: InvOpt = _INV,
    count: int = typer.Option(
        0, "--count", min=0, help="Stop after this many refreshes (0: never)."
    ),
    every: float | None = typer.Option(None, "--every", min=0.5, help="Seconds between refreshes."),
) -> None:
    """Live table of every node's latest sample (tail of its newest file over SFTP)."""
    spec = load(inventory)
    t = _node_timeout(spec)
    period = max(0.5, every or spec.thermal.interval_s)

    def table() -> Table:
        outs = call_each_node(
            spec.nodes, lambda n: read_latest(pool.session(n), spec.thermal.dir, n.name, t)
        )
        now = time.time()
        tb = Table(title=f"thermal, {_iso(now)} UTC (every {period:g} s; Ctrl-C ends)")
        # zone roles (thermal.zone_roles) name the hottest zone: "P-cores", not "acpitz"
        for col in ("node", "age", "GPU", "hottest zone", "to critical", "clock events", "note"):
            tb.add_column(col)
        for o in outs:
            r = (
                live_row(o.node, o.value, now, spec.thermal.zone_roles)
                if o.ok
                else LiveRow(node=o.node, note=o.error)
            )
            tb.add_row(
                o.node, "-" if r.age_s is None else f"{r.age_s:g} s",
                fmt_temp(r.gpu_temp_c), f"{fmt_temp(r.hottest_zone_c)} {r.hottest_zone or ''}",
                fmt_temp(r.margin_c), ", ".join(r.reasons) or "none",
                f"[red]{r.note}[/]" if not o.ok else (r.note or ""),
            )  # fmt: skip
        return tb

    shown = 0
    with SshPool(spec.ssh) as pool, Live(table(), auto_refresh=False) as live:
        try:
            while True:
                shown += 1
                if count and shown >= count:
                    break
                deadline = time.monotonic() + period
                while (left := deadline - time.monotonic()) > 0:
                    threading.Event().wait(left)
                live.update(table(), refresh=True)
        except KeyboardInterrupt:
            pass
