"""`tpwarden experiment`: a queue of variants measured against production by a deadline
(issue 54). `run --dry-run` validates the plan and estimates its queue; `run` runs the night
unattended (each variant a guarded rollout measured by the ledger's canary, production measured
at both ends and restored by its revision, verified by its config hash); `run --resume`
continues a night that was stopped; `status` says where a night stands (docs/experiments.md).
Not built yet: the deadline guard, request variants, bench and eval presets, the morning
report's night, `abort`.

Examples:
    tpwarden experiment run plan.yml -i inventory.yml --dry-run
    tpwarden experiment run plan.yml -i inventory.yml
    tpwarden experiment run plan.yml -i inventory.yml --resume
    tpwarden experiment status plan.yml -i inventory.yml --json
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.cli.common import (
    console,
    emit_json,
    err_console,
    handle_errors,
    plain,
    refuse_with,
)
from tpwarden.cluster.cli.experiment_view import night_lines, status_lines
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.rollout_view import progress
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.policy import Step, minutes
from tpwarden.cluster.operations import experiment as operation
from tpwarden.cluster.operations import experiment_run as night
from tpwarden.cluster.report_settings import zone

app = typer.Typer(
    help="Experiments: a queue of variants measured against production, restored by a deadline.",
    no_args_is_help=True,
)

_KINDS = {"production-start": "measure", "production-end": "restore", "request": "request",
          "restart": "restart"}  # fmt: skip


PlanArgument = Annotated[Path, typer.Argument(help="The plan file (docs/experiments.md).")]


@app.command("run")
@handle_errors
def run(
    plan: PlanArgument,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and estimate the queue; change nothing.")
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option("--allow-partial", help="Accept a queue whose variants do not all fit."),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue a stopped night: production back first, "
            "no finished or failed variant repeated.",
        ),
    ] = False,  # fmt: skip
    as_json: JsonOption = False,
) -> None:
    """Validate the plan (exit 2 at its file:line, no node contacted) and check every variant
    against the inventory as `rollout` would apply it. --dry-run prints the queue: each
    variant's estimate from the worst recorded boot and canary, what fits before restore_by and
    what is skipped and why (a queue past its deadline exits 2 unless --allow-partial).
    Without it, the night runs unattended under the rollout's locks: production measured, each
    variant a guarded rollout measured by a canary, production restored by its revision and
    verified by its config hash, measured again. Exit 0 restored and measured, 1 not."""
    if dry_run:
        if resume:
            raise ConfigError("--dry-run estimates what is left already", key="--resume",
                              hint="drop --resume")  # fmt: skip
        return _dry_run(plan, inventory, allow_partial, as_json)

    def say(line: str) -> None:
        err_console.print(plain(f"experiment: {line}"), highlight=False, soft_wrap=True)

    out = night.run_experiment(plan, inventory, resume=resume, allow_partial=allow_partial,
                               say=say, on_event=progress(True))  # fmt: skip
    if as_json:
        doc = {"ok": out.ok, "dry_run": False, **out.to_json()}
        if not out.ok:
            doc["error"] = {"kind": "failed", "message": out.stopped or "production not restored",
                            "hint": "tpwarden experiment status; then run --resume",
                            "exit_code": 1}  # fmt: skip
        emit_json("experiment run", doc)
    else:
        for line in night_lines(out, night.experiment_status(plan, inventory)):
            console.print(plain(line), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if out.ok else 1)


def _dry_run(plan: Path, inventory: Path, allow_partial: bool, as_json: bool) -> None:
    got = operation.dry_run(plan, inventory, allow_partial=allow_partial)
    if as_json:
        if got.refused:
            refuse_with("experiment run", {"dry_run": True, **got.to_json()},
                        operation.refusal(got), as_json)  # fmt: skip
        emit_json("experiment run", {"ok": True, "dry_run": True, **got.to_json()})
        return
    for line in queue_lines(got):
        console.print(plain(line), highlight=False, soft_wrap=True)
    if got.refused:
        raise operation.refusal(got)


@app.command("status")
@handle_errors
def status(
    plan: PlanArgument, inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False
) -> None:
    """Where the plan's night stands: each variant done, failed, skipped or left with its
    figures, production's two canaries and their drift, the deadline, and who holds the
    rollout lock (a night running). Reads local files only; exit 0."""
    got = night.experiment_status(plan, inventory)
    if as_json:
        emit_json("experiment status", {"ok": True, "dry_run": False, **got.to_json()})
        return
    for line in status_lines(got):
        console.print(plain(line), highlight=False, soft_wrap=True)


def queue_lines(got: operation.DryRun) -> list[str]:
    q, c, tz = got.queue, got.queue.costs, zone(got.tz)
    extra = "".join(f" + {name} {minutes(s)} (assumed)"
                    for name, s in (("bench", c.bench_s), ("eval", c.eval_s)) if s)  # fmt: skip
    out = [
        f"plan {got.plan.path}: {len(got.variants)} variant(s); production restored by "
        f"{_at(q.deadline, tz, True)} ({got.tz})",
        f"boot {minutes(c.boot_s)} ({c.boot_from}); canary {minutes(c.canary_s)} "
        f"({c.canary_from}){extra}; margin {minutes(c.margin_s)}",
        f"{'':2}{'step':<24} {'kind':<8} {'estimate':>10}  {'start':>5}  {'end':>5}",
    ]
    summaries = {v.name: v.summary for v in got.variants}
    for s in q.steps:
        out.append(_step_line(s, tz))
        out += [f"{'':4}{line}" for line in summaries.get(s.name, ()) if s.kind != "production-end"]
    if got.resume.done or got.resume.failed:
        out.append(f"already done: {', '.join(got.resume.done) or '-'}; failed: "
                   f"{', '.join(got.resume.failed) or '-'} (results in {got.results})")  # fmt: skip
    spare = q.deadline - q.finish
    out.append(f"verdict: {q.verdict()}: ends {_at(q.finish, tz)}, {minutes(max(spare, 0))} "
               f"before the deadline; {len(q.skipped)} skipped")  # fmt: skip
    return out


def _step_line(s: Step, tz: tzinfo) -> str:
    head = (
        f"{'-' if s.skipped else '*'} {s.name:<24} {_KINDS[s.kind]:<8} {minutes(s.estimate_s):>10}"
    )
    if s.skipped:
        return f"{head}  skipped: {s.skipped}"
    return f"{head}  {_at(s.start, tz)}  {_at(s.end, tz)}"


def _at(ts: float | None, tz: tzinfo, day: bool = False) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz).strftime("%a %d %b %H:%M" if day else "%H:%M")
