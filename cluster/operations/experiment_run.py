"""`tpwarden experiment run PLAN` (the unattended night) and `experiment status` as operations.

* `run_experiment`: the dry run's checks first (the plan, each variant against the inventory,
  the deadline unless --allow-partial, and what this step cannot measure yet: request
  variants, bench and eval presets), then, for the night's whole length, the rollout's locks
  (`rollout_locks`: the rollout lock and the cluster lock), so a second experiment, a rollout
  or a rollback beside it is refused naming who holds them. The variants' rollouts and the
  restore run under those locks (`locks_held`). The queue is `experiment.queue.NightQueue`;
  its ports here are the real ones (`ClusterNight`).
* `ClusterNight`: a variant is a guarded rollout (`RolloutOperation`) from production's
  revision (its files written back first, so a variant is production plus its changes, never
  cumulative); a rollout whose restart fails rolls back to production by itself (the rollout
  sequence), and its reason (the boot reader's root cause) is the variant's failure. The
  restore is `rollback` to production's revision; the verification, every node on
  production's config hash and healthy (`ControllerCluster.wait_running`); the canary, the
  ledger's (`CanaryRunner`, the watchdog's lease, trigger "experiment"). Each variant's
  rollout is named in the night's events (`variant_rollout`) before it changes anything, so
  the guard tells the night's rollouts from anyone else's.
* The deadline guard is armed once the run record is written, on a fresh night and on a
  resumed one without a live guard (`experiment_arm.arm_guard`; the guard itself:
  `experiment_guard`). A night told to stop (`queue.NightStopped`, SIGTERM from `experiment
  abort`) writes `run_stopped` and unwinds, its locks released; it restores nothing itself.
* `experiment_status`: each variant done, failed, skipped or left with its figures, the
  deadline, who holds the rollout lock, and the guard; reads local files only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.bench.canary import CanaryRunner, CanaryStatus, WatchdogLease
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.experiment.guard import NIGHT_ROLLOUT
from tpwarden.cluster.experiment.night import NightFiles, RunRecord, left_on, skipped_by_time
from tpwarden.cluster.experiment.plan_file import load_plan
from tpwarden.cluster.experiment.policy import queue_order
from tpwarden.cluster.experiment.queue import (
    Measured,
    NightOutcome,
    NightQueue,
    NightStopped,
    QueuedVariant,
    Restored,
    VariantRestart,
    refuse_unmeasured,
    refused_resume,
)
from tpwarden.cluster.experiment.resume import PRODUCTION_END, PRODUCTION_START
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.experiment import (
    DryRun,
    dry_run,
    new_deadline,
    refusal,
    results_dir,
)
from tpwarden.cluster.operations.experiment_arm import GuardArming, arm_guard, guard_status
from tpwarden.cluster.operations.rollout import (
    ControllerCluster,
    OnEvent,
    RolloutOperation,
    rollback,
    rollout_lock_path,
    rollout_locks,
    rollout_store,
)
from tpwarden.cluster.operator_lock import holder_note
from tpwarden.cluster.rollout.edit import Change
from tpwarden.cluster.rollout.layout import Files, plan_edit, spec_with, write_files
from tpwarden.cluster.rollout.sequence import TERMINAL, RolloutRecord
from tpwarden.cluster.spec import ClusterSpec

VERIFY_S = 120.0  # every node on production's hash and healthy, after a restart that said so
Say = Callable[[str], None]
OnRollout = Callable[[str, str], None]  # (variant, rollout id): before the rollout changes anything
Arm = Callable[[Path, Path, NightFiles], GuardArming]


def _quiet(line: str) -> None:
    """No progress lines (the library never prints; the CLI passes its own)."""


class ClusterNight:
    """The real ports of `NightQueue` (module docstring)."""

    def __init__(
        self,
        inventory: Path,
        run: RunRecord,
        on_event: OnEvent | None = None,
        say: Say = _quiet,
        *,
        on_rollout: OnRollout | None = None,
    ) -> None:
        self.inventory, self.night, self.on_event, self.say = inventory, run, on_event, say
        self.on_rollout = on_rollout
        self.store = rollout_store(inventory)

    def clock(self) -> float:
        return time.time()

    def production(self) -> tuple[Files, ClusterSpec]:
        files = self.store.revision_files(self.night.production_revision, str(self.inventory))
        return files, spec_with(str(self.inventory), files)

    def left_on(self) -> str | None:
        rec = self.store.current()
        if rec is None or rec.started_at < self.night.started:  # none of this night's
            return self.night.production_hash
        return left_on(rec.step, rec.old_hash, rec.new_hash)

    def verify(self) -> tuple[bool, str]:
        want = self.night.production_hash
        if ControllerCluster().wait_running(self.production()[1], VERIFY_S):
            return True, f"every node runs {want} and the server answers"
        return (
            False,
            f"not every node runs {want} with the server answering within {VERIFY_S:.0f} s",
        )

    def restart_on(self, name: str, changes: Sequence[Change]) -> VariantRestart:
        write_files(str(self.inventory), self.production()[0])  # production plus its changes
        with RolloutOperation(self.inventory, on_event=self.on_event, locks_held=True) as ops:
            record = ops.prepare(list(changes), [])
            if self.on_rollout is not None:  # before current.json names it
                self.on_rollout(name, record.id)
            try:
                done = ops.run(record, [])
            except TpwardenError as exc:  # pre-flight unreachable, SSH: never left midway
                done = self._close_midway(ops, f"{type(exc).__name__}: {exc}") or record
        return VariantRestart(done.step == "done", done.step, done.id, done.new_hash, done.reason)

    def _close_midway(self, ops: RolloutOperation, why: str) -> RolloutRecord | None:
        """A rollout that stopped midway: rolled back when it wrote the inventory, else
        abandoned (nothing was changed)."""
        current = ops.interrupted()
        if current is None:
            return self.store.current()
        if current.step in ("planned", "baseline_measured"):
            current.step, current.reason, current.finished_at = "abandoned", why, time.time()
            self.store.finish(current)
            return current
        return ops.abort(current, why)

    def restore(self) -> Restored:
        current = self.store.current()
        if current is not None and current.step not in TERMINAL:
            current.step, current.finished_at = "abandoned", time.time()
            current.reason = "the experiment restored production instead"
            self.store.finish(current)  # in the history, not overwritten by the rollback
        rec = rollback(self.inventory, self.night.production_revision, self.on_event,
                       locks_held=True)  # fmt: skip
        if rec.step != "done":
            return Restored(
                False, True, f"rollback {rec.id} ended {rec.step}: {rec.reason}", rec.id
            )
        ok, detail = self.verify()
        return Restored(ok, True, detail, rec.id)

    def canary(self, label: str) -> Measured:
        spec = load_inventory(self.inventory)
        with Controller(spec) as ctl:
            out = CanaryRunner(ctl, trigger="experiment", on_progress=self.say,
                               lease=WatchdogLease(ctl, by="tpwarden-experiment")).run()  # fmt: skip
        return Measured(out.status is CanaryStatus.OK, out.to_json(), out.reason)


def run_experiment(
    plan: Path,
    inventory: Path,
    *,
    resume: bool = False,
    allow_partial: bool = False,
    restore_by: str | None = None,
    say: Say = _quiet,
    on_event: OnEvent | None = None,
    arm: Arm | None = None,
) -> NightOutcome:
    """The night (module docstring). Bad input exits 2 before any lock or node. `restore_by`:
    a resumed night's new deadline (else its own). `arm` starts the guard (default:
    `arm_guard`, a detached process)."""
    spec = load_inventory(inventory)
    files = NightFiles(results_dir(spec.name, plan))
    prior = files.read_run()
    refused = refused_resume(prior, resume, str(files.root))
    if refused is not None:
        raise refused
    if restore_by is not None and not resume:
        raise ConfigError("--restore-by sets a resumed night's deadline", key="--restore-by",
                          hint="a fresh night's deadline is the plan's restore_by")  # fmt: skip
    deadline = None if restore_by is None else new_deadline(plan, spec, restore_by, time.time())
    if prior is None:
        got = _checked(dry_run(plan, inventory, allow_partial=allow_partial), allow_partial)
    with rollout_locks(inventory, f"tpwarden experiment run {plan.name}"):
        try:
            if prior is None:
                queue = _fresh(plan, inventory, got, files, say, on_event)
            else:
                if prior.finished is not None and _nothing_left(plan, inventory, prior, files):
                    return NightOutcome(prior, nothing_left=True)
                queue = NightQueue(_ports(inventory, prior, files, say, on_event), files, prior,
                                   say)  # fmt: skip
                queue.bring_back()  # before anything: never left on a variant
                if deadline is not None:
                    files.event("deadline_moved", deadline=deadline, was=prior.deadline)
                    prior.deadline = deadline
                got = _checked(
                    dry_run(plan, inventory, allow_partial=True, deadline=prior.deadline)
                )
                prior.resumed.append(time.time())
                prior.finished = None
                files.write_run(prior)
            armed = (arm or arm_guard)(plan, inventory, files)
            say(f"guard: {'started' if armed.started else 'not started'}: {armed.detail}")
            out = queue.run(_variants(got), got.queue.costs)
            out.guard = armed.to_json()
            return out
        except NightStopped as exc:
            files.event("run_stopped", why=str(exc))
            raise
        finally:
            files.close()


def _ports(
    inventory: Path, run: RunRecord, files: NightFiles, say: Say, on_event: OnEvent | None
) -> ClusterNight:
    """The real ports, each variant's rollout named in the night's events first."""

    def named(variant: str, rollout_id: str) -> None:
        files.event(NIGHT_ROLLOUT, variant=variant, rollout_id=rollout_id)

    return ClusterNight(inventory, run, on_event, say, on_rollout=named)


def _nothing_left(plan: Path, inventory: Path, prior: RunRecord, files: NightFiles) -> bool:
    """A finished night resumed: True when nothing is left of it (nothing to do). It goes on
    only on its own production: a rollout since it finished is never undone by it."""
    got = _checked(dry_run(plan, inventory, allow_partial=True, deadline=prior.deadline))
    if got.resume.finished:
        return True
    now = load_inventory(inventory).config_hash()
    if now != prior.production_hash:
        raise ConfigError(f"production changed since this night finished (config "
                          f"{prior.production_hash} then, {now} now)",
                          hint=f"remove {files.root} for a fresh night on it")  # fmt: skip
    return False


def _checked(got: DryRun, allow_partial: bool = True) -> DryRun:
    refuse_unmeasured(got.plan)
    if got.refused and not allow_partial:
        raise refusal(got)
    return got


def _fresh(
    plan: Path, inventory: Path, got: DryRun, files: NightFiles, say: Say, on_event: OnEvent | None
) -> NightQueue:
    """A new night under the locks: no rollout left midway, production recorded and verified."""
    store = rollout_store(inventory)
    current = store.current()
    if current is not None and current.step not in TERMINAL:
        raise ConfigError(f"rollout {current.id} stopped at step '{current.step}'",
                          hint="finish it first: tpwarden rollout --resume (or --abort)")  # fmt: skip
    production: Files = {}
    for v in got.plan.plan.variants:
        production.update(plan_edit(str(inventory), list(got.plan.changes[v.name])).old)
    spec = load_inventory(inventory)
    run = RunRecord(
        plan=str(plan), inventory=str(inventory), cluster=spec.name,
        production_revision=store.save_revision(production),
        production_hash=spec.config_hash(), started=time.time(),
        deadline=got.queue.deadline,
    )  # fmt: skip
    queue = NightQueue(_ports(inventory, run, files, say, on_event), files, run, say)
    queue.begin()
    return queue


def _variants(got: DryRun) -> list[QueuedVariant]:
    checks = {v.name: v for v in got.variants}
    order = queue_order([(v.name, v.restarts) for v in got.variants])
    return [QueuedVariant(n, got.plan.changes[n], checks[n].summary) for n, _ in order]


@dataclass(frozen=True)
class NightStatus:
    plan: str
    results: Path
    tz: str  # the plan's zone, else the inventory's report zone
    run: RunRecord | None
    variants: list[JSONObject]  # name, status (done/failed/skipped/left), figures or why
    production: dict[str, JSONObject | None]  # start / end: their result (or failure) files
    lock_holder: str | None
    guard: JSONObject | None  # `guard.json` and whether a guard lives (`guard_status`)

    def to_json(self) -> JSONObject:
        return {
            "plan": self.plan, "results_dir": str(self.results), "lock_holder": self.lock_holder,
            "tz": self.tz, "guard": self.guard,
            "run": self.run.to_json() if self.run else None, "variants": self.variants,
            "deadline": self.run.deadline if self.run else None,
            "finished": self.run.finished if self.run else None, "production": self.production,
        }  # fmt: skip


def experiment_status(plan: Path, inventory: Path) -> NightStatus:
    """Where the plan's night stands, from its results directory and the rollout lock."""
    spec = load_inventory(inventory)
    loaded = load_plan(plan)
    files = NightFiles(results_dir(spec.name, plan))
    order = [n for n, _ in queue_order([(v.name, v.restarts) for v in loaded.plan.variants])]
    state, skipped = files.state(order), skipped_by_time(files.events())
    rows: list[JSONObject] = []
    for name in order:
        if name in state.done:
            rows.append({"name": name, "status": "done", **(files.result(name) or {})})
        elif name in state.failed:
            rows.append({"name": name, "status": "failed", **(files.failure(name) or {})})
        elif name in skipped:
            rows.append({"name": name, "status": "skipped", "reason": skipped[name]})
        else:
            rows.append({"name": name, "status": "left"})
    production = {
        k: files.result(k) or files.failure(k) for k in (PRODUCTION_START, PRODUCTION_END)
    }
    tz = loaded.plan.tz or spec.report.tz
    return NightStatus(str(plan), files.root, tz, files.read_run(), rows, production,
                       rollout_holder(inventory), guard_status(files.root))  # fmt: skip


def rollout_holder(inventory: Path) -> str | None:
    """The note of whoever holds the rollout lock now, or None when it is free."""
    return holder_note(rollout_lock_path(inventory))
