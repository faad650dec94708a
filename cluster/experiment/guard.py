"""The deadline guard's decisions (pure: the time and what was seen are given) and its record.

A guard is armed for each night (by `experiment run`, and again by `--resume` when none is
alive): a process of its own, so production's restore does not depend on the night process.
It fires at the deadline minus the restore's estimate (`GuardTiming`: the worst recorded boot,
the verification and the plan's margin). Before then it only waits. From then on, unless the
night has finished, it needs the rollout's locks: while the night process lives it holds them
(it is restoring by its own policy), so the guard waits, and says so once the deadline has
passed; with the locks (the night died) it restores production as `--resume` does first. It
never undoes a rollout that someone else started since the night began (or was last
resumed): that cluster has moved on (`foreign_rollout`).

`guard.json` in the night's results directory is the guard's own record, written only by the
guard: its pid, when it fires and why, its state. `guard.lock` is held (flock) by the live
guard, so a second guard for the same night replaces nothing; `guard.log` is its output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum, StrEnum
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, atomic_write_json, read_json
from tpwarden.cluster.experiment.night import RunRecord
from tpwarden.cluster.experiment.policy import minutes

GUARD = "guard.json"
GUARD_LOCK = "guard.lock"
GUARD_LOG = "guard.log"
NIGHT_ROLLOUT = "variant_rollout"  # the event naming each rollout the night starts


class GuardState(StrEnum):
    """Where a guard stands (`guard.json`'s `state`)."""

    ARMED = "armed"  # waiting for its time
    WAITING = "waiting"  # its time has come; the rollout lock is held (the night lives)
    RESTORED = "restored"  # it restored production (a rollback to production's revision)
    VERIFIED = "verified"  # production was in place: verified, not restarted
    FAILED = "failed"  # its restore failed (the night stays unfinished: --resume)
    STOOD_DOWN = "stood_down"  # it did nothing: the cluster moved on
    ENDED = "ended"  # the night finished, or its results went: nothing to do

    @property
    def fired(self) -> bool:
        return self in (GuardState.RESTORED, GuardState.VERIFIED, GuardState.FAILED)


class Action(Enum):
    WAIT = "wait"  # before its time
    BLOCKED = "blocked"  # its time, but the rollout lock is held
    RESTORE = "restore"
    END = "end"
    STAND_DOWN = "stand_down"


@dataclass(frozen=True)
class GuardTiming:
    """The restore's estimate: a boot (the worst recorded), the verification, the margin."""

    boot_s: float
    boot_from: str
    verify_s: float
    margin_s: float

    @property
    def restore_s(self) -> float:
        return self.boot_s + self.verify_s + self.margin_s

    def fire_at(self, deadline: float) -> float:
        return deadline - self.restore_s

    def describe(self) -> str:
        return (f"boot {minutes(self.boot_s)} ({self.boot_from}) + verification "
                f"{minutes(self.verify_s)} + margin {minutes(self.margin_s)}")  # fmt: skip


@dataclass(frozen=True)
class RolloutSeen:
    """A rollout record as the guard reads it from the rollout store."""

    id: str
    started_at: float
    new_revision: str
    what: str  # its summary ("drafter: k 3 -> 5") or its changes


@dataclass(frozen=True)
class Seen:
    """What one look of the guard saw."""

    run: RunRecord | None  # None: the results directory (or its run record) is gone
    now: float
    fire_at: float
    holder: str | None = None  # the rollout lock's holder; None: free
    foreign: str | None = None  # a rollout someone else started since the night


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str
    until: float | None = None  # WAIT: its time
    late: bool = False  # BLOCKED with the deadline passed


def decide(seen: Seen) -> Decision:
    """What the guard does now (module docstring)."""
    run = seen.run
    if run is None:
        return Decision(Action.END, "the night's results directory or run record is gone")
    if run.finished is not None:
        return Decision(Action.END, "the night finished")
    if seen.now < seen.fire_at:
        return Decision(Action.WAIT, f"fires {minutes(seen.fire_at - seen.now)} from now",
                        until=seen.fire_at)  # fmt: skip
    if seen.holder is not None:
        late = seen.now >= run.deadline
        why = f"the rollout lock is held by {seen.holder}"
        return Decision(Action.BLOCKED, why + (" past the deadline" if late else ""), late=late)
    if seen.foreign is not None:
        return Decision(Action.STAND_DOWN, f"the cluster moved on: {seen.foreign}; production "
                        "is not restored over it")  # fmt: skip
    left = run.deadline - seen.now
    when = f"{minutes(left)} before the deadline" if left >= 0 else "past the deadline"
    return Decision(Action.RESTORE, f"the night is unfinished and the lock free, {when}")


def night_rollouts(events: Iterable[JSONObject]) -> set[str]:
    """The ids of the rollouts the night started (its `variant_rollout` events)."""
    return {str(e["rollout_id"]) for e in events
            if e.get("kind") == NIGHT_ROLLOUT and e.get("rollout_id")}  # fmt: skip


def foreign_rollout(rollouts: Sequence[RolloutSeen], run: RunRecord, ours: set[str]) -> str | None:
    """A rollout someone else started since the night began or was last resumed (a resume
    restored production over anything before it), or None. The night's own rollouts are
    `ours`; a rollback to production's revision restores production, whoever ran it."""
    since = max([run.started, *run.resumed])
    for r in rollouts:
        if r.started_at >= since and r.id not in ours and r.new_revision != run.production_revision:
            return f"rollout {r.id} ({r.what})"
    return None


@dataclass
class GuardRecord:
    """`guard.json` (module docstring); times are epoch seconds."""

    pid: int
    armed_at: float
    fire_at: float
    deadline: float
    restore_s: float
    restore_from: str
    state: GuardState = GuardState.ARMED
    detail: str = ""
    updated: float | None = None
    rollout_id: str | None = None  # the guard's rollback, when it restored

    def to_json(self) -> JSONObject:
        return {**asdict(self), "state": self.state.value}

    @classmethod
    def from_json(cls, doc: object) -> GuardRecord | None:
        if not isinstance(doc, dict):
            return None
        try:
            return cls(**{**doc, "state": GuardState(doc.get("state", "armed"))})
        except (TypeError, ValueError):
            return None


def read_guard(root: Path) -> GuardRecord | None:
    return GuardRecord.from_json(read_json(root / GUARD))


def write_guard(root: Path, record: GuardRecord) -> None:
    atomic_write_json(root / GUARD, record.to_json())
