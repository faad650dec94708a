"""The deadline guard's loop (`experiment.guard` decides; this looks, waits and acts), its
ports injected: the time, the rollout lock's holder, the rollout store, the locks, the night's
restore ports. Tests drive it with a fake clock in milliseconds.

`NightGuard.run` writes `guard.json` (armed: its pid, when it fires, the estimate behind it)
and the `guard_armed` event, then looks every `poll_s`: it ends as soon as the night has
finished or its results directory is gone; before its time it waits; at its time it takes
the rollout's locks (waiting while anyone holds them, with one `guard_late` event, naming the
holder, once the deadline has passed) and, under them, looks again (the night may have
finished just before it let go) and restores production (`NightQueue.restore`: a rollback to
production's revision when the store says the cluster was left elsewhere, else production
verified in place) -> `guard_restored`, `guard_verified` or `guard_restore_failed`; or it
stands down, with `guard_stood_down`, when someone else's rollout came since the night. It
never writes `run.json`: the night stays unfinished, and `--resume` runs only what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.experiment.guard import (
    Action,
    Decision,
    GuardRecord,
    GuardState,
    GuardTiming,
    RolloutSeen,
    Seen,
    decide,
    foreign_rollout,
    night_rollouts,
    read_guard,
    write_guard,
)
from tpwarden.cluster.experiment.night import NightFiles, RunRecord
from tpwarden.cluster.experiment.queue import NightPorts, NightQueue, Restored
from tpwarden.cluster.operator_lock import ClusterBusy

POLL_S = 10.0  # how often the guard looks at the night


class GuardPorts(Protocol):
    def clock(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    # the restore's estimate, read again at each look (a slower boot tonight moves it earlier)
    def timing(self) -> GuardTiming: ...
    def holder(self) -> str | None: ...  # who holds the rollout lock; None: free
    def rollouts(self) -> list[RolloutSeen]: ...  # the rollout store's records
    # the rollout lock and the cluster lock; ClusterBusy when someone holds one
    def locks(self) -> AbstractContextManager[None]: ...
    def night(self, run: RunRecord) -> NightPorts: ...


@dataclass(frozen=True)
class GuardOutcome:
    state: GuardState
    detail: str
    restored: Restored | None = None

    @property
    def ok(self) -> bool:
        return self.state is not GuardState.FAILED

    def to_json(self) -> JSONObject:
        return {"state": self.state.value, "detail": self.detail,
                "restored": self.restored.to_json() if self.restored else None}  # fmt: skip


_FIRED = {GuardState.RESTORED: "guard_restored", GuardState.VERIFIED: "guard_verified",
          GuardState.FAILED: "guard_restore_failed"}  # fmt: skip


class NightGuard:
    """One night's guard (module docstring); `say` hears one line per step (its log)."""

    def __init__(
        self,
        ports: GuardPorts,
        files: NightFiles,
        pid: int,
        *,
        poll_s: float = POLL_S,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.ports, self.files, self.pid, self.poll_s = ports, files, pid, poll_s
        self.say = say or (lambda line: None)
        self.record: GuardRecord | None = None
        self.started = 0.0  # the guarded night's start: its identity

    def run(self) -> GuardOutcome:
        run = self.files.read_run()
        if run is None or run.finished is not None:
            why = "no unfinished night to guard" + (f" in {self.files.root}" if run is None else "")
            self.say(why)
            return GuardOutcome(GuardState.ENDED, why)
        self._arm(run)
        late_said = False
        while True:
            seen = self._look(self.ports.holder())
            d = decide(seen)
            if d.action is Action.RESTORE:
                done = self._fire()
                if done is not None:
                    return done
                self.ports.sleep(self.poll_s)  # a lock taken meanwhile: look again later
                continue
            if d.action in (Action.END, Action.STAND_DOWN):
                return self._stop(d)
            if d.action is Action.BLOCKED:
                if d.late and not late_said and seen.run is not None:
                    late_said = True
                    self.files.event("guard_late", holder=seen.holder, deadline=seen.run.deadline)
                    self._update(GuardState.WAITING, d.why)
                    self.say(d.why)
                elif self.record is not None and self.record.state is GuardState.ARMED:
                    self._update(GuardState.WAITING, d.why)
                    self.say(d.why)
            elif self.record is not None and self.record.state is GuardState.WAITING:
                self._update(GuardState.ARMED, d.why)  # a later deadline: its time again
            wait = self.poll_s if d.until is None else min(self.poll_s, d.until - seen.now)
            self.ports.sleep(max(wait, 0.05))

    # -- the steps ---------------------------------------------------------------------------
    def _arm(self, run: RunRecord) -> None:
        timing, now = self.ports.timing(), self.ports.clock()
        self.started = run.started
        self.record = GuardRecord(self.pid, now, timing.fire_at(run.deadline), run.deadline,
                                  timing.restore_s, timing.describe(), updated=now)  # fmt: skip
        write_guard(self.files.root, self.record)
        self.files.event("guard_armed", pid=self.pid, fire_at=self.record.fire_at,
                         deadline=run.deadline, restore_s=timing.restore_s,
                         estimate=timing.describe())  # fmt: skip
        self.say(f"armed (pid {self.pid}): fires {timing.restore_s:.0f} s before the deadline, "
                 f"{timing.describe()}")  # fmt: skip

    def _look(self, holder: str | None) -> Seen:
        run, now = self.files.read_run(), self.ports.clock()
        rec = self.record
        assert rec is not None  # armed first
        if run is not None and run.started != self.started:
            run = None  # the directory was removed and a fresh night started: not this guard's
        if run is not None and run.finished is None:  # a new deadline or a slower boot
            timing = self.ports.timing()
            fire_at = timing.fire_at(run.deadline)
            if fire_at != rec.fire_at:
                why = "a new deadline" if run.deadline != rec.deadline else "a slower boot"
                rec.fire_at, rec.deadline, rec.restore_s, rec.restore_from = (
                    fire_at, run.deadline, timing.restore_s, timing.describe())  # fmt: skip
                self._update(rec.state, f"fire time moved ({why}): {timing.describe()}")
        foreign = None
        if run is not None and now >= rec.fire_at and holder is None:
            ours = night_rollouts(self.files.events())
            foreign = foreign_rollout(self.ports.rollouts(), run, ours)
        return Seen(run, now, rec.fire_at, holder, foreign)

    def _fire(self) -> GuardOutcome | None:
        """Under the locks: look again, then restore (None: the locks were taken meanwhile)."""
        try:
            with self.ports.locks():
                seen = self._look(None)
                d = decide(seen)
                if d.action in (Action.END, Action.STAND_DOWN):
                    return self._stop(d)
                if d.action is not Action.RESTORE or seen.run is None:
                    return None
                return self._restore(seen.run, seen.now)
        except ClusterBusy as exc:
            self.say(f"the locks were taken meanwhile: {exc}")
            return None

    def _restore(self, run: RunRecord, now: float) -> GuardOutcome:
        left = run.deadline - now
        self.files.event("guard_fired", deadline=run.deadline, left_s=round(left, 1))
        self.say(f"fired {left:.0f} s before the deadline: the night is unfinished")
        queue = NightQueue(self.ports.night(run), self.files, run, self.say)
        restored = queue.restore("the guard: the night is unfinished at its deadline's restore")
        at = self.ports.clock()
        if not restored.ok:
            state = GuardState.FAILED
        else:
            state = GuardState.RESTORED if restored.restarted else GuardState.VERIFIED
        self.files.event(_FIRED[state], deadline=run.deadline, at=at,
                         before_deadline=at <= run.deadline, detail=restored.detail,
                         rollout_id=restored.rollout_id)  # fmt: skip
        if self.record is not None:
            self.record.rollout_id = restored.rollout_id
        self._update(state, restored.detail)
        self.say(f"{state.value}: {restored.detail}")
        return GuardOutcome(state, restored.detail, restored)

    def _stop(self, d: Decision) -> GuardOutcome:
        state = GuardState.STOOD_DOWN if d.action is Action.STAND_DOWN else GuardState.ENDED
        if state is GuardState.STOOD_DOWN:
            self.files.event("guard_stood_down", why=d.why)
        if self.files.root.is_dir():  # never recreate a results directory that was removed
            self._update(state, d.why)
        self.say(f"{state.value}: {d.why}")
        return GuardOutcome(state, d.why)

    def _update(self, state: GuardState, detail: str) -> None:
        rec = self.record
        if rec is None:
            return
        mine = read_guard(self.files.root)
        if mine is not None and mine.pid != rec.pid:  # never overwrite another guard's record
            return
        rec.state, rec.detail, rec.updated = state, detail, self.ports.clock()
        write_guard(self.files.root, rec)
