"""The deadline guard (issue 54, item 2): its pure decisions with the time given, and its loop
against fake ports (a fake clock: a night of hours in milliseconds). The guard waits until the
deadline minus the restore's estimate; ends once the night has finished; waits while the night
holds the rollout lock (saying so once the deadline has passed); restores production as
`--resume` does first when the night died, or verifies it in place; never restores over
someone else's rollout; and a night killed on its second variant, restored by the guard, then
resumed runs only what is left."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tpwarden.cluster.experiment.guard import (
    Action,
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
from tpwarden.cluster.experiment.guard_loop import NightGuard
from tpwarden.cluster.experiment.night import NightFiles, RunRecord
from tpwarden.cluster.experiment.queue import NightQueue, Restored
from tpwarden.cluster.operator_lock import ClusterBusy

from .test_experiment_night import COSTS, PROD, T0, VARIANTS, FakeNight, Killed

H = 3600.0
DEADLINE = T0 + 6 * H
TIMING = GuardTiming(1110.0, "worst of 3 recorded boots", 120.0, 600.0)  # restore_s 1830
FIRE = DEADLINE - 1830.0


def _run(**kw: object) -> RunRecord:
    run = RunRecord("plan.yml", "inv.yml", "lab", "rev0", PROD, T0, DEADLINE)
    return replace(run, **kw)  # type: ignore[arg-type]


# -- the decisions ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("run", "now", "holder", "foreign", "action", "late", "why"),
    [
        (None, FIRE + 1, None, None, Action.END, False, "gone"),
        (_run(finished=T0 + H), FIRE + 1, "x", "r1", Action.END, False, "finished"),
        (_run(finished=T0 + H), T0 + 1, None, None, Action.END, False, "finished"),
        (_run(), T0 + 1, None, None, Action.WAIT, False, "fires 5 h 29 min from now"),
        (_run(), FIRE - 1, "night", "r1", Action.WAIT, False, "fires 0.0 min"),
        (_run(), FIRE, "night pid 7", None, Action.BLOCKED, False, "held by night pid 7"),
        (_run(), DEADLINE, "night pid 7", None, Action.BLOCKED, True, "past the deadline"),
        (_run(), FIRE + 1, "rollout pid 9", "r1", Action.BLOCKED, False, "rollout pid 9"),
        (_run(), FIRE + 1, None, "rollout r1 (k 3 -> 5)", Action.STAND_DOWN, False,
         "moved on: rollout r1 (k 3 -> 5)"),
        (_run(), FIRE, None, None, Action.RESTORE, False, "30.5 min before the deadline"),
        (_run(), DEADLINE + 60, None, None, Action.RESTORE, False, "past the deadline"),
        (_run(aborted_at=T0 + H, aborted_by="ops"), FIRE, None, None, Action.RESTORE, False,
         "unfinished"),
    ],
)  # fmt: skip
def test_the_guard_decides_from_the_run_record_the_time_the_lock_and_the_store(
    run: RunRecord | None,
    now: float,
    holder: str | None,
    foreign: str | None,
    action: Action,
    late: bool,
    why: str,
) -> None:
    d = decide(Seen(run, now, FIRE, holder, foreign))
    assert d.action is action and d.late is late and why in d.why, d
    assert (d.until == FIRE) is (action is Action.WAIT)


def test_the_fire_time_is_the_deadline_less_a_worst_boot_the_verification_and_the_margin() -> None:
    assert TIMING.restore_s == 1830.0 and TIMING.fire_at(DEADLINE) == FIRE
    text = TIMING.describe()
    assert "boot 18.5 min (worst of 3 recorded boots)" in text
    assert "verification 2.0 min" in text and "margin 10.0 min" in text


def _seen(rid: str, at: float, rev: str = "rev-x") -> RolloutSeen:
    return RolloutSeen(rid, at, rev, "drafter: k 3 -> 5")


def test_only_someone_else_s_rollout_since_the_night_or_its_resume_is_foreign() -> None:
    run = _run()
    ours = night_rollouts([{"kind": "variant_rollout", "variant": "k5", "rollout_id": "r-k5"},
                           {"kind": "variant_begin", "variant": "k7"}])  # fmt: skip
    assert ours == {"r-k5"}
    assert foreign_rollout([_seen("before", T0 - 1)], run, ours) is None  # before the night
    assert foreign_rollout([_seen("r-k5", T0 + 10)], run, ours) is None  # the night's own
    back = _seen("rb", T0 + 20, rev="rev0")  # a rollback to production's revision
    assert foreign_rollout([back], run, ours) is None
    theirs = _seen("r-ops", T0 + 30)
    assert foreign_rollout([theirs], run, ours) == "rollout r-ops (drafter: k 3 -> 5)"
    resumed = _run(resumed=[T0 + 40])  # a resume restored production over it: accepted
    assert foreign_rollout([theirs], resumed, ours) is None
    assert foreign_rollout([theirs, _seen("r-late", T0 + 50)], resumed, ours) is not None


def test_the_guard_record_round_trips_and_garbage_reads_as_none(tmp_path: Path) -> None:
    rec = GuardRecord(42, T0, FIRE, DEADLINE, 1830.0, TIMING.describe())
    write_guard(tmp_path, rec)
    back = read_guard(tmp_path)
    assert back == rec and back is not None and back.state is GuardState.ARMED
    assert GuardRecord.from_json({"pid": 1}) is None and GuardRecord.from_json([1]) is None
    assert GuardRecord.from_json({**rec.to_json(), "state": "dancing"}) is None


# -- the loop, against fake ports ---------------------------------------------------------------
class FakeGuardPorts:
    """The guard's ports over a FakeNight (its clock is the night's), a rollout lock that a
    test holds and lets go at set times, a rollout store, and things that happen at times."""

    def __init__(self, night: FakeNight, timing: GuardTiming = TIMING) -> None:
        self.fake = night
        self.timing_now = timing
        self.held_by: str | None = None
        self.store: list[RolloutSeen] = []
        self.at: list[tuple[float, Callable[[], None]]] = []  # (time, what happens then)
        self.sleeps: list[float] = []
        self.busy_once = False
        self.locked = 0
        self.tries: list[float] = []  # when it tried to take the locks

    def clock(self) -> float:
        return self.fake.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.fake.now += seconds
        for when, what in list(self.at):
            if self.fake.now >= when:
                self.at.remove((when, what))
                what()

    def timing(self) -> GuardTiming:
        return self.timing_now

    def holder(self) -> str | None:
        return self.held_by

    def rollouts(self) -> list[RolloutSeen]:
        return self.store

    @contextlib.contextmanager
    def locks(self) -> Iterator[None]:
        self.tries.append(self.fake.now)
        if self.busy_once:
            self.busy_once = False
            raise ClusterBusy("another action holds the cluster lock: watchdog restart")
        assert self.held_by is None
        self.locked += 1
        yield

    def night(self, run: RunRecord) -> FakeNight:
        return self.fake


def _killed_night(tmp_path: Path, kill_after: int) -> tuple[FakeNight, NightFiles]:
    """A night run with fake ports until it is killed after `kill_after` steps."""
    fake = FakeNight(kill_after=kill_after)
    files = NightFiles(tmp_path / "results", clock=fake.clock)
    queue = NightQueue(fake, files, _run())
    queue.begin()
    with pytest.raises(Killed):
        queue.run(VARIANTS, COSTS)
    files.close()
    fake.kill_after, fake.calls = None, []
    return fake, NightFiles(tmp_path / "results", clock=fake.clock)


def _guard(ports: FakeGuardPorts, files: NightFiles, poll_s: float = 10.0) -> NightGuard:
    return NightGuard(ports, files, 4242, poll_s=poll_s)


def _kinds(files: NightFiles) -> list[str]:
    return [str(e["kind"]) for e in files.events()]


KILLED_ON_K7 = 6  # canary, restart k5, canary k5, restart no-drafter, canary, restart k7


def test_a_night_killed_on_a_variant_is_restored_by_the_guard_before_the_deadline(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    assert fake.running == "h-k7"
    killed_at = fake.now
    ports = FakeGuardPorts(fake)
    out = _guard(ports, files).run()
    assert out.state is GuardState.RESTORED and out.ok and fake.calls == ["restore"]
    assert fake.running == PROD and ports.locked == 1
    assert max(ports.sleeps) <= 10.0  # it looked every poll, never slept past its time
    restored = [e for e in files.events() if e["kind"] == "guard_restored"]
    assert len(restored) == 1 and restored[0]["before_deadline"] is True
    assert FIRE <= restored[0]["at"] <= DEADLINE and restored[0]["rollout_id"] == "r-restore"
    assert _kinds(files)[-4:] == ["guard_fired", "restore_begin", "restore_end", "guard_restored"]
    run = files.read_run()
    assert "guard_armed" in _kinds(files) and run is not None and run.finished is None
    rec = read_guard(files.root)
    assert rec is not None and rec.state is GuardState.RESTORED and rec.pid == 4242
    assert rec.fire_at == FIRE and rec.rollout_id == "r-restore" and killed_at < FIRE

    # --resume (with a later deadline: --restore-by) runs only what is left, on production
    # already: k7, no second restore first
    fake.calls = []
    run.deadline = fake.now + 6 * H
    queue = NightQueue(fake, NightFiles(files.root, clock=fake.clock), run)
    assert queue.bring_back() is None
    out2 = queue.run(VARIANTS, COSTS)
    assert fake.calls == ["restart k7", "canary k7", "restore", "canary production-end"]
    assert out2.ok and out2.done == ["k7"]


def test_a_night_killed_between_its_steps_on_production_is_verified_not_restarted(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, 1)  # after the opening canary: still on production
    out = _guard(FakeGuardPorts(fake), files).run()
    assert out.state is GuardState.VERIFIED and "restore" not in fake.calls
    assert _kinds(files)[-1] == "guard_verified"


def test_the_guard_ends_as_soon_as_the_night_finishes(tmp_path: Path) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    run = files.read_run()
    assert run is not None

    def finished() -> None:
        files.write_run(replace(run, finished=fake.now))

    ports.at.append((T0 + H, finished))
    out = _guard(ports, files).run()
    assert out.state is GuardState.ENDED and "finished" in out.detail
    assert fake.calls == [] and ports.locked == 0 and fake.now < T0 + H + 11
    assert _kinds(files)[-1] == "guard_armed"  # a quiet end: guard.json only
    rec = read_guard(files.root)
    assert rec is not None and rec.state is GuardState.ENDED


def test_the_guard_ends_when_the_results_directory_goes_and_does_not_recreate_it(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    ports.at.append((T0 + H, lambda: shutil.rmtree(files.root)))
    out = _guard(ports, files).run()
    assert out.state is GuardState.ENDED and not files.root.exists()


def test_while_the_night_holds_the_lock_the_guard_waits_and_says_so_past_the_deadline(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    ports.held_by = "pid=77 tpwarden experiment run plan.yml by ops@control (pid 77)"

    def let_go() -> None:  # the night dies late: the guard restores past the deadline
        ports.held_by = None

    ports.at.append((DEADLINE + 600, let_go))
    out = _guard(ports, files).run()
    late = [e for e in files.events() if e["kind"] == "guard_late"]
    assert len(late) == 1 and "pid 77" in str(late[0]["holder"])  # said once, not per look
    assert late[0]["ts"] >= DEADLINE
    assert out.state is GuardState.RESTORED
    restored = [e for e in files.events() if e["kind"] == "guard_restored"][0]
    assert restored["before_deadline"] is False


def test_a_night_that_finishes_while_the_guard_waits_for_its_lock_is_left_alone(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    ports.held_by = "pid=77 tpwarden experiment run plan.yml"
    run = files.read_run()
    assert run is not None

    def done() -> None:  # the night restores by its own policy, then lets go
        files.write_run(replace(run, finished=fake.now))
        ports.held_by = None

    ports.at.append((FIRE + 300, done))
    out = _guard(ports, files).run()
    assert out.state is GuardState.ENDED and fake.calls == [] and ports.locked == 0
    rec = read_guard(files.root)
    assert rec is not None and rec.state is GuardState.ENDED


def test_the_guard_never_restores_over_someone_else_s_rollout(tmp_path: Path) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    ports.store = [_seen("r-ops", T0 + 2 * H)]  # an operator's rollout after the night died
    out = _guard(ports, files).run()
    assert out.state is GuardState.STOOD_DOWN and "r-ops" in out.detail
    assert fake.calls == [] and fake.running == "h-k7"
    assert _kinds(files)[-1] == "guard_stood_down"


def test_the_night_s_own_rollouts_are_not_someone_else_s(tmp_path: Path) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    files.event("variant_rollout", variant="k7", rollout_id="r-k7")
    ports = FakeGuardPorts(fake)
    ports.store = [_seen("r-k7", T0 + H)]
    assert _guard(ports, files).run().state is GuardState.RESTORED


def test_locks_taken_meanwhile_are_waited_for_and_a_failed_restore_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    ports.busy_once = True  # a watchdog restart holds the cluster lock at the guard's time
    monkeypatch.setattr(fake, "restore", lambda: Restored(False, True, "rollback r9 ended failed"))
    out = _guard(ports, files).run()
    assert out.state is GuardState.FAILED and not out.ok and ports.locked == 1
    assert ports.tries[1] - ports.tries[0] == 10.0  # after the busy lock, a poll: no spinning
    failed = [e for e in files.events() if e["kind"] == "guard_restore_failed"]
    assert failed and failed[0]["detail"] == "rollback r9 ended failed"
    run = files.read_run()
    assert run is not None and run.finished is None  # --resume restores it


def test_a_slower_boot_recorded_tonight_moves_the_fire_time_earlier(tmp_path: Path) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    slower = GuardTiming(2400.0, "worst of 4 recorded boots", 120.0, 600.0)
    ports.at.append((T0 + H, lambda: setattr(ports, "timing_now", slower)))
    _guard(ports, files).run()
    fired = [e for e in files.events() if e["kind"] == "guard_fired"][0]
    assert fired["ts"] < FIRE and fired["ts"] >= DEADLINE - slower.restore_s
    rec = read_guard(files.root)
    assert rec is not None and rec.fire_at == DEADLINE - slower.restore_s


def test_a_guard_for_a_finished_night_or_none_ends_at_once(tmp_path: Path) -> None:
    fake = FakeNight()
    files = NightFiles(tmp_path / "results", clock=fake.clock)
    assert _guard(FakeGuardPorts(fake), files).run().state is GuardState.ENDED
    files.write_run(_run(finished=T0 + H))
    out = _guard(FakeGuardPorts(fake), files).run()
    assert out.state is GuardState.ENDED and not (files.root / "guard.json").exists()


def test_a_fresh_night_in_the_same_directory_is_not_the_old_guard_s(tmp_path: Path) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)

    def replaced() -> None:  # removed by hand, and a fresh night started in its place
        shutil.rmtree(files.root)
        NightFiles(files.root).write_run(_run(started=T0 + 2 * H))
        write_guard(files.root, GuardRecord(999, T0 + 2 * H, FIRE, DEADLINE, 1.0, "theirs"))

    ports.at.append((T0 + H, replaced))
    out = _guard(ports, files).run()
    assert out.state is GuardState.ENDED and fake.calls == []
    rec = read_guard(files.root)
    assert rec is not None and rec.pid == 999  # the other guard's record is left alone


def test_a_resume_with_a_later_deadline_moves_a_waiting_guard_back_to_its_time(
    tmp_path: Path,
) -> None:
    fake, files = _killed_night(tmp_path, KILLED_ON_K7)
    ports = FakeGuardPorts(fake)
    run = files.read_run()
    assert run is not None
    ports.held_by = "pid=78 tpwarden experiment run plan.yml (a resumed night)"
    states: list[GuardState] = []

    def later() -> None:  # the resumed night gave itself 6 more hours, then died
        states.append(read_guard(files.root).state)  # type: ignore[union-attr]
        files.write_run(replace(run, deadline=DEADLINE + 6 * H, resumed=[fake.now]))
        ports.held_by = None

    def looked() -> None:
        states.append(read_guard(files.root).state)  # type: ignore[union-attr]

    ports.at += [(FIRE + 60, later), (FIRE + 120, looked)]
    out = _guard(ports, files).run()
    assert states == [GuardState.WAITING, GuardState.ARMED]
    fired = [e for e in files.events() if e["kind"] == "guard_fired"][0]
    assert fired["ts"] >= DEADLINE + 6 * H - TIMING.restore_s and out.state is GuardState.RESTORED
    rec = read_guard(files.root)
    assert rec is not None and rec.deadline == DEADLINE + 6 * H
