"""The watchdog's ledger jobs: a record once per restart of its own when the server is healthy
again (not for restarts before this daemon), canaries one at a time with their event and the
ledger gauges, the quiet-hour and after-change jobs scheduled, and the watchdog's tick judging
a canary's load as the canary's while the lease holds."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import generate_latest
from tpwarden.cluster.canary_lease import lease_document, lease_path, write_lease
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.ledger_jobs import CanarySchedule, LedgerJobs
from tpwarden.watchdog.policy_state import WatchdogPhase

from .test_watchdog_daemon import FakeClock, FakeProber, make


class FakeActions:
    def __init__(self) -> None:
        self.records: list[str] = []
        self.canaries: list[str] = []
        self.due = False
        self.gate = threading.Event()
        self.gate.set()

    def record(self, reason: str) -> JSONObject:
        self.records.append(reason)
        return {"id": len(self.records), "cfg": "cfg:1", "changed": True}

    def canary(self, trigger: str) -> JSONObject:
        self.gate.wait(5)
        self.canaries.append(trigger)
        return {"status": "ok", "canary_id": len(self.canaries)}

    def canary_due(self) -> bool:
        return self.due

    def slowdowns(self) -> list[JSONObject]:
        return [{"level": 1, "ratio": 0.61, "confirmed": True}, {"level": 4, "ratio": 0.98}]


def test_a_record_once_per_restart_and_canaries_one_at_a_time() -> None:
    actions, metrics, posted = FakeActions(), WatchdogMetrics(), []
    jobs = LedgerJobs(actions, CanarySchedule(), metrics)
    jobs.start(lambda event, fields: posted.append((event, fields)))
    jobs.recorded_seq = 3  # restarts before this daemon are not recorded again
    jobs.healthy(3, "after r3", wait=True)
    jobs.healthy(4, "after r4", wait=True)
    jobs.healthy(4, "after r4 again", wait=True)
    assert actions.records == ["after r4"]
    assert posted[0][0] == "ledger_record" and posted[0][1]["cfg"] == "cfg:1"
    actions.gate.clear()
    first = threading.Thread(target=jobs.fire, args=("schedule",))
    first.start()
    while not jobs._one.locked():
        pass
    assert jobs.fire("change") is None  # one canary at a time
    actions.gate.set()
    first.join()
    assert actions.canaries == ["schedule"]
    assert ("canary", {"status": "ok", "canary_id": 1}) in posted
    page = generate_latest(metrics.registry).decode()
    assert 'tpwarden_ledger_slowdown{level="1"} 1.0' in page
    assert 'tpwarden_ledger_slowdown{level="4"} 0.0' in page
    assert 'tpwarden_ledger_canary_ratio{level="1"} 0.61' in page
    assert 'tpwarden_ledger_canary_last_timestamp_seconds{status="ok"}' in page
    actions.due = True
    jobs.fire_if_due()
    assert actions.canaries == ["schedule", "change"]
    jobs.shutdown()


def test_the_quiet_hours_and_the_after_change_check_are_scheduled() -> None:
    scheduler = BackgroundScheduler(daemon=True)
    jobs = LedgerJobs(FakeActions(), CanarySchedule(("03:30", "04:45"), "Asia/Seoul", True),
                      scheduler=scheduler)  # fmt: skip
    jobs.start(lambda e, f: None)
    try:
        ids = sorted(j.id for j in scheduler.get_jobs())
        assert ids == ["canary-03:30", "canary-04:45", "canary-after-change"]
        at = scheduler.get_job("canary-03:30").next_run_time
        assert (at.hour, at.minute, str(at.tzinfo)) == (3, 30, "Asia/Seoul")
    finally:
        jobs.shutdown()


def test_the_daemon_records_once_the_server_is_healthy_after_its_restart(tmp_path: Path) -> None:
    actions = FakeActions()
    jobs = LedgerJobs(actions, CanarySchedule())
    wd, prober, act = make(tmp_path)
    wd._ledger = jobs  # noqa: SLF001 - the production wiring builds it from the actuator
    jobs.start(wd._post_ledger)  # noqa: SLF001
    wd.tick()
    assert actions.records == []  # the daemon's first healthy probe: no restart of its own
    prober.next = ProbeResult(Outcome.REFUSED, 0.01, "connect failed")
    for _ in range(4):
        wd.tick()
    assert len(act.restarts) == 1 and wd.state is not None
    assert wd.state.phase is WatchdogPhase.BOOTING
    prober.next = ProbeResult(Outcome.OK, 0.4)
    wd.tick()
    for t in threading.enumerate():
        if t is not threading.current_thread() and t.daemon and t.name.startswith("Thread"):
            t.join(timeout=5)
    assert actions.records == [f"healthy after restart r{wd.state.restart_seq}"]
    kinds = [e["kind"] for e in read_events(wd.config.events_path).events]
    assert "ledger_record" in kinds
    wd.close()


class BusyProber(FakeProber):
    """Probes time out while the engine's counters advance: busy, not dead."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.next = ProbeResult(Outcome.TIMEOUT, 120.0, "no answer")
        self.tokens = 0.0

    def scrape_metrics(self) -> MetricsSnapshot:
        self.tokens += 100
        return MetricsSnapshot(self.clock.now, {"vllm:generation_tokens_total": self.tokens,
                                                "vllm:num_requests_running": 4.0})  # fmt: skip


def test_the_tick_reads_the_canary_lease(tmp_path: Path) -> None:
    clock = FakeClock()
    prober = BusyProber(clock)
    prober.next = ProbeResult(Outcome.OK, 0.4)
    wd, _, _ = make(tmp_path, clock, prober=prober, busy_alert_s=600)
    wd.tick()
    assert wd.state is not None and wd.state.phase is WatchdogPhase.READY
    prober.next = ProbeResult(Outcome.TIMEOUT, 120.0, "no answer")
    Path(wd.config.state_dir).mkdir(parents=True, exist_ok=True)
    import time

    write_lease(lease_path(wd.config.state_dir),
                lease_document(run_id="c9", levels=(1, 4), until=time.time() + 600, by="t",
                               now=time.time()))  # fmt: skip
    for _ in range(10):
        wd.tick()
    events: list[dict[str, Any]] = read_events(wd.config.events_path).events
    assert not [e for e in events if e.get("category") == "busy_ceiling"]
    assert any("canary c9" in str(e.get("reason", "")) for e in events)
    wd.close()


def test_a_canary_is_due_after_a_new_record_and_a_deferred_one_waits(tmp_path: Path) -> None:
    from tpwarden.cluster.inventory.load import load_inventory
    from tpwarden.cluster.ledger.record import ledger_file
    from tpwarden.cluster.ledger.store import Ledger
    from tpwarden.cluster.ledger.tables import KeyValue, NewCanary, NewRecord
    from tpwarden.watchdog.ledger_jobs import RETRY_S, ControllerLedger

    spec = load_inventory(Path(__file__).resolve().parents[2] / "inventory.example.yml")
    ctl = type("Ctl", (), {"spec": spec, "state_dir": tmp_path})()
    actions = ControllerLedger(ctl, str(tmp_path / "wd"))  # type: ignore[arg-type]
    assert not actions.canary_due(1000.0)  # no ledger yet
    with Ledger.open(ledger_file(spec, tmp_path)) as led:
        led.add_record(NewRecord(ts=1000.0, cluster=spec.name, cfg="cfg:1", spec_hash=None,
                                 action="up", reason="t", who=None, run_dir=None,
                                 rows=(KeyValue("*", "k", "v"),)))  # fmt: skip
        assert actions.canary_due(1001.0)

        def canary(status: str, at: float) -> None:
            led.add_canary(NewCanary(record_id=1, cluster=spec.name, cfg="cfg:1",
                                     definition="d", started=at, finished=at, status=status,
                                     reason=None, trigger="change", server_s=0.0, run_dir=None,
                                     doc={}))  # fmt: skip

        canary("deferred", 1100.0)
        assert not actions.canary_due(1200.0)  # tried a moment ago: users were there
        assert actions.canary_due(1100.0 + RETRY_S)
        canary("ok", 1100.0 + RETRY_S)
        assert not actions.canary_due(9e9)  # measured: nothing due until the next record
