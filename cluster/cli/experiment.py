"""`tpwarden experiment`: a queue of variants measured against production by a deadline
(issue 54). `run --dry-run` validates the plan and estimates its queue; `run` runs the night
unattended (each variant a guarded rollout measured by the ledger's canary, production measured
at both ends and restored by its revision, verified by its config hash); `run --resume`
continues a night that was stopped; `status` says where a night stands, `show` gives its full
results and events, `abort` stops it and restores production; `guard` is the night's deadline
guard, started detached by `run` (docs/experiments.md). Not built yet: request variants, bench
and eval presets, the morning report's night.

Examples:
    tpwarden experiment run plan.yml -i inventory.yml --dry-run
    tpwarden experiment run plan.yml -i inventory.yml
    tpwarden experiment run plan.yml -i inventory.yml --resume
    tpwarden experiment status plan.yml -i inventory.yml --json
    tpwarden experiment show plan.yml k5 -i inventory.yml
    tpwarden experiment abort plan.yml -i inventory.yml
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, tzinfo
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from tpwarden.cluster.cli.common import (
    console,
    emit_json,
    err_console,
    error_line,
    handle_errors,
    plain,
    refuse_with,
)
from tpwarden.cluster.cli.experiment_view import (
    abort_lines,
    guard_end_line,
    night_lines,
    show_lines,
    status_lines,
)
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.rollout_view import progress
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.policy import Step, minutes
from tpwarden.cluster.experiment.queue import NightStopped
from tpwarden.cluster.operations import experiment as operation
from tpwarden.cluster.operations import experiment_abort, experiment_guard, experiment_show
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
    restore_by: Annotated[
        str | None,
        typer.Option(
            "--restore-by",
            help='With --resume: a new deadline, "06:30" (in the plan\'s zone) or "+02:00" '
            "(from now); else the night keeps its own.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Validate the plan (exit 2 at its file:line, no node contacted) and check every variant
    against the inventory as `rollout` would apply it. --dry-run prints the queue: each
    variant's estimate from the worst recorded boot and canary, what fits before restore_by and
    what is skipped and why (a queue past its deadline exits 2 unless --allow-partial).
    Without it, the night runs unattended under the rollout's locks: production measured, each
    variant a guarded rollout measured by a canary, production restored by its revision and
    verified by its config hash, measured again. A guard is armed for the night, a detached
    process that restores production by the deadline if this one dies (`experiment guard`).
    SIGTERM (`experiment abort`) stops the night at once; it restores nothing itself. Exit 0
    restored and measured, 1 not (or stopped)."""
    if dry_run:
        if resume:
            raise ConfigError("--dry-run estimates what is left already", key="--resume",
                              hint="drop --resume")  # fmt: skip
        return _dry_run(plan, inventory, allow_partial, as_json)
    with _stopped_by_sigterm(as_json):
        out = night.run_experiment(plan, inventory, resume=resume, allow_partial=allow_partial,
                                   restore_by=restore_by, say=_say("experiment"),
                                   on_event=progress(True))  # fmt: skip
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
    _report("experiment status", got.to_json(), lambda: status_lines(got), as_json)


@app.command("show")
@handle_errors
def show(
    plan: PlanArgument,
    variant: Annotated[
        str | None, typer.Argument(help="One variant (default: every one).", show_default=False)
    ] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """The night's full results: for each variant (or VARIANT) its changes, config hash,
    rollout and times, every canary level's figures (tok/s, per stream, TTFT, ITL, acceptance)
    beside production's opening canary with their ratio, or for a failed one its stage and
    error (the boot reader's root cause); production's closing canary against its opening one;
    the guard; then the night's events in order (VARIANT: those naming it). Reads local files
    only; exit 0 (2: no such variant)."""
    got = experiment_show.experiment_show(plan, inventory, variant)
    _report("experiment show", got.to_json(), lambda: show_lines(got), as_json)


def _report(command: str, doc: JSONObject, lines: Callable[[], list[str]], as_json: bool) -> None:
    """A report read from local files: one JSON document, or its lines."""
    if as_json:
        emit_json(command, {"ok": True, "dry_run": False, **doc})
        return
    for line in lines():
        console.print(plain(line), highlight=False, soft_wrap=True)


@app.command("abort")
@handle_errors
def abort(
    plan: PlanArgument, inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False
) -> None:
    """Stop the plan's night and restore production. A night process still running (the
    rollout lock's holder) gets SIGTERM and unwinds, releasing its locks (SIGKILL after 60 s);
    then, under the rollout's locks, the night is marked aborted and production restored by
    its revision (or verified in place), unless someone else's rollout came since the night.
    An aborted night is finished: its guard ends and `--resume` refuses it. A rollout lock held
    by anything but this night is refused (exit 2, naming it). Exit 0 production back (or
    nothing to abort), 1 not restored (abort again retries)."""
    got = experiment_abort.abort_night(plan, inventory, say=_say("abort"))
    if as_json:
        doc = {"ok": got.ok, "dry_run": False, **got.to_json()}
        if not got.ok:
            doc["error"] = {"kind": "failed", "message": f"production not restored: {got.detail}",
                            "hint": "see `tpwarden rollout history`; then abort again",
                            "exit_code": 1}  # fmt: skip
        emit_json("experiment abort", doc)
    else:
        for line in abort_lines(got):
            console.print(plain(line), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if got.ok else 1)


@app.command("guard")
@handle_errors
def guard(
    plan: PlanArgument,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    poll_s: Annotated[
        float, typer.Option("--poll-s", min=0.1, help="How often it looks at the night (seconds).")
    ] = 10.0,
    as_json: JsonOption = False,
) -> None:
    """The night's deadline guard, in the foreground (`experiment run` starts one detached for
    each night, in its own session, its output in guard.log beside the results). It waits until
    the deadline minus the restore's estimate (the worst recorded boot, the verification, the
    plan's margin); then, unless the night has finished, it restores production as --resume
    does first: it waits while the night process holds the rollout lock, never restores over
    someone else's rollout since the night, and records what it did in the night's events. It
    ends by itself once the night has finished; a second guard for one night ends at once. It
    outlives a kill -9 of the night and its process group, not a reboot of the control machine
    (then `experiment run --resume` restores production first). Exit 0 ended, restored or
    verified; 1 its restore failed."""
    got = experiment_guard.run_guard(plan, inventory, poll_s=poll_s, say=_say("guard", True))
    if as_json:
        doc = {"ok": got.ok, "dry_run": False, **got.to_json()}
        if not got.ok:
            doc["error"] = {"kind": "failed", "message": f"production not restored: {got.detail}",
                            "hint": "tpwarden experiment run --resume", "exit_code": 1}  # fmt: skip
        emit_json("experiment guard", doc)
    else:
        console.print(plain(guard_end_line(got)), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if got.ok else 1)


def _say(who: str, stamped: bool = False) -> Callable[[str], None]:
    """Progress lines on stderr (the guard's, for its log, with the time)."""

    def say(line: str) -> None:
        head = time.strftime("%Y-%m-%d %H:%M:%S ") if stamped else ""
        err_console.print(plain(f"{head}{who}: {line}"), highlight=False, soft_wrap=True)

    return say


@contextmanager
def _stopped_by_sigterm(as_json: bool) -> Iterator[None]:
    """SIGTERM raises `NightStopped` in the night (once: a second one while it unwinds is
    ignored), reported as a failure (exit 1). Only the main thread takes a signal handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise NightStopped(f"the night was stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except NightStopped as exc:
        hint = "tpwarden experiment status; production: experiment abort, the guard, or --resume"
        if as_json:
            emit_json("experiment run", {"ok": False, "dry_run": False, "error": {
                "kind": "failed", "message": str(exc), "hint": hint, "exit_code": 1}})  # fmt: skip
        err_console.print(error_line(f"{exc} ({hint})"), highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


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
