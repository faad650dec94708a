"""Issue 15: the daemon acts when its disk is full, retries alerts, keeps time, stays bounded."""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

import httpx
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import Watchdog
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.policy_state import WatchdogPhase
from tpwarden.watchdog.runtime import Cadence, SteadyClock
from tpwarden.watchdog.state import StateStore

from .test_watchdog_daemon import REFUSED, FakeActuator, FakeClock, FakeProber, make


class FullDiskLog(EventLog):
    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        raise OSError(errno.ENOSPC, "No space left on device")


class FullDiskStore(StateStore):
    def save(self, state: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class FakePoster:
    def __init__(self, fail_times: int) -> None:
        self.fail_times = fail_times
        self.calls = 0

    def __call__(self, url: str, **kw: Any) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.fail_times:
            raise httpx.ConnectError("webhook down")
        return httpx.Response(200)


def test_full_disk_still_counts_restarts_exports_and_alerts(tmp_path: Path) -> None:
    # Reproduction (3): 10 refused probes with the log on a full disk gave 10 ENOSPC
    # exceptions, 0 counted failures, 0 restarts, 0 alerts.
    clock = FakeClock()
    cfg = WatchdogConfig(
        probe_url="http://127.0.0.1:9", state_dir=str(tmp_path / "wd"), max_restarts=5
    )
    prober, actuator, poster = FakeProber(clock), FakeActuator(cfg.state_path), FakePoster(0)
    actuator.state_path = str(tmp_path / "missing.json")
    actuator.restart = lambda reason, evidence, keep_fds=(): actuator.restarts.append(
        (reason, evidence)
    )
    metrics = WatchdogMetrics()
    wd = Watchdog(
        cfg,
        prober,
        actuator,
        clock,
        FullDiskStore(cfg.state_path),
        FullDiskLog(cfg.events_path, clock),
        Alerter(webhook="http://127.0.0.1:9/hook", poster=poster),
        metrics=metrics,
    )
    wd.tick()
    prober.next = REFUSED
    for _ in range(10):
        wd.tick()
    assert len(actuator.restarts) == 1
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    reg = metrics.registry
    assert reg.get_sample_value("tpwarden_watchdog_write_errors_total", {"file": "events"}) > 10
    assert reg.get_sample_value("tpwarden_watchdog_write_errors_total", {"file": "state"}) > 3
    assert reg.get_sample_value("tpwarden_watchdog_restarts_total", {"cause": "probe_failures"})
    assert poster.calls == 2  # one alert per broken file, delivered although the disk is full
    wd.close()


def test_undelivered_alert_is_retried_with_backoff_until_delivered(tmp_path: Path) -> None:
    # Reproduction (6): an alert whose webhook failed was never retried.
    poster = FakePoster(fail_times=2)
    wd, prober, act = make(
        tmp_path,
        alert_webhook="http://127.0.0.1:9/hook",
        max_restarts=0,
        alerter=Alerter(webhook="http://127.0.0.1:9/hook", poster=poster),
    )
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()  # budget 0: hold + budget_exhausted alert (webhook down)
    for _ in range(4):
        wd.tick()  # 150 s per tick: retries after 30 s, 60 s
    sent = [e for e in read_events(wd.config.events_path).events if e["kind"] == "alert_sent"]
    assert [e["delivered"] for e in sent] == [False, False, True]
    assert sent[-1]["attempts"] == 3 and sent[0]["next_attempt_at"] is not None
    assert poster.calls == 3
    wd.close()


def test_ntp_step_during_boot_does_not_restart() -> None:
    # Reproduction (5): a +3 h NTP step during a healthy boot restarted it at once.
    wall, mono = [1_700_000_000.0], [50.0]
    clock = SteadyClock(lambda: wall[0], lambda: mono[0])
    wall[0] += 3 * 3600  # the step
    mono[0] += 10
    assert clock() == 1_700_000_010.0


def test_ntp_step_during_boot_daemon_level(tmp_path: Path) -> None:
    wall, mono = [1_700_000_000.0], [50.0]
    clock = SteadyClock(lambda: wall[0], lambda: mono[0])
    wd, prober, act = make(tmp_path, daemon_clock=clock)  # the prober's own clock: irrelevant
    prober.next = REFUSED
    wd.open()
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    wall[0] += 3 * 3600
    mono[0] += 60
    act.progress = BootReading("loading_weights", 1)
    wd.tick()
    assert act.restarts == [] and wd.state.phase is WatchdogPhase.BOOTING
    wd.close()


def test_cadence_runs_the_next_tick_at_once_after_an_overrun() -> None:
    # Reproduction (6): timeout = interval made probes run every 240 s instead of 120 s.
    now = [0.0]
    starts: list[float] = []

    def tick() -> None:
        starts.append(now[0])
        now[0] += 130.0  # probe timeout (120) + a /metrics read
        if len(starts) == 4:
            cadence.stop()

    cadence = Cadence(tick, 120.0, monotonic=lambda: now[0])
    cadence.run()
    assert starts == [0.0, 130.0, 260.0, 390.0]


def test_frozen_head_costs_one_bounded_wait_not_the_loop(tmp_path: Path) -> None:
    # Reproduction (2): boot_progress() inline on a frozen head stalled the tick.
    wd, prober, act = make(tmp_path)
    wd.cluster_call_timeout_s = 0.2
    prober.next = REFUSED

    def frozen() -> BootReading:
        time.sleep(5)
        return BootReading("loading_weights", 1)

    act.boot_progress = frozen  # type: ignore[method-assign]
    t0 = time.monotonic()
    wd.tick()
    wd.tick()
    assert time.monotonic() - t0 < 2.0
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    wd.close()


def test_cluster_boot_progress_failed_reaches_the_policy() -> None:
    from tpwarden.cluster.boot.phase import BootPhase
    from tpwarden.cluster.boot.progress import BootProgress
    from tpwarden.watchdog.actuator import boot_reading

    got = boot_reading(BootProgress(phase=BootPhase.FAILED, shards_loaded=3))
    assert got.failed and got.progress == 3


def _restart_with_slow_evidence(tmp_path: Path, evidence_s: float, bound_s: float):
    wd, prober, act = make(tmp_path)
    wd.cluster_call_timeout_s = 0.2  # a short probe interval's bound for boot progress

    def slow_evidence() -> dict[str, Any]:
        time.sleep(evidence_s)  # e.g. the /metrics read of a paused head: 5 s timeout
        return {"node1": ["last log line"]}

    act.collect_evidence = slow_evidence  # type: ignore[method-assign]
    wd.evidence_timeout_s = bound_s
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    wd.close()
    evs = read_events(wd.config.events_path).events
    (begin,) = [e for e in evs if e["kind"] == "restart_begin"]
    return begin, act


def test_evidence_gets_its_own_bound_not_the_tick_bound(tmp_path: Path) -> None:
    # Lab CI: interval 2 s gave a 1 s bound, the evidence's own 5 s /metrics read never fit,
    # and the restart recorded only a timeout in place of the last log lines.
    begin, act = _restart_with_slow_evidence(tmp_path, evidence_s=0.5, bound_s=3.0)
    assert begin["evidence"]["nodes"] == {"node1": ["last log line"]}
    assert len(act.restarts) == 1


def test_frozen_evidence_is_bounded_and_the_restart_still_happens(tmp_path: Path) -> None:
    t0 = time.monotonic()
    begin, act = _restart_with_slow_evidence(tmp_path, evidence_s=5.0, bound_s=0.3)
    assert time.monotonic() - t0 < 3.0
    assert "nodes" not in begin["evidence"] and "evidence" in begin["evidence"]["nodes_error"]
    assert len(act.restarts) == 1


def test_default_evidence_bound_holds_the_evidence_reads(tmp_path: Path) -> None:
    wd, _, _ = make(tmp_path, interval_s=2.0)
    assert wd.cluster_call_timeout_s == 1.0 and wd.evidence_timeout_s >= 15.0
