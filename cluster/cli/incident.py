"""`tpwarden incident ...`: the incident dossiers (issue 32). Which rank hung, and where.

The watchdog stores one dossier with every restart under its state dir
(`tpwarden.watchdog.incidents`); `list` and `show` read them there. `capture` takes one of the
running server now, without restarting anything (on-call looking at a slow server).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load
from tpwarden.cluster.cli.narrow import short_frames, shorten, table_lines
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.watchdog_view import StateDirOption, at_the_watchdog, iso
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.incidents import IncidentStore

app = typer.Typer(
    help="Incident dossiers: which rank hung, and where (taken before every watchdog restart).",
    no_args_is_help=True,
)


_SUSPECT = re.compile(r"^suspect: \S+ \(rank [^)]*\): ")  # the suspect column says it


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
    # one row per dossier at any width: the verdict cut to its column (`show` has it whole)
    cells = [
        (
            str(r["id"]),
            iso(r.get("taken_at_unix_s")),
            str(r.get("suspect") or "-"),
            short_frames(_SUSPECT.sub("", str(r.get("summary") or r.get("error") or "-"))),
        )
        for r in rows
    ]
    lines = table_lines(("id", "taken", "suspect", "verdict"), cells, console.width)
    for i, line in enumerate(lines):
        say(line, console.width, "bold" if i == 0 else "")


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
    """The human view of a dossier, every line within the terminal's width (a long value is
    shortened: `--json` and the dossier file keep it whole)."""
    width = console.width
    v = doc.get("verdict") or {}
    took = doc.get("took_s", "?")
    say(f"{doc.get('id') or 'dossier'} at {iso(doc.get('taken_at_unix_s'))}, took {took} s", width)
    say(f"why: {doc.get('reason') or '-'}", width)
    if v.get("suspect"):
        say(f"suspect: {v['suspect']} (rank {v.get('rank')})", width, "bold red")
    else:  # "no single suspect: ..." says why
        say(str(v.get("summary") or "no verdict"), width, "yellow")
    for fact in v.get("facts") or []:
        say(f"  - {fact}", width)
    if doc.get("trimmed"):
        say(f"(trimmed to fit the store: {', '.join(doc['trimmed'])})", width)
    for name, node in (doc.get("nodes") or {}).items():
        _render_node(name, node, width)


def say(line: str, width: int, style: str = "") -> None:
    """One line, shortened to ``width``: never wrapped across the screen."""
    console.print(Text(shorten(line, width), style=style), no_wrap=True, overflow="ellipsis")


def _render_node(name: str, node: dict[str, Any], width: int) -> None:
    console.print()
    say(f"{name} (rank {node.get('rank')})", width, "bold")
    if node.get("error"):
        say(f"  did not answer: {node['error']}", width, "red")
        return
    c = node.get("container")
    state = "no serving container" if c is None else f"container {c.get('state')}"
    if c is not None and c.get("exit_code") is not None:
        state += f" (code {c['exit_code']})"
    say(f"  {state}", width)
    if node.get("collect_error"):
        say(f"  collector: {node['collect_error']}", width, "yellow")
    collected = node.get("collected") or {}
    in_container = collected.get("pid_namespace") == "container"
    for p in collected.get("processes") or []:
        _render_process(p, " (in the container)" if in_container else "", width)
    for e in (collected.get("kernel") or {}).get("events") or []:
        say(f"  kernel: {e.get('line')}", width, "red")
    for f in collected.get("findings") or []:
        say(f"  note: {f}", width, "dim")


def _render_process(p: dict[str, Any], where: str, width: int) -> None:
    """One line per process where it fits, else two: who it is and in what state; then what
    it does."""
    cpu = p.get("cpu_delta_s")
    who = f"  pid {p.get('pid')}{where} {p.get('comm')}: {p.get('state')} ({p.get('state_name')})"
    facts = (
        f"{'FROZEN ' if p.get('frozen') else ''}wchan={p.get('wchan') or '-'} "
        f"threads={p.get('threads')} cpu+{'?' if cpu is None else cpu}s "
        f"rss={int(p.get('rss_bytes') or 0) >> 20} MiB"
    )
    if len(who) + 1 + len(facts) <= width:
        say(f"{who} {facts}", width)
    else:
        say(who, width)
        say(f"    {facts}", width)
    stack = p.get("pyspy") or {}
    if stack.get("error"):
        say(f"    py-spy: {stack['error']}", width, "yellow")
    if stack.get("waiting_in"):
        say(f"    waits in {stack['waiting_in']}", width)
    threads = stack.get("threads") or []
    if threads and not stack.get("waiting_in"):
        top = threads[0]
        frames = top.get("frames") or []
        say(f"    {top.get('name') or top.get('id')}: {frames[0] if frames else '-'}", width)
