"""`tpwarden experiment abort PLAN -i INVENTORY`: stop a night and put production back.

1. The night's run record: none is bad input (exit 2); a finished night has nothing to abort.
2. The night process, when it lives, is the rollout lock's holder, named by the lock's note
   (`pid=N tpwarden experiment run <plan> by user@host`). It is told to stop with SIGTERM:
   it unwinds at once, writing `run_stopped` and releasing its locks, and restores nothing
   itself (`queue.NightStopped`); after `stop_s` without the lock coming free, SIGKILL. A
   rollout lock held by anything else (a rollout, another plan's night, this night's guard
   restoring production) is refused, naming the holder: the abort does not act beside it.
3. Under the rollout's locks, as the guard does it: the run record marked aborted
   (`aborted_at`, `aborted_by`) with an `aborted` event, then production restored (a rollback
   to production's revision unless the rollout store says the cluster is on it; verified by
   config hash and health) -> `abort_end`; unless someone else's rollout came since the night:
   then nothing is restored over it, and the event says why. Production back (or the cluster
   moved on), the night is finished: its guard ends at its next look, and `--resume` of an
   aborted night is refused. A restore that failed leaves it unfinished: abort again retries.

One design for a live night and a dead one: the abort always restores, under its own locks,
never a night process half-way through being told to stop.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.experiment.guard import foreign_rollout, night_rollouts
from tpwarden.cluster.experiment.night import NightFiles, RunRecord
from tpwarden.cluster.experiment.plan_file import load_plan
from tpwarden.cluster.experiment.queue import NightQueue, Restored
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.experiment import results_dir
from tpwarden.cluster.operations.experiment_arm import pid_of
from tpwarden.cluster.operations.experiment_guard import store_rollouts
from tpwarden.cluster.operations.experiment_run import ClusterNight, rollout_holder
from tpwarden.cluster.operations.rollout import rollout_locks, rollout_store
from tpwarden.cluster.operator_lock import ClusterBusy, operator_identity

STOP_S = 60.0  # SIGTERM, then this long for the night to let its locks go, then SIGKILL
KILL_WAIT_S = 15.0
Say = Callable[[str], None]
Kill = Callable[[int, int], None]


@dataclass(frozen=True)
class AbortOutcome:
    aborted: bool  # False: nothing to abort (the night had finished)
    ok: bool  # production restored or verified, nothing to abort, or the cluster moved on
    detail: str
    night_pid: int | None = None  # the night process stopped, if one lived
    signal: str | None = None  # how it stopped: SIGTERM, or SIGKILL after stop_s
    restored: Restored | None = None

    def to_json(self) -> JSONObject:
        return {"aborted": self.aborted, "ok": self.ok, "detail": self.detail,
                "night_pid": self.night_pid, "signal": self.signal,
                "restored": self.restored.to_json() if self.restored else None}  # fmt: skip


def abort_night(
    plan: Path,
    inventory: Path,
    *,
    stop_s: float = STOP_S,
    kill: Kill = os.kill,
    sleep: Callable[[float], None] = time.sleep,
    say: Say = lambda line: None,
) -> AbortOutcome:
    """Stop the plan's night and restore production (module docstring)."""
    spec = load_inventory(inventory)
    load_plan(plan)
    files = NightFiles(results_dir(spec.name, plan))
    run = files.read_run()
    if run is None:
        raise ConfigError(f"no night of this plan in {files.root}",
                          hint="see `tpwarden experiment status`")  # fmt: skip
    if run.finished is not None:
        return AbortOutcome(False, True, "the night has finished: nothing to abort")
    pid, how = _stop_night(plan, inventory, stop_s, kill, sleep, say)
    try:
        with rollout_locks(inventory, f"tpwarden experiment abort {plan.name}"):
            return _abort_locked(files, inventory, pid, how, say)
    finally:
        files.close()


def _stop_night(
    plan: Path, inventory: Path, stop_s: float, kill: Kill, sleep: Callable[[float], None],
    say: Say,
) -> tuple[int | None, str | None]:  # fmt: skip
    """The night process stopped (its pid and the signal that did it), or (None, None) when
    the rollout lock is free (no night process lives)."""
    holder = rollout_holder(inventory)
    if holder is None:
        return None, None
    pid = pid_of(holder)
    if f" tpwarden experiment run {plan.name} by " not in f" {holder}" or pid is None:
        raise ClusterBusy(f"the rollout lock is held by {holder}, not by this plan's night; "
                          "the abort does not act beside it (wait for it, then abort again)")  # fmt: skip
    for sig, wait_s in ((signal.SIGTERM, stop_s), (signal.SIGKILL, KILL_WAIT_S)):
        say(f"stopping the night (pid {pid}) with {sig.name}")
        try:
            kill(pid, sig)
        except ProcessLookupError:
            pass  # it ended meanwhile: its lock goes with it
        if _lock_free(inventory, wait_s, sleep):
            return pid, sig.name
    raise TpwardenError(f"the night (pid {pid}) still holds the rollout lock after SIGKILL")


def _lock_free(inventory: Path, within_s: float, sleep: Callable[[float], None]) -> bool:
    step = 0.25
    for _ in range(max(1, int(within_s / step))):
        if rollout_holder(inventory) is None:
            return True
        sleep(step)
    return rollout_holder(inventory) is None


def _abort_locked(
    files: NightFiles, inventory: Path, pid: int | None, how: str | None, say: Say
) -> AbortOutcome:
    run = files.read_run()
    if run is None or run.finished is not None:
        return AbortOutcome(False, True, "the night finished before it stopped: nothing to abort",
                            pid, how)  # fmt: skip
    who = operator_identity()
    run.aborted_at, run.aborted_by = time.time(), who
    files.write_run(run)
    files.event("aborted", by=who, night_pid=pid, signal=how)
    foreign = foreign_rollout(store_rollouts(rollout_store(inventory)), run,
                              night_rollouts(files.events()))  # fmt: skip
    if foreign is not None:
        why = f"the cluster moved on: {foreign}; production is not restored over it"
        files.event("abort_end", ok=True, restored=False, detail=why)
        _finish(files, run)
        return AbortOutcome(True, True, why, pid, how)
    queue = NightQueue(ClusterNight(inventory, run, say=say), files, run, say)
    restored = queue.restore("experiment abort")
    files.event("abort_end", ok=restored.ok, restored=restored.ok, detail=restored.detail,
                rollout_id=restored.rollout_id)  # fmt: skip
    if restored.ok:
        _finish(files, run)
    return AbortOutcome(True, restored.ok, restored.detail, pid, how, restored)


def _finish(files: NightFiles, run: RunRecord) -> None:
    run.finished = time.time()
    files.write_run(run)
