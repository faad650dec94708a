"""`tpwarden experiment`: a queue of variants measured against production by a deadline
(issue 54). Built so far: `run --dry-run`, the validated plan and its estimated queue; the
unattended run itself is not built yet (docs/experiments.md).

Examples:
    tpwarden experiment run plan.yml -i inventory.yml --dry-run
    tpwarden experiment run plan.yml -i inventory.yml --dry-run --allow-partial --json
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, plain, refuse_with
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.policy import Step, minutes
from tpwarden.cluster.operations import experiment as operation
from tpwarden.cluster.report_settings import zone

app = typer.Typer(
    help="Experiments: a queue of variants measured against production, restored by a deadline.",
    no_args_is_help=True,
)

_KINDS = {"production-start": "measure", "production-end": "restore", "request": "request",
          "restart": "restart"}  # fmt: skip


@app.command("run")
@handle_errors
def run(
    plan: Annotated[Path, typer.Argument(help="The plan file (docs/experiments.md).")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and estimate the queue; change nothing.")
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option("--allow-partial", help="Accept a queue whose variants do not all fit."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Validate the plan (exit 2 at its file:line, no node contacted), check every variant
    against the inventory as `rollout` would apply it, and print the queue: each variant's
    estimate from the worst recorded boot and canary, what fits before restore_by and what is
    skipped and why. A queue that passes its deadline exits 2 unless --allow-partial.
    Only --dry-run is built so far."""
    if not dry_run:
        raise ConfigError(
            "the unattended run is not built yet", key="--dry-run",
            hint="run with --dry-run to validate and estimate the plan (docs/experiments.md)",
        )  # fmt: skip
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
