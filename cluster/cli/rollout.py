"""`tpwarden rollout` and `tpwarden rollback`: change the launcher config safely.

Examples:
    tpwarden rollout -i inv.yml --set drafter.num_speculative_tokens=3 --bench quick \\
        --guard "c=32 aggregate >= -5%"
    tpwarden rollout -i inv.yml --set drafter=null --bench quick   # the no-drafter baseline
    tpwarden rollout -i inv.yml --resume        # finish a rollout that was interrupted
    tpwarden rollout -i inv.yml --abort         # or roll it back
    tpwarden rollout history -i inv.yml
    tpwarden rollback -i inv.yml [REVISION]
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import tpwarden.cluster.cli.completion_values as values
import typer
from rich.table import Table
from tpwarden.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    emit_json,
    err_console,
    handle_errors,
    load,
    plain,
)
from tpwarden.cluster.durable import default_state_dir
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.operator_lock import (
    LeasedHolder,
    cluster_lock_path,
    one_actor,
    operator_identity,
)
from tpwarden.cluster.rollout.edit import argv_diff, parse_guard, parse_set, text_diff
from tpwarden.cluster.rollout.layout import Files, shown, spec_with
from tpwarden.cluster.rollout.ports import ControllerCluster, WatchdogHolder, bench_measurer
from tpwarden.cluster.rollout.sequence import (
    TERMINAL,
    Measurement,
    Rollout,
    RolloutPorts,
    RolloutRecord,
    RolloutStore,
    rollback_to,
)
from tpwarden.cluster.spec import ClusterSpec

app = typer.Typer(
    help="Change the serving config: plan, measure, restart, verify, keep or roll back.",
    subcommand_metavar="[history]",
)


@contextlib.contextmanager
def rollout_locks(inventory: Path, what: str, via: str = "direct") -> Iterator[None]:
    """One rollout at a time (the rollout lock), and for a direct one also the cluster lock
    (no operator restart or watchdog restart meanwhile). `--via watchdog` leaves the cluster
    lock free: the watchdog's own restart is what that rollout waits for."""
    spec, who = load(inventory), operator_identity()
    rollout_lock = os.path.join(str(rollout_store(inventory).root), "rollout.lock")
    os.makedirs(os.path.dirname(rollout_lock), mode=0o700, exist_ok=True)
    with one_actor(rollout_lock, f"{what} by {who}"):
        if via == "watchdog":
            yield
            return
        with one_actor(cluster_lock_path(spec), f"{what} by {who}"):
            yield


def rollout_store(inventory: Path) -> RolloutStore:
    return RolloutStore(default_state_dir() / "rollout" / load(inventory).name)


def _ports(inventory: Path, bench: str, via: str = "direct", as_json: bool = False) -> RolloutPorts:
    return ports_for(inventory, bench_measurer(bench, str(inventory)), via, as_json)


def ports_for(
    inventory: Path,
    measure: Callable[[ClusterSpec, str], Measurement] | None,
    via: str = "direct",
    as_json: bool = False,
) -> RolloutPorts:
    """The real ports (cluster control, the leased watchdog hold, `measure`), with progress on
    stdout, or on stderr when stdout carries --json. Also `tune drafter --apply`'s."""
    spec = load(inventory)

    def on_event(kind: str, data: dict) -> None:
        detail = (
            f": {data['reason']}"
            if data.get("reason") and kind in ("rolling_back", "rolled_back", "failed")
            else ""
        )
        # with --json, stdout carries one document; progress goes to stderr
        (err_console if as_json else console).print(
            f"[bold]rollout[/] {kind}{detail}", highlight=False
        )

    return RolloutPorts(
        ControllerCluster(),
        LeasedHolder(WatchdogHolder(spec)),  # lapses within 10 min if this process dies
        measure,
        on_event=on_event,
        via=via,
    )


@app.callback(invoke_without_command=True)
@handle_errors
def rollout(
    ctx: typer.Context,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="KEY=VALUE under tpwarden (repeatable), VALUE in YAML; edits the file the value "
            "came from. drafter=null switches the drafter off, a {mapping} sets a section.",
            autocompletion=values.set_keys,
        ),
    ] = [],  # noqa: B006
    bench: Annotated[
        str,
        typer.Option(
            "--bench",
            help="Measure before/after: none, quick (c=1,8,32) or full.",
            autocompletion=values.bench_presets,
        ),
    ] = "none",
    guard: Annotated[
        list[str], typer.Option("--guard", help="Keep only if e.g. 'c=32 aggregate >= -5%'.")
    ] = [],  # noqa: B006
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the diff and plan, change nothing.")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted rollout.")
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Roll an interrupted rollout back.")
    ] = False,
    via: Annotated[
        str,
        typer.Option(
            "--via",
            help="direct: restart through cluster control, watchdog held; watchdog: stop the "
            "server and let the watchdog restart it on the new config (as the field report did).",
        ),
    ] = "direct",
    as_json: JsonOption = False,
) -> None:
    """Change settings with --set, restart on them, verify with a 1-token probe, measure before and
    after (--bench), and roll back by itself if the new server does not come up or a --guard fails."""
    if ctx.invoked_subcommand:
        return
    if bench not in values.BENCH_PRESETS:
        raise ConfigError(f"--bench {bench!r}", hint="none, quick or full")
    if via not in ("direct", "watchdog"):
        raise ConfigError(f"--via {via!r}", hint="direct or watchdog")
    if as_json and not (yes or dry_run or resume or abort):
        raise ConfigError("rollout --json asks nothing", key="--json", hint="add --yes")
    with contextlib.ExitStack() as one_actor_at_a_time:
        if not dry_run:
            # Before reading current.json: a second rollout is refused naming the first,
            # rather than mistaking a running rollout for an interrupted one.
            one_actor_at_a_time.enter_context(rollout_locks(inventory, "tpwarden rollout", via))
        store = rollout_store(inventory)
        guards = [parse_guard(g) for g in guard]
        current = store.current()
        if resume or abort:
            if not current or current.step in TERMINAL:
                raise ConfigError("no interrupted rollout to resume or abort")
            ro = Rollout(store, _ports(inventory, bench, current.via, as_json))
            result = ro.resume(current, guards) if resume else ro.abort(current, "operator aborted")
            raise typer.Exit(render_record(result, as_json))
        if current and current.step not in TERMINAL:
            err_console.print(
                f"[bold red]rollout {current.id} was interrupted at '{current.step}'[/] "
                f"(changes: {current.changes}). Run with --resume to finish it or --abort to roll it back.",
                highlight=False,
            )
            raise typer.Exit(2)
        if not set_:
            raise ConfigError(
                "nothing to change",
                hint="give --set KEY=VALUE, e.g. --set drafter.num_speculative_tokens=3",
            )
        changes = [parse_set(s) for s in set_]
        ports = (
            _ports(inventory, bench, via, as_json)
            if not dry_run
            # A dry run only prepares the record: prepare() reads the clock and `via`, nothing else.
            else RolloutPorts(None, None, None, via=via)  # type: ignore[arg-type]
        )
        ro = Rollout(store, ports)
        record = ro.prepare(str(inventory), changes, guards)
        old_files = store.revision_files(record.old_revision, str(inventory))
        new_files = store.revision_files(record.new_revision, str(inventory))
        diff = _files_diff(str(inventory), old_files, new_files)
        argv = argv_diff(spec_with(str(inventory), old_files), spec_with(str(inventory), new_files))
        if as_json and dry_run:
            emit_json(
                "rollout",
                {
                    "ok": True,
                    "dry_run": True,
                    "diff": diff,
                    "files": [shown(str(inventory), rel) for rel in sorted(new_files)],
                    "argv_diff": {
                        n: [ln for ln in lines if ln[:1] in "+-"] for n, lines in argv.items()
                    },
                    "record": record.__dict__,
                },
            )
            raise typer.Exit(0)
        if as_json:
            raise typer.Exit(render_record(ro.run(record, guards), as_json))
        console.print(diff, highlight=False, markup=False)
        for line in record.summary:
            console.print(f"change: {line}", highlight=False, markup=False)
        for node, lines in argv.items():
            console.print(
                f"[bold]{node}[/] argv: " + " ".join(line for line in lines if line[:1] in "+-"),
                highlight=False,
            )
        console.print(
            f"config {record.old_hash} -> {record.new_hash}; bench: {bench}; guards: {', '.join(record.guards) or '-'}"
        )
        if dry_run:
            raise typer.Exit(0)
        if not yes and not typer.confirm("restart the whole server on the new config?"):
            raise typer.Exit(1)
        raise typer.Exit(render_record(ro.run(record, guards)))


@app.command("history")
@handle_errors
def history(inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False) -> None:
    """Every finished rollout and rollback, with its revision ids and outcome."""
    entries = rollout_store(inventory).history()
    if as_json:
        print(json.dumps(entries, indent=1))
        return
    table = Table(title="rollouts")
    for col in ("id", "changes", "outcome", "from -> to revision", "reason"):
        table.add_column(col, overflow="fold")
    for h in entries:
        changes = ", ".join(f"{c['key']}={c['value']}" for c in h["changes"])
        table.add_row(
            h["id"],
            changes,
            h["step"],
            f"{h['old_revision']} -> {h['new_revision']}",
            h.get("reason") or "",
        )
    console.print(table)


@handle_errors
def rollback(
    revision: Annotated[
        str | None, typer.Argument(help="Revision id (default: before the last rollout).")
    ] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Restore a recorded config revision (default: the one before the last rollout) and restart.
    --json needs --yes.

    Example: tpwarden rollback -i inv.yml
    """
    if as_json and not yes:
        raise ConfigError("rollback --json asks nothing", key="--json", hint="add --yes")
    if revision is not None:
        rollout_store(inventory).revision_files(
            revision, str(inventory)
        )  # an unknown name: refused before any lock
    if not yes and not typer.confirm("restart the whole server on the previous config?"):
        raise typer.Exit(1)
    ports = _ports(inventory, "none", as_json=as_json)
    with rollout_locks(inventory, "tpwarden rollback"):
        result = rollback_to(rollout_store(inventory), ports, str(inventory), revision)
    raise typer.Exit(render_record(result, as_json, "rollback"))


def _files_diff(inventory: str, old: Files, new: Files) -> str:
    """The unified diff of each edited file, named as the user named the inventory."""
    return "".join(
        text_diff(old[rel], new[rel], shown(inventory, rel)) for rel in sorted(new) if rel in old
    )


def render_record(record: RolloutRecord, as_json: bool = False, command: str = "rollout") -> int:
    code = 0 if record.step == "done" else 1
    if as_json:
        emit_json(command, {"ok": code == 0, "dry_run": False, "record": record.__dict__})
        return code
    table = Table(title=f"rollout {record.id}: {record.step}")
    table.add_column("concurrency")
    table.add_column("metric")
    table.add_column("before")
    table.add_column("after")
    table.add_column("change")
    before = (record.baseline or {}).get("rows", {})
    after = (record.after or {}).get("rows", {})
    for c in sorted(set(before) | set(after), key=int):
        for metric in sorted(set(before.get(c, {})) | set(after.get(c, {}))):
            b, a = before.get(c, {}).get(metric), after.get(c, {}).get(metric)
            change = f"{(a - b) / b * 100:+.1f}%" if a is not None and b else ""
            table.add_row(str(c), metric, _f(b), _f(a), change)
    if before or after:
        console.print(table)
    for v in record.verdicts:
        console.print(
            f"guard {plain(v['guard'])}: {'[green]ok[/]' if v['ok'] else '[red]failed[/]'} "
            f"({plain(v['detail'])})"
        )
    for line in record.summary:
        console.print(f"change: {line}", highlight=False, markup=False)
    colour = {"done": "green", "rolled_back": "yellow"}.get(record.step, "red")
    console.print(
        f"[{colour}]{record.step}[/] config {record.old_hash} -> {record.new_hash}"
        + (f": {plain(record.reason)}" if record.reason else "")
    )
    return code


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="rollout")
    main.command("rollback")(rollback)
