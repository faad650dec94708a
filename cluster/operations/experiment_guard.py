"""`tpwarden experiment guard PLAN -i INVENTORY`: a night's deadline guard as an operation.

`run_guard` is the guard process `experiment run` starts detached (`experiment_arm`): it takes
`guard.lock` in the night's results directory (held while it lives; a second guard for the
same night finds it held and ends at once, replacing nothing), then runs
`experiment.guard_loop.NightGuard` with the real ports (`ClusterGuard`):

* the restore's estimate: the cluster's worst recorded boot (`boots.jsonl`; none: the
  watchdog's boot deadline), the verification (`experiment_run.VERIFY_S`) and the plan's
  margin, read again at each look;
* the rollout lock's holder, the rollout store's records, the rollout's locks
  (`rollout_locks`, as the night holds them), and the night's own restore ports
  (`experiment_run.ClusterNight`: a rollback to production's revision, then every node
  verified on production's config hash and healthy).

It is a process on the control machine: it outlives a kill -9 of the night and of the night's
process group, not a reboot of the control machine (then `experiment run --resume` restores
production first), and not the stop of a systemd unit both run in (its cgroup).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tpwarden.cluster.experiment.guard import GUARD_LOCK, GuardState, GuardTiming, RolloutSeen
from tpwarden.cluster.experiment.guard_loop import POLL_S, GuardOutcome, NightGuard
from tpwarden.cluster.experiment.night import NightFiles, RunRecord
from tpwarden.cluster.experiment.plan_file import load_plan
from tpwarden.cluster.experiment.policy import costs_from
from tpwarden.cluster.experiment.queue import NightPorts
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.experiment import recorded_boots, results_dir
from tpwarden.cluster.operations.experiment_arm import live_guard
from tpwarden.cluster.operations.experiment_run import VERIFY_S, ClusterNight, rollout_holder
from tpwarden.cluster.operations.rollout import rollout_locks, rollout_store
from tpwarden.cluster.operator_lock import FileLock, WatchdogLocked
from tpwarden.cluster.rollout.sequence import RolloutStore

Say = Callable[[str], None]
LOCK_TRIES = 5  # `guard.lock` taken for a moment by a status probe: tried again, 0.2 s apart


class ClusterGuard:
    """The guard's real ports (module docstring)."""

    def __init__(self, plan: Path, inventory: Path, say: Say) -> None:
        self.plan, self.inventory, self.say = plan, inventory, say
        self.spec = load_inventory(inventory)
        self.margin_s = 60.0 * load_plan(plan).plan.margin_min
        self.store = rollout_store(inventory)

    def clock(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def timing(self) -> GuardTiming:
        c = costs_from(recorded_boots(self.spec), [],
                       boot_deadline_s=self.spec.watchdog.boot_deadline_s)  # fmt: skip
        return GuardTiming(c.boot_s, c.boot_from, VERIFY_S, self.margin_s)

    def holder(self) -> str | None:
        return rollout_holder(self.inventory)

    def rollouts(self) -> list[RolloutSeen]:
        return store_rollouts(self.store)

    def locks(self) -> contextlib.AbstractContextManager[None]:
        return rollout_locks(self.inventory, f"tpwarden experiment guard {self.plan.name}")

    def night(self, run: RunRecord) -> NightPorts:
        return ClusterNight(self.inventory, run, say=self.say)


def store_rollouts(store: RolloutStore) -> list[RolloutSeen]:
    """Every record of the rollout store: its history and the current one."""
    rows: list[dict[str, object]] = [*store.history()]
    current = store.current()
    if current is not None:
        rows.append(dict(current.__dict__))
    return [_seen(r) for r in rows if isinstance(r.get("id"), str)]


def _seen(row: dict[str, object]) -> RolloutSeen:
    summary = row.get("summary")
    changes = row.get("changes")
    what = "; ".join(str(s) for s in summary) if isinstance(summary, list) and summary else ""
    if not what and isinstance(changes, list):
        what = ", ".join(f"{c.get('key')}={c.get('value')}" for c in changes if isinstance(c, dict))
    started = row.get("started_at")
    return RolloutSeen(str(row["id"]), float(started) if isinstance(started, int | float) else 0.0,
                       str(row.get("new_revision") or ""), what or "no summary")  # fmt: skip


@contextlib.contextmanager
def _guard_lock(root: Path, note: str) -> Iterator[bool]:
    """`guard.lock` held for the block (True), or False when another guard holds it."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = FileLock(str(root / GUARD_LOCK))
    for attempt in range(LOCK_TRIES):
        try:
            lock.acquire(note)
            break
        except WatchdogLocked:
            if attempt == LOCK_TRIES - 1:
                yield False
                return
            time.sleep(0.2)
    try:
        yield True
    finally:
        lock.release()


def run_guard(
    plan: Path,
    inventory: Path,
    *,
    poll_s: float = POLL_S,
    say: Say = lambda line: None,
    ports: ClusterGuard | None = None,
) -> GuardOutcome:
    """The guard of the plan's night, until the night finishes or the guard has acted."""
    spec = load_inventory(inventory)
    load_plan(plan)  # bad input (exit 2) before anything
    root = results_dir(spec.name, plan)
    if not (root / "run.json").exists():
        why = f"no night to guard in {root}"
        say(why)
        return GuardOutcome(GuardState.ENDED, why)
    with _guard_lock(root, f"tpwarden experiment guard {plan.name}") as mine:
        if not mine:
            why = f"a guard watches this night already ({live_guard(root) or 'unknown'})"
            say(why)
            return GuardOutcome(GuardState.ENDED, why)
        files = NightFiles(root)
        try:
            guard = NightGuard(ports or ClusterGuard(plan, inventory, say), files, os.getpid(),
                               poll_s=poll_s, say=say)  # fmt: skip
            return guard.run()
        finally:
            files.close()
