"""Issue 15: the policy is never blind or silent, keeps its deadlines, and respects operators."""

from __future__ import annotations

from dataclasses import replace

from tpwarden.cluster.hold import OperatorHold
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.observation import BootReading, Observation
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import (
    Alert,
    CountFailure,
    GiveUp,
    PolicyState,
    Restart,
    WatchdogPhase,
)

from .test_watchdog_policy import BAD_KEY, CFG, DEAD, OK, REFUSED, TIMEOUT, Sim, snap

NOT_FOUND = ProbeResult(Outcome.HTTP_4XX, 0.02, "HTTP 404: model", 404)


def test_401_for_hours_is_a_blind_phase_that_realerts_on_schedule() -> None:
    # Reproduction (4): 12 h of 401 gave 1 alert and phase `ready`.
    sim = Sim()
    sim.step(OK, snap(sim.now))
    for _ in range(int(12 * 3600 / 150)):
        sim.step(BAD_KEY)
    assert sim.state.phase is WatchdogPhase.BLIND
    alerts = [a for a in sim.of(Alert) if a.category == "misconfig"]
    assert len(alerts) == 12  # one at once, then one per hour (blind_realert_s)
    assert "blind" in alerts[-1].message and not sim.of(Restart) and not sim.of(CountFailure)
    sim.step(OK, snap(sim.now))
    assert sim.state.phase is WatchdogPhase.READY and sim.state.blind_since is None


def test_blind_then_refused_counts_again() -> None:
    sim = Sim()
    sim.step(NOT_FOUND)
    assert sim.state.phase is WatchdogPhase.BLIND
    for _ in range(3):
        sim.step(REFUSED)
    assert len(sim.of(Restart)) == 1


def test_daemon_restart_while_hung_grants_no_new_boot_grace() -> None:
    # Reproduction (6): a restarted daemon gave a hung server a fresh 2400 s boot grace.
    sim = Sim()
    sim.step(OK, snap(sim.now))
    sim.step(DEAD)
    state, _ = sim.policy.on_startup(PolicyState.from_json(sim.state.to_json()), sim.now + 5)
    assert state.phase is WatchdogPhase.SUSPECT and state.consecutive_failures == 1
    sim.state = state
    sim.step(DEAD)
    sim.step(DEAD)
    assert len(sim.of(Restart)) == 1


def test_restart_during_boot_keeps_the_grace_left_not_a_wall_clock_difference() -> None:
    policy = Policy(CFG)
    state, _ = policy.on_startup(None, 1000.0)
    state, _ = policy.decide(state, Observation(REFUSED), 1600.0)  # 1200 s of grace left
    # The daemon restarts after a +3 h wall-clock step: the grace left is what was left.
    state, _ = policy.on_startup(PolicyState.from_json(state.to_json()), 1600.0 + 3 * 3600)
    assert state.phase is WatchdogPhase.BOOTING
    assert state.boot_deadline_at == 1600.0 + 3 * 3600 + 1200


def test_container_exited_during_boot_is_a_failed_boot_at_once_with_backoff() -> None:
    # Reproduction (6): a boot that crashed at 60 s was retried only at the boot deadline.
    sim = Sim()
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    crashed = BootReading("loading_weights", 3, failed=True)
    sim.step(REFUSED, dt=60, boot_progress=crashed)
    restarts = sim.of(Restart)
    assert len(restarts) == 1 and restarts[0].cause == "boot_failed"
    sim.restarted()
    sim.step(REFUSED, dt=60, boot_progress=crashed)
    assert len(sim.of(Restart)) == 1 and sim.of(GiveUp)  # 2nd failed boot: bounded, give up
    assert sim.state.phase is WatchdogPhase.GIVEN_UP


def test_crash_retries_back_off_when_more_boots_are_allowed() -> None:
    sim = Sim(replace(CFG, max_boot_failures=4, max_restarts=10))
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    crashed = BootReading("engine_init", 0, failed=True)
    times = []
    for _ in range(40):
        n = len(sim.of(Restart))
        sim.step(REFUSED, dt=30, boot_progress=crashed)
        if len(sim.of(Restart)) > n:
            times.append(sim.now)
            sim.restarted()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) == 3 and gaps == [90, 150]  # 60 s then 120 s backoff (+ one 30 s tick)
    assert sim.of(GiveUp)  # 2nd failed boot: bounded, give up
    assert sim.state.phase is WatchdogPhase.GIVEN_UP


def test_expired_hold_alerts_once_and_rearms_restarts() -> None:
    # Reproduction (6): a rollout killed with -9 left its hold, server down, no alert.
    sim = Sim()
    hold = OperatorHold(until=sim.now + 600, reason="rollout 1", by="ops")
    sim.step(DEAD, hold=hold)
    sim.step(DEAD, hold=hold)
    assert not sim.of(Alert)
    sim.step(DEAD, dt=600, hold=hold)  # expired
    sim.step(DEAD, hold=hold)
    expired = [a for a in sim.of(Alert) if a.category == "hold_expired"]
    assert len(expired) == 1 and "rollout 1" in expired[0].message
    assert len(sim.of(Restart)) == 1


def test_intentional_down_is_never_restarted_and_up_gets_a_fresh_boot_grace() -> None:
    # Reproduction (7): the watchdog restarted a server an operator had stopped on purpose.
    sim = Sim()
    down = OperatorHold(until=sim.now + 7 * 86400, reason="tpwarden down", by="ops", kind="down")
    for _ in range(40):
        sim.step(REFUSED, hold=down)
    assert not sim.of(Restart) and not sim.of(CountFailure)
    assert "intentional stop" in sim.decisions[-1].reason
    # `tpwarden up` removes the hold: the new server boots under a full grace
    sim.step(REFUSED, dt=10)
    assert sim.state.phase is WatchdogPhase.BOOTING and not sim.of(Restart)


def test_unreadable_metrics_without_progress_restart_within_one_extra_probe() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now))
    for _ in range(4):
        sim.step(TIMEOUT, MetricsSnapshot(sim.now + 150, error="ReadTimeout"))
    assert len(sim.of(Restart)) == 1
