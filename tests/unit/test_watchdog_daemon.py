"""The watchdog daemon: tick() with fake prober/actuator/clock, real files, locks and hooks."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.cluster.hold import write_hold
from tpwarden.cluster.operator_lock import FileLock, WatchdogLocked, lock_holder
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import PlanChange, Watchdog
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.policy_state import PolicyState, WatchdogPhase
from tpwarden.watchdog.state import StateStore

OK = ProbeResult(Outcome.OK, 0.3)
REFUSED = ProbeResult(Outcome.REFUSED, 0.01, "connect failed")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeProber:
    def __init__(self, clock: FakeClock, step_s: float = 150) -> None:
        self.clock = clock
        self.step_s = step_s
        self.next: ProbeResult = OK

    def probe(self) -> ProbeResult:
        self.clock.now += self.step_s
        return self.next

    def scrape_metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot(self.clock.now, {"vllm:generation_tokens_total": 1.0})

    def close(self) -> None:
        pass


class FakeActuator:
    def __init__(self, state_path: str) -> None:
        self.state_path = state_path
        self.restarts: list[tuple[str, dict]] = []
        self.state_during_restart: dict | None = None
        self.fail = False
        self.progress: BootReading | None = None
        self.keep_fds: list[tuple[int, ...]] = []

    def restart(
        self, reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()
    ) -> None:
        self.state_during_restart = json.loads(Path(self.state_path).read_text())
        self.restarts.append((reason, evidence))
        self.keep_fds.append(keep_fds)
        if self.fail:
            raise RuntimeError("docker said no")

    def boot_progress(self) -> BootReading | None:
        return self.progress

    def collect_evidence(self) -> dict[str, Any]:
        return {"node1": ["last log line"]}

    def collect_dossier(self, reason: str) -> dict[str, Any] | None:
        return None  # takes no dossier

    def server_started_at(self) -> float | None:
        return None  # unknown: no fencing

    def close(self) -> None:
        pass


def make(
    tmp_path: Path,
    clock: FakeClock | None = None,
    *,
    prober: Any = None,
    actuator: Callable[[str], Any] = FakeActuator,
    daemon_clock: Callable[[], float] | None = None,
    event_log: Callable[[str, Callable[[], float]], EventLog] = EventLog,
    alerter: Alerter | None = None,
    follow: Callable[[], PlanChange | None] | None = None,
    **kw: Any,
) -> tuple[Watchdog, Any, Any]:
    """A daemon on fakes; each collaborator can be handed in instead (`actuator` and
    `event_log` are built from the state and events paths). `clock` drives the fake prober and
    the event log; `daemon_clock` (default: `clock`) is the daemon's own."""
    clock = clock or FakeClock()
    metrics = kw.pop("metrics", None)
    cfg = WatchdogConfig(
        probe_url="http://127.0.0.1:9", state_dir=str(tmp_path / "wd"), boot_deadline_s=1800, **kw
    )
    prober = prober if prober is not None else FakeProber(clock)
    act = actuator(cfg.state_path)
    wd = Watchdog(
        cfg,
        prober,
        act,
        daemon_clock or clock,
        StateStore(cfg.state_path),
        event_log(cfg.events_path, clock),
        alerter or Alerter(cfg.alert_command, cfg.alert_webhook),
        metrics=metrics,
        follow=follow,
    )
    return wd, prober, act


def kinds(cfg: WatchdogConfig) -> list[str]:
    return [e["kind"] for e in read_events(cfg.events_path).events]


def test_constructor_starts_nothing(tmp_path: Path) -> None:
    wd, _, _ = make(tmp_path)
    assert not (tmp_path / "wd").exists()


def test_three_failures_restart_once_with_state_persisted_first(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    wd.tick()
    assert wd.state is not None and wd.state.phase is WatchdogPhase.READY
    prober.next = REFUSED
    for _ in range(4):
        wd.tick()
    assert len(act.restarts) == 1
    reason, evidence = act.restarts[0]
    assert "3 consecutive" in reason and evidence["nodes"] == {"node1": ["last log line"]}
    assert act.state_during_restart is not None
    assert act.state_during_restart["policy"]["restart_in_progress"]  # saved BEFORE the actuator
    saved = StateStore(wd.config.state_path).load()
    assert (
        saved is not None
        and saved.phase is WatchdogPhase.BOOTING
        and saved.restart_in_progress is None
    )
    ks = kinds(wd.config)
    assert ks.index("restart_begin") < ks.index("restart_end")
    begin = next(
        e for e in read_events(wd.config.events_path).events if e["kind"] == "restart_begin"
    )
    assert begin["evidence"]["failures"] and begin["cause"] == "probe_failures"
    wd.close()


def test_state_survives_a_new_instance(tmp_path: Path) -> None:
    clock = FakeClock()
    wd, prober, act = make(tmp_path, clock, max_restarts=1)
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert len(act.restarts) == 1
    wd.close()
    wd2, prober2, act2 = make(tmp_path, clock, max_restarts=1)
    wd2.open()
    assert (
        wd2.state is not None and wd2.state.restart_seq == 1 and len(wd2.state.restart_times) == 1
    )
    prober2.next = REFUSED
    for _ in range(20):  # boot deadline passes: restart wanted, but the persisted budget is used
        wd2.tick()
    assert act2.restarts == [] and wd2.state.phase is WatchdogPhase.HELD
    wd2.close()


def test_kill_9_mid_restart_is_not_restarted_again(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    StateStore(wd.config.state_path).save(
        PolicyState(
            phase=WatchdogPhase.RESTARTING,
            restart_in_progress="r1-123",
            restart_seq=1,
            restart_times=(1.0,),
        )
    )
    prober.next = REFUSED
    wd.tick()
    assert act.restarts == []
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    assert wd.state.restart_in_progress is None
    ev = [
        e for e in read_events(wd.config.events_path).events if e["kind"] == "restart_interrupted"
    ]
    assert ev and ev[0]["restart_id"] == "r1-123"
    wd.close()


def test_second_daemon_on_same_state_dir_refuses(tmp_path: Path) -> None:
    wd, _, _ = make(tmp_path)
    wd.open()
    wd2, _, _ = make(tmp_path)
    with pytest.raises(WatchdogLocked):
        wd2.open()
    wd.close()
    wd2.open()  # free once the first one is gone
    wd2.close()


def test_cluster_restart_lock_held_elsewhere_skips_restart(tmp_path: Path) -> None:
    lock_path = str(tmp_path / "cluster-restart.lock")
    other = FileLock(lock_path)
    other.acquire("other watchdog")
    wd, prober, act = make(tmp_path, restart_lock_path=lock_path)
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert act.restarts == [] and "restart_skipped" in kinds(wd.config)
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    # The other watchdog's restart stops and starts the containers: while it holds the lock,
    # what looks like a failed boot is its restart, never a reason for a second one (CI39d).
    act.progress = BootReading("exited", failed=True)
    for _ in range(3):
        wd.tick()
    assert act.restarts == [] and wd.state.phase is WatchdogPhase.BOOTING
    other.release()  # its restart is over: a boot that failed now is a failed boot
    wd.tick()
    assert len(act.restarts) == 1
    wd.close()


def test_the_restart_job_is_handed_the_cluster_restart_lock(tmp_path: Path) -> None:
    """The restart is applied with the lock's descriptor handed on (a job in another process
    keeps it open, so the lock outlives a daemon killed mid-restart: CI of stop 56)."""
    lock_path = str(tmp_path / "cluster-restart.lock")
    wd, prober, act = make(tmp_path, restart_lock_path=lock_path)
    held: list[str | None] = []
    real = act.restart

    def restart(reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()) -> None:
        held.append(lock_holder(lock_path))
        os.fstat(keep_fds[0])  # an open descriptor, and the lock's own
        assert os.path.samefile(f"/proc/self/fd/{keep_fds[0]}", lock_path)
        real(reason, evidence, keep_fds)

    act.restart = restart
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert len(act.restarts) == 1 and len(act.keep_fds[0]) == 1
    assert held[0] is not None and "restart_id=" in held[0]
    assert lock_holder(lock_path) is None  # released once the restart returned
    wd.close()


def test_restart_failure_is_recorded_and_alerted(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    act.fail = True
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    end = [e for e in read_events(wd.config.events_path).events if e["kind"] == "restart_end"]
    assert end[0]["ok"] is False and "docker said no" in end[0]["error"]
    alerts = [e for e in read_events(wd.config.events_path).events if e["kind"] == "alert_sent"]
    assert [a["category"] for a in alerts] == ["restart_failed"]
    wd.close()


def test_alert_command_fires_once_per_incident(tmp_path: Path) -> None:
    out = tmp_path / "alerts.txt"
    cmd = (
        sys.executable,
        "-c",
        f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')",
    )
    wd, prober, act = make(tmp_path, alert_command=cmd, max_restarts=5)
    prober.next = REFUSED
    for _ in range(40):  # boot fails, restart, boot fails again -> give up; then keep failing
        wd.tick()
    assert (
        len(act.restarts) == 1 and wd.state is not None and wd.state.phase is WatchdogPhase.GIVEN_UP
    )
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    incident = json.loads(lines[0])
    assert incident["category"] == "gave_up" and incident["incident_id"].startswith("inc-")
    wd.close()


def test_operator_hold_file_suppresses_restart(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    wd.tick()
    write_hold(
        wd.config.hold_path, until=wd._clock() + 3600, reason="rollout", by="me", now=wd._clock()
    )
    prober.next = REFUSED
    for _ in range(5):
        wd.tick()
    assert act.restarts == [] and "hold" in [
        e.get("decision") for e in read_events(wd.config.events_path).events
    ]
    wd.close()


def test_boot_progress_is_read_during_boot(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    prober.next = REFUSED
    for shard in range(1, 20):
        act.progress = BootReading("loading_weights", shard)
        wd.tick()
    assert act.restarts == []  # 19 x 150 s > 1800 s deadline, but progress extended it
    wd.close()


def test_events_one_json_per_line_and_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(str(path), lambda: 1.0)
    log.append("a", x=1)
    log.append("b", text="line\nbreak")
    log.close()
    with open(path, "ab") as fh:
        fh.write(b'{"ts": 2, "kind": "tor')  # killed mid-write
    log = EventLog(str(path), lambda: 3.0)
    log.append("c")
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    got = read_events(str(path))
    assert [e["kind"] for e in got.events] == ["a", "b", "c"] and got.skipped_lines == 1


def test_metrics_endpoint_and_scheduler(tmp_path: Path) -> None:
    metrics = WatchdogMetrics()
    wd, prober, act = make(tmp_path, metrics=metrics, interval_s=0.05, metrics_port=0)
    prober.step_s = 0
    wd.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if kinds(wd.config).count("probe") >= 2:
                break
            time.sleep(0.02)
        assert kinds(wd.config).count("probe") >= 2
        port = metrics._server.server_port
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        wd.stop()
    assert 'tpwarden_watchdog_probe_total{outcome="ok"}' in text
    assert "tpwarden_watchdog_probe_latency_seconds_bucket" in text
    assert 'tpwarden_watchdog_state{tpwarden_watchdog_state="ready"} 1.0' in text
    assert "tpwarden_watchdog_consecutive_failures 0.0" in text
    assert "daemon_stop" in kinds(wd.config)
