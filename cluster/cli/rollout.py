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

from typing import Annotated

import tpwarden.cluster.cli.completion_values as values
import typer
from rich.table import Table
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.rollout_view import progress, render_record
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.operations import rollout as operation
from tpwarden.cluster.rollout.edit import parse_guard, parse_set
from tpwarden.cluster.rollout.ports import bench_measurer

app = typer.Typer(
    help="Change the serving config: plan, measure, restart, verify, keep or roll back.",
    subcommand_metavar="[history]",
)
commands = typer.Typer()  # `rollout` (the group above) and `rollback`, merged into the main app
commands.add_typer(app, name="rollout")


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
    measure = bench_measurer(bench, str(inventory))
    ops = operation.RolloutOperation(
        inventory, measure=measure, via=via, on_event=progress(as_json), dry_run=dry_run
    )
    with ops:  # the locks first: a second rollout is refused naming the first
        guards = [parse_guard(g) for g in guard]
        current = ops.interrupted()
        if resume or abort:
            if current is None:
                raise ConfigError("no interrupted rollout to resume or abort")
            result = (
                ops.resume(current, guards) if resume else ops.abort(current, "operator aborted")
            )
            raise typer.Exit(render_record(result, as_json))
        if current is not None:
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
        record = ops.prepare([parse_set(s) for s in set_], guards)
        preview = ops.preview(record)
        if as_json and dry_run:
            emit_json(
                "rollout",
                {
                    "ok": True,
                    "dry_run": True,
                    "diff": preview.diff,
                    "files": preview.files,
                    "argv_diff": {
                        n: [ln for ln in lines if ln[:1] in "+-"]
                        for n, lines in preview.argv.items()
                    },
                    "record": record.__dict__,
                },
            )
            raise typer.Exit(0)
        if as_json:
            raise typer.Exit(render_record(ops.run(record, guards), as_json))
        console.print(preview.diff, highlight=False, markup=False)
        for line in record.summary:
            console.print(f"change: {line}", highlight=False, markup=False)
        for node, lines in preview.argv.items():
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
        raise typer.Exit(render_record(ops.run(record, guards)))


@app.command("history")
@handle_errors
def history(inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False) -> None:
    """Every finished rollout and rollback, with its revision ids and outcome."""
    entries = operation.rollout_store(inventory).history()
    if as_json:
        emit_json("rollout history", {"rollouts": entries}, indent=1)
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


@commands.command("rollback")
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
    if revision is not None:  # an unknown name: refused before the question and any lock
        operation.rollout_store(inventory).revision_files(revision, str(inventory))
    if not yes and not typer.confirm("restart the whole server on the previous config?"):
        raise typer.Exit(1)
    result = operation.rollback(inventory, revision, progress(as_json))
    raise typer.Exit(render_record(result, as_json, "rollback"))
