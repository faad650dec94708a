"""The pure watchdog policy, driven by scripted observations and a fake clock (no I/O)."""

from __future__ import annotations

from dataclasses import replace

from tpwarden.cluster.hold import OperatorHold
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.observation import BootReading, Observation
from tpwarden.watchdog.policy import Policy, ProbeVerdict
from tpwarden.watchdog.policy_state import (
    Alert,
    CountFailure,
    GiveUp,
    Hold,
    PolicyConfig,
    PolicyState,
    ResetFailures,
    Restart,
    WatchdogPhase,
)


def policy_config(**settings: object) -> PolicyConfig:
    """The policy's knobs as the daemon builds them (`PolicyConfig.from_config`): PolicyConfig has
    no defaults of its own (issue 31, item 3)."""
    cfg = WatchdogConfig(probe_url="http://127.0.0.1:9", state_dir="unused", **settings)  # type: ignore[arg-type]
    return PolicyConfig.from_config(cfg)


CFG = policy_config(
    failures=3,
    timeout_s=120,  # the stall window
    boot_deadline_s=1800,
    boot_extend_s=300,
    boot_max_s=3600,  # the boot cap
    max_restarts=2,
    restart_window_s=21600,
    busy_alert_s=1800,
)


def test_the_policy_knobs_come_from_the_watchdog_settings() -> None:
    assert (CFG.stall_window_s, CFG.boot_cap_s, CFG.boot_deadline_s) == (120, 3600, 1800)


OK = ProbeResult(Outcome.OK, 0.4)
TIMEOUT = ProbeResult(Outcome.TIMEOUT, 120.0, "no answer")
REFUSED = ProbeResult(Outcome.REFUSED, 0.01, "connect failed")
DEAD = ProbeResult(Outcome.HTTP_5XX, 0.02, "HTTP 503", 503)
BAD_KEY = ProbeResult(Outcome.HTTP_4XX, 0.02, "HTTP 401: bad key", 401)


def snap(
    t: float,
    gen: float = 0,
    prompt: float = 0,
    running: float = 0,
    waiting: float = 0,
    kv: float = 0.0,
) -> MetricsSnapshot:
    return MetricsSnapshot(
        t,
        {
            "vllm:generation_tokens_total": gen,
            "vllm:prompt_tokens_total": prompt,
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": kv,
        },
    )


class Sim:
    """Feeds observations with a fake clock; collects every decision."""

    def __init__(self, cfg: PolicyConfig = CFG, state: PolicyState | None = None) -> None:
        self.policy = Policy(cfg)
        self.now = 1_000_000.0
        self.state = state or PolicyState(phase=WatchdogPhase.READY)
        self.decisions: list = []

    def step(
        self, probe: ProbeResult, metrics: MetricsSnapshot | None = None, dt: float = 150, **obs
    ) -> list:
        self.now += dt
        self.state, d = self.policy.decide(self.state, Observation(probe, metrics, **obs), self.now)
        self.decisions += d
        return d

    def restarted(self, ok: bool = True) -> list:
        self.state, d = self.policy.on_restart_result(self.state, self.now, ok=ok, error="boom")
        self.decisions += d
        return d

    def of(self, kind: type) -> list:
        return [d for d in self.decisions if isinstance(d, kind)]


def test_refused_and_5xx_count_at_once_and_three_give_exactly_one_restart() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now))
    assert sim.of(CountFailure) == []
    sim.step(REFUSED)
    sim.step(DEAD)
    assert [d.count for d in sim.of(CountFailure)] == [1, 2]
    assert sim.state.phase is WatchdogPhase.SUSPECT and not sim.of(Restart)
    sim.step(REFUSED)
    restarts = sim.of(Restart)
    assert len(restarts) == 1 and restarts[0].cause == "probe_failures"
    assert (
        sim.state.phase is WatchdogPhase.RESTARTING
        and sim.state.restart_in_progress == restarts[0].restart_id
    )
    assert len(restarts[0].evidence["failures"]) == 3
    sim.step(REFUSED)  # while restarting nothing more happens
    assert len(sim.of(Restart)) == 1


def test_ok_resets_the_streak() -> None:
    sim = Sim()
    sim.step(REFUSED)
    sim.step(REFUSED)
    sim.step(OK)
    assert sim.of(ResetFailures)[0].previous == 2 and sim.state.consecutive_failures == 0
    sim.step(REFUSED)
    sim.step(REFUSED)
    assert not sim.of(Restart)


def test_busy_under_long_prefills_is_never_counted() -> None:
    """Field report: 128k prefills of 60 s, 120 s timeout, hours of load, zero restarts."""
    sim = Sim()
    prompt = 0.0
    sim.step(OK, snap(sim.now, prompt=prompt, running=1))
    for _ in range(50):  # each window finishes at least one 128k prefill: prompt tokens advance
        prompt += 131072
        d = sim.step(TIMEOUT, snap(sim.now + 150, prompt=prompt, running=1, waiting=5))
        assert sim.state.last_verdict == ProbeVerdict.BUSY.value, d
    assert not sim.of(CountFailure) and not sim.of(Restart)


def test_prefill_in_flight_kv_growth_is_busy() -> None:
    """One prefill longer than the window: counters flat, but KV blocks keep being allocated."""
    sim = Sim()
    sim.step(OK, snap(sim.now, gen=10, prompt=10))
    for i in range(1, 6):
        sim.step(TIMEOUT, snap(sim.now + 150, gen=10, prompt=10, running=1, kv=0.1 * i))
    assert not sim.of(CountFailure)


def test_flat_counters_with_timeout_count_as_stalled_and_restart() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now, gen=500, prompt=900))
    for _ in range(3):
        sim.step(TIMEOUT, snap(sim.now + 150, gen=500, prompt=900, running=0, waiting=3))
    assert [d.verdict for d in sim.of(CountFailure)] == ["stalled"] * 3
    assert len(sim.of(Restart)) == 1


def test_first_timeout_without_baseline_is_unknown_not_counted() -> None:
    sim = Sim()
    sim.step(TIMEOUT, snap(sim.now + 150, gen=5))
    assert sim.state.last_verdict == "unknown" and not sim.of(CountFailure)


def test_flat_shorter_than_stall_window_is_not_counted() -> None:
    sim = Sim(replace(CFG, stall_window_s=400))
    sim.step(OK, snap(sim.now, gen=1))
    sim.step(TIMEOUT, snap(sim.now + 150, gen=1), dt=150)
    assert sim.state.last_verdict == "unknown"
    sim.step(TIMEOUT, snap(sim.now + 300, gen=1), dt=300)
    assert sim.of(CountFailure)[0].verdict == "stalled"


def test_timeout_with_metrics_unreadable_counts_once_unreadable_for_the_window() -> None:
    # Issue 15 (6): one timeout with an unreadable /metrics is no evidence of a hang (a busy
    # API server is slow on /metrics too); it counts once /metrics stays unreadable.
    sim = Sim()
    sim.step(OK, snap(sim.now))
    sim.step(TIMEOUT, MetricsSnapshot(sim.now + 150, error="ReadTimeout"))
    assert not sim.of(CountFailure) and sim.state.last_verdict == "unknown"
    sim.step(TIMEOUT, MetricsSnapshot(sim.now + 150, error="ReadTimeout"))
    assert sim.of(CountFailure)[0].verdict == "stalled"


def test_progress_between_stalls_resets_so_flat_spans_whole_window() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now, gen=1))
    sim.step(TIMEOUT, snap(sim.now + 150, gen=1))
    sim.step(TIMEOUT, snap(sim.now + 150, gen=1))
    sim.step(TIMEOUT, snap(sim.now + 150, gen=2))  # progress: busy, streak reset
    sim.step(TIMEOUT, snap(sim.now + 150, gen=2))
    assert [d.count for d in sim.of(CountFailure)] == [1, 2, 1]
    assert not sim.of(Restart)


def test_4xx_alerts_once_and_never_counts() -> None:
    sim = Sim()
    for _ in range(5):
        sim.step(BAD_KEY)
    assert not sim.of(CountFailure) and not sim.of(Restart)
    alerts = sim.of(Alert)
    assert len(alerts) == 1 and alerts[0].category == "misconfig"


def test_boot_grace_extends_with_progress_and_ends_at_deadline() -> None:
    sim = Sim()
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    start = sim.now
    assert sim.state.phase is WatchdogPhase.BOOTING and sim.state.boot_deadline_at == start + 1800
    # 30 minutes of refused probes but shards keep loading: deadline moves forward, no restart
    for shard in range(1, 13):
        sim.step(REFUSED, dt=150, boot_progress=BootReading("loading_weights", shard))
    assert sim.now == start + 1800 and not sim.of(Restart) and not sim.of(CountFailure)
    assert sim.state.boot_deadline_at == sim.now + 300
    # progress stops: the extended deadline passes -> one restart
    sim.step(REFUSED, dt=200, boot_progress=BootReading("loading_weights", 12))
    assert not sim.of(Restart)
    sim.step(REFUSED, dt=101, boot_progress=BootReading("loading_weights", 12))
    assert len(sim.of(Restart)) == 1 and sim.of(Restart)[0].cause == "boot_deadline"


def test_boot_extension_is_capped() -> None:
    sim = Sim()
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    start = sim.now
    for shard in range(1, 100):
        sim.step(REFUSED, dt=60, boot_progress=BootReading("loading_weights", shard))
        if sim.of(Restart):
            break
    assert sim.now - start == 3600  # boot_cap_s: progress cannot keep a boot alive forever
    assert len(sim.of(Restart)) == 1


def test_boot_ok_goes_ready() -> None:
    sim = Sim()
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    sim.step(REFUSED)
    sim.step(OK)
    assert sim.state.phase is WatchdogPhase.READY and sim.state.boot_deadline_at is None


def test_two_failed_boots_give_up_with_exactly_one_alert() -> None:
    sim = Sim(replace(CFG, max_restarts=5))
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    sim.step(REFUSED, dt=1801)
    assert len(sim.of(Restart)) == 1
    sim.restarted()
    sim.step(REFUSED, dt=1801)
    assert len(sim.of(Restart)) == 1 and len(sim.of(GiveUp)) == 1
    assert sim.state.phase is WatchdogPhase.GIVEN_UP
    for _ in range(20):
        sim.step(REFUSED, dt=1801)
    assert len(sim.of(Restart)) == 1 and len(sim.of(GiveUp)) == 1
    assert [a.category for a in sim.of(Alert)] == ["gave_up"]
    # the server comes back on its own (or the operator fixed it): READY again
    sim.step(OK)
    assert sim.state.phase is WatchdogPhase.READY and sim.state.boot_failures == 0


def test_budget_exhausted_holds_with_one_alert() -> None:
    sim = Sim()
    for _ in range(2):  # two incidents, two restarts
        for _ in range(3):
            sim.step(DEAD)
        sim.restarted()
        sim.step(OK)
    assert len(sim.of(Restart)) == 2
    for _ in range(10):
        sim.step(DEAD)
    assert len(sim.of(Restart)) == 2
    assert sim.state.phase is WatchdogPhase.HELD
    assert len(sim.of(Hold)) == 1
    assert [a.category for a in sim.of(Alert)] == ["budget_exhausted"]


def test_budget_window_rolls() -> None:
    sim = Sim()
    for _ in range(3):
        for _ in range(3):
            sim.step(DEAD, dt=3600)
        sim.restarted()
        sim.step(OK, dt=3600)
    assert len(sim.of(Restart)) == 3  # restarts 4 h apart: never 2 inside one 6 h window
    assert not sim.of(Hold)


def test_release_rearms_after_automatic_hold() -> None:
    sim = Sim(replace(CFG, max_restarts=0))
    for _ in range(3):
        sim.step(DEAD)
    assert sim.state.phase is WatchdogPhase.HELD
    sim.step(DEAD, released_at=sim.now + 1)
    assert sim.state.phase is WatchdogPhase.BOOTING and sim.state.restart_times == ()


def test_operator_hold_suppresses_restarts_and_expires() -> None:
    sim = Sim()
    hold = OperatorHold(until=sim.now + 1800, reason="rollout", by="ops")
    for _ in range(5):
        sim.step(DEAD, dt=150, hold=hold)
    assert not sim.of(Restart)
    assert len(sim.of(Hold)) == 3 and sim.of(Hold)[0].until == hold.until
    assert sim.state.consecutive_failures == 5  # still counted, just not acted on
    sim.step(DEAD, dt=1200, hold=hold)  # hold expired
    assert len(sim.of(Restart)) == 1


def test_operator_hold_keeps_boot_failures_uncounted() -> None:
    sim = Sim()
    sim.state, _ = sim.policy.on_startup(None, sim.now)
    hold = OperatorHold(until=sim.now + 10_000, reason="debug")
    for _ in range(3):
        sim.step(REFUSED, dt=1801, hold=hold)
    assert sim.state.boot_failures == 0 and not sim.of(Restart) and not sim.of(GiveUp)


def test_restart_failure_alerts_and_enters_boot_grace() -> None:
    sim = Sim()
    for _ in range(3):
        sim.step(REFUSED)
    sim.restarted(ok=False)
    assert sim.state.phase is WatchdogPhase.BOOTING and sim.state.restart_in_progress is None
    assert [a.category for a in sim.of(Alert)] == ["restart_failed"]


def test_startup_with_interrupted_restart_does_not_restart_again() -> None:
    policy = Policy(CFG)
    crashed = PolicyState(
        phase=WatchdogPhase.RESTARTING,
        restart_in_progress="r1-5",
        restart_seq=1,
        restart_times=(5.0,),
    )
    state, d = policy.on_startup(crashed, 100.0)
    assert state.phase is WatchdogPhase.BOOTING and state.restart_in_progress is None
    assert state.restart_times == (5.0,) and not any(isinstance(x, Restart) for x in d)
    assert "interrupted" in d[0].reason


def test_busy_ceiling_alerts_once_never_restarts() -> None:
    sim = Sim()
    gen = 0
    sim.step(OK, snap(sim.now))
    for _ in range(40):
        gen += 10
        sim.step(TIMEOUT, snap(sim.now + 150, gen=gen, running=32))
    assert not sim.of(Restart)
    assert [a.category for a in sim.of(Alert)] == ["busy_ceiling"]


def test_a_canarys_load_is_never_counted_as_users_busy_server() -> None:
    """Issue 53: while a canary lease holds, BUSY is the canary's load; the busy ceiling (an
    alert about users' load) does not run. The same load without the lease alerts."""
    sim = Sim()
    gen = 0
    sim.step(OK, snap(sim.now))
    for _ in range(40):
        gen += 10
        d = sim.step(TIMEOUT, snap(sim.now + 150, gen=gen, running=4), canary="c7")
        assert "canary c7" in d[-1].reason
    assert not sim.of(Alert) and not sim.of(Restart) and sim.state.busy_since is None
    assert sim.state.phase is WatchdogPhase.READY
    # the canary ended; users' load from now on counts from its own start
    for _ in range(40):
        gen += 10
        sim.step(TIMEOUT, snap(sim.now + 150, gen=gen, running=4))
    assert [a.category for a in sim.of(Alert)] == ["busy_ceiling"]


def test_a_canary_does_not_hide_a_hang() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now, gen=5))
    for _ in range(4):
        sim.step(TIMEOUT, snap(sim.now + 150, gen=5, running=1), canary="c7")
    assert len(sim.of(Restart)) == 1  # flat counters: stalled, canary or not


def test_state_round_trips_through_json() -> None:
    sim = Sim()
    sim.step(OK, snap(sim.now, gen=3))
    sim.step(REFUSED)
    again = PolicyState.from_json(sim.state.to_json())
    assert again == sim.state
