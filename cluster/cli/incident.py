"""`tpwarden incident ...`: the incident dossiers (issue 32). Which rank hung, and where.

The watchdog stores one dossier with every restart under its state dir
(`tpwarden.watchdog.incidents`); `list` and `show` read them there. `capture` takes one of the
running server now, without restarting anything (on-call looking at a slow server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.watchdog_view import StateDirOption, at_the_watchdog, iso
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.incidents import IncidentStore

app = typer.Typer(
    help="Incident dossiers: which rank hung, and where (taken before every watchdog restart).",
    no_args_is_help=True,
)


def _json_flag(as_json: bool) -> list[str]:
    return ["--json"] if as_json else []


def _store(state_dir: Path | None, inventory: Path) -> IncidentStore:
    sd = str(state_dir) if state_dir is not None else load(inventory).watchdog.state_dir
    return IncidentStore(sd)


@app.command("list")
@handle_errors
def list_incidents(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """The stored dossiers, newest first: when, why, and the suspect. Read where the watchdog
    runs (over SSH unless --state-dir names a directory here)."""
    code = at_the_watchdog(state_dir, inventory, ("incident", "list"), _json_flag(as_json))
    if code is not None:
        raise typer.Exit(code)
    store = _store(state_dir, inventory)
    rows = store.summaries()
    if as_json:
        emit_json("incident list", {"dir": str(store.dir), "incidents": rows})
        return
    if not rows:
        console.print(Text(f"no incident dossiers in {store.dir}"))
        return
    t = Table("id", "taken", "suspect", "verdict")
    for r in rows:
        verdict = r.get("summary") or r.get("error") or "-"
        suspect = Text(str(r.get("suspect") or "-"))
        t.add_row(Text(str(r["id"])), iso(r.get("taken_at_unix_s")), suspect, Text(verdict))
    console.print(t)


@app.command("show")
@handle_errors
def show(
    incident_id: Annotated[str, typer.Argument(help="The id `incident list` shows.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """One dossier: the verdict and the facts it rests on, then every node's processes,
    stacks and kernel events. Read where the watchdog runs (see `incident list`)."""
    args = [incident_id, *_json_flag(as_json)]
    if (code := at_the_watchdog(state_dir, inventory, ("incident", "show"), args)) is not None:
        raise typer.Exit(code)
    store = _store(state_dir, inventory)
    doc = store.load(incident_id)
    if doc is None:
        raise TpwardenError(f"no incident {incident_id!r} in {store.dir} (see `incident list`)")
    if as_json:
        emit_json("incident show", {"incident": doc})
        return
    render(doc)


@app.command("capture")
@handle_errors
def capture_now(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    timeout: Annotated[
        float, typer.Option(min=2.0, max=60.0, help="Seconds for all nodes together.")
    ] = 10.0,
    as_json: JsonOption = False,
) -> None:
    """Take a dossier of the running server now, restarting nothing (stacks, process states,
    kernel log, GPU facts of every rank). Nothing is stored."""
    from tpwarden.cluster.control.controller import Controller  # not for --help or TAB
    from tpwarden.cluster.reports.incident import capture

    spec = load(inventory)
    with Controller(spec) as ctl:
        doc = capture(spec, ctl.nodes, "on demand (tpwarden incident capture)", timeout_s=timeout)
    if as_json:
        emit_json("incident capture", {"incident": doc})
        return
    render(doc)


def render(doc: dict[str, Any]) -> None:
    """The human view of a dossier."""
    v = doc.get("verdict") or {}
    head = f"{doc.get('id') or 'dossier'} at {iso(doc.get('taken_at_unix_s'))}"
    console.print(Text(f"{head} ({doc.get('took_s', '?')} s): {doc.get('reason') or ''}"))
    style = "bold red" if v.get("suspect") else "yellow"
    console.print(Text(str(v.get("summary") or "no verdict"), style=style))
    for fact in v.get("facts") or []:
        console.print(Text(f"  - {fact}"))
    if doc.get("trimmed"):
        console.print(Text(f"(trimmed to fit the store: {', '.join(doc['trimmed'])})"))
    for name, node in (doc.get("nodes") or {}).items():
        _render_node(name, node)


def _render_node(name: str, node: dict[str, Any]) -> None:
    console.print(Text(f"\n{name} (rank {node.get('rank')})", style="bold"))
    if node.get("error"):
        console.print(Text(f"  did not answer: {node['error']}", style="red"))
        return
    c = node.get("container")
    state = "no serving container" if c is None else f"container {c.get('state')}"
    if c is not None and c.get("exit_code") is not None:
        state += f" (code {c['exit_code']})"
    console.print(Text(f"  {state}"))
    if node.get("collect_error"):
        console.print(Text(f"  collector: {node['collect_error']}", style="yellow"))
    collected = node.get("collected") or {}
    in_container = collected.get("pid_namespace") == "container"
    for p in collected.get("processes") or []:
        _render_process(p, " (in the container)" if in_container else "")
    for e in (collected.get("kernel") or {}).get("events") or []:
        console.print(Text(f"  kernel: {e.get('line')}", style="red"))
    for f in collected.get("findings") or []:
        console.print(Text(f"  note: {f}", style="dim"))


def _render_process(p: dict[str, Any], where: str = "") -> None:
    cpu = p.get("cpu_delta_s")
    line = (
        f"  pid {p.get('pid')}{where} {p.get('comm')}: {p.get('state')} ({p.get('state_name')})"
        f"{' FROZEN' if p.get('frozen') else ''}"
        f" wchan={p.get('wchan') or '-'} threads={p.get('threads')}"
        f" cpu+{'?' if cpu is None else cpu}s rss={int(p.get('rss_bytes') or 0) >> 20} MiB"
    )
    console.print(Text(line))
    stack = p.get("pyspy") or {}
    if stack.get("error"):
        console.print(Text(f"    py-spy: {stack['error']}", style="yellow"))
    if stack.get("waiting_in"):
        console.print(Text(f"    waits in {stack['waiting_in']}"))
    threads = stack.get("threads") or []
    if threads and not stack.get("waiting_in"):
        top = threads[0]
        frames = top.get("frames") or []
        console.print(
            Text(f"    {top.get('name') or top.get('id')}: {frames[0] if frames else '-'}")
        )
