"""The morning report's daily delivery (issue 31 item 6): the cron math across zones and DST,
the scheduler's life cycle, the payload built from what the watchdog's host has, and one real
delivery: APScheduler fires the job, the daemon queues it, the webhook on 127.0.0.1 gets it."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.report_settings import ReportSpec
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.config import ReportConfig, WatchdogConfig, config_changes
from tpwarden.watchdog.daemon import PlanChange, Watchdog
from tpwarden.watchdog.daily import JOB_ID, DailyReport, daily_trigger
from tpwarden.watchdog.morning_delivery import morning_payload
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.state import StateStore
from tpwarden.watchdog.wiring import build_config

ROOT = Path(__file__).resolve().parents[2]
NODES = ("node1", "node2", "node3", "node4")


def fires(report: ReportConfig, start: datetime, n: int) -> list[datetime]:
    """The fire times as the scheduler asks for them: each from the previous one, `now` just
    after it (Job._get_run_times / BaseScheduler._process_jobs)."""
    trigger, prev, now, out = daily_trigger(report), None, start, []
    for _ in range(n):
        nxt = trigger.get_next_fire_time(prev, now)
        assert nxt is not None
        out.append(nxt)
        prev, now = nxt, nxt + timedelta(milliseconds=10)
    return out


def utc(times: list[datetime]) -> list[str]:
    return [t.astimezone(UTC).strftime("%m-%d %H:%M") for t in times]


def test_seoul_0730_is_2230_utc_the_day_before() -> None:
    got = fires(
        ReportConfig(deliver_at="07:30", tz="Asia/Seoul"), datetime(2026, 12, 4, tzinfo=UTC), 3
    )
    assert utc(got) == ["12-04 22:30", "12-05 22:30", "12-06 22:30"]
    assert all(t.astimezone(ZoneInfo("Asia/Seoul")).strftime("%H:%M") == "07:30" for t in got)


def test_berlin_keeps_its_local_time_across_the_spring_change() -> None:
    # DST starts in Europe on 2026-03-29: 07:30 CET is 06:30 UTC, 07:30 CEST is 05:30 UTC
    got = fires(
        ReportConfig(deliver_at="07:30", tz="Europe/Berlin"),
        datetime(2026, 3, 27, 12, tzinfo=UTC),
        4,
    )
    assert utc(got) == ["03-28 06:30", "03-29 05:30", "03-30 05:30", "03-31 05:30"]


def test_fall_back_repeated_time_is_delivered_once_and_the_next_day_comes() -> None:
    # New York falls back on 2026-11-01: 01:30 happens at 05:30 and again at 06:30 UTC. Bare
    # CronTrigger 3.11.3 fires at both and then answers 06:30 forever (the scheduler's run-time
    # loop would spin); the daily trigger fires once per local date and moves on.
    got = fires(
        ReportConfig(deliver_at="01:30", tz="America/New_York"),
        datetime(2026, 10, 30, 12, tzinfo=UTC),
        4,
    )
    assert utc(got) == ["10-31 05:30", "11-01 05:30", "11-02 06:30", "11-03 06:30"]
    assert all(b > a for a, b in zip(got, got[1:], strict=False))


def test_spring_forward_missing_time_is_still_delivered_that_day() -> None:
    # 02:30 does not exist in New York on 2026-03-08; the delivery is not skipped: it goes out at
    # 07:30 UTC (03:30 EDT), the instant 02:30 EST would have been
    got = fires(
        ReportConfig(deliver_at="02:30", tz="America/New_York"),
        datetime(2026, 3, 7, 12, tzinfo=UTC),
        3,
    )
    assert utc(got) == ["03-08 07:30", "03-09 06:30", "03-10 06:30"]


def test_nothing_scheduled_without_a_report_and_apply_follows_the_plan() -> None:
    sched = BackgroundScheduler(daemon=True)
    daily = DailyReport(lambda r, now: {}, scheduler=sched)
    daily.apply(ReportConfig(deliver_at="07:30"))  # before start: nothing happens
    assert not sched.running and sched.get_job(JOB_ID) is None
    daily.start(None, lambda payload: None)
    assert not sched.running and daily.next_fire() is None  # off: no thread at all
    try:
        daily.apply(ReportConfig(deliver_at="07:30", tz="Asia/Seoul"))
        assert sched.running
        first = daily.next_fire()
        assert (
            first is not None
            and first.astimezone(ZoneInfo("Asia/Seoul")).strftime("%H:%M") == "07:30"
        )
        daily.apply(ReportConfig(deliver_at="06:00", tz="Asia/Seoul"))  # a new plan moved it
        moved = daily.next_fire()
        assert (
            moved is not None
            and moved.astimezone(ZoneInfo("Asia/Seoul")).strftime("%H:%M") == "06:00"
        )
        daily.apply(None)
        assert sched.get_job(JOB_ID) is None
    finally:
        daily.shutdown()
    assert not sched.running


def test_a_report_that_cannot_be_built_is_delivered_as_a_notice() -> None:
    posted: list[dict[str, Any]] = []

    def broken(report: ReportConfig, now: float) -> dict[str, Any]:
        raise OSError("disk on fire")

    daily = DailyReport(broken, scheduler=BackgroundScheduler(daemon=True), wall=lambda: 1e9)
    daily.start(ReportConfig(deliver_at="07:30"), posted.append)
    try:
        daily.fire()
    finally:
        daily.shutdown()
    assert posted[0]["category"] == "morning_report"
    assert "OSError: disk on fire" in posted[0]["message"]


# --- the payload and a real delivery --------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Prober:
    def __init__(self, clock: Clock, step_s: float) -> None:
        self.clock, self.step_s = clock, step_s

    def probe(self) -> ProbeResult:
        self.clock.now += self.step_s
        return ProbeResult(Outcome.OK, 0.3)

    def scrape_metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot(self.clock.now, {"vllm:generation_tokens_total": 1.0})

    def close(self) -> None:
        pass


class Actuator:
    def restart(
        self, reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()
    ) -> None:
        raise AssertionError("no restart in these tests")

    def boot_progress(self) -> BootReading | None:
        return None

    def collect_evidence(self) -> dict[str, Any]:
        return {}

    def collect_dossier(self, reason: str) -> dict[str, Any] | None:
        return None  # takes no dossier

    def server_started_at(self) -> float | None:
        return None  # unknown: no fencing

    def close(self) -> None:
        pass


class Receiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.status = 200
        self.got = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(receiver.status)
                self.end_headers()
                if receiver.status < 400:
                    receiver.bodies.append(json.loads(body))
                    receiver.got.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def night(
    tmp_path: Path,
    clock: Clock,
    webhook: str | None = None,
    follow: Callable[[], PlanChange | None] | None = None,
    **kw: Any,
) -> tuple[Watchdog, DailyReport, BackgroundScheduler]:
    report = ReportConfig(deliver_at="07:30", tz="Asia/Seoul", window_h=1.0,
                          thermal_dir=str(tmp_path / "thermal"), nodes=NODES)  # fmt: skip
    cfg = WatchdogConfig(probe_url="http://127.0.0.1:9", state_dir=str(tmp_path / "wd"),
                         interval_s=60, alert_webhook=webhook, report=report, **kw)  # fmt: skip
    sched = BackgroundScheduler(daemon=True)
    daily = DailyReport(lambda r, now: morning_payload(r, cfg.events_path, now), sched, clock)
    wd = Watchdog(
        cfg, Prober(clock, 60), Actuator(), clock, StateStore(cfg.state_path),
        EventLog(cfg.events_path, clock), Alerter(None, webhook), daily=daily, follow=follow,
    )  # fmt: skip
    return wd, daily, sched


def test_payload_names_window_headline_and_what_the_host_lacks(tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 12, 4, 6, 0, tzinfo=ZoneInfo("Asia/Seoul")).timestamp())
    wd, _, _ = night(tmp_path, clock)
    for _ in range(10):  # ten probes, a minute apart, all answered
        wd.tick()
    wd.close()
    assert wd.config.report is not None
    doc = morning_payload(wd.config.report, wd.config.events_path, clock.now)
    assert doc["category"] == "morning_report"
    assert doc["incident_id"] == "morning-report-2026-12-04"
    assert doc["window"]["until"] - doc["window"]["since"] == 3600.0
    assert doc["window"]["until_local"].startswith("2026-12-04T06:10")
    assert doc["headline"].endswith("answering 100% of 10 probes")
    assert doc["message"].startswith("Night report, ") and doc["headline"] in doc["message"]
    assert "node1, node2, node3, node4" in doc["missing"]["thermal"]  # no thermal files here
    assert "watchdog" not in doc["missing"]
    assert doc["report"]["watchdog"]["probes"] == 10
    everything = read_events(wd.config.events_path).events
    recent = read_events(wd.config.events_path, since=clock.now - 150).events
    assert len(everything) > len(recent) and {e["kind"] for e in recent} >= {"probe"}
    assert all(e["ts"] >= clock.now - 150 for e in recent)
    gone = morning_payload(wd.config.report, str(tmp_path / "elsewhere.jsonl"), clock.now)
    assert gone["missing"]["watchdog"].startswith("no event log at ")
    assert gone["message"].endswith("missing: watchdog, thermal")


def test_the_scheduler_fires_and_the_webhook_gets_the_report(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = Clock(time.time())
    wd, daily, sched = night(tmp_path, clock, webhook=receiver.url)
    wd.start()  # one probe now; the next one is a minute away
    try:
        assert sched.running and daily.next_fire() is not None
        # the scaled wait: the 07:30 job is brought to 0.3 s from now, the rest is APScheduler's
        daily.bring_forward(datetime.now(UTC) + timedelta(seconds=0.3))
        assert receiver.got.wait(10), "no report arrived"
    finally:
        wd.stop()
    body = receiver.bodies[0]
    assert body["category"] == "morning_report" and body["window"]["tz"] == "Asia/Seoul"
    assert body["headline"] in body["message"]
    events = read_events(wd.config.events_path).events
    sent = [e for e in events if e["kind"] == "alert_sent" and e["category"] == "morning_report"]
    assert sent and sent[0]["delivered"] is True
    assert any(e["kind"] == "morning_report" for e in events)


def test_an_undelivered_report_is_retried_like_an_alert(tmp_path: Path, receiver: Receiver) -> None:
    receiver.status = 500
    clock = Clock(time.time())
    wd, daily, _ = night(tmp_path, clock, webhook=receiver.url, alert_retry_max_s=60)
    wd.start()
    try:
        daily.fire()  # as the scheduler's job does, on this thread
        outbox = json.loads((Path(wd.config.state_dir) / "outbox.json").read_text())
        assert [p["incident"]["category"] for p in outbox["pending"]] == ["morning_report"]
        receiver.status = 200
        clock.now += 31  # the first retry is due 30 s later; the next tick sends it
        wd.tick()
    finally:
        wd.stop()
    assert receiver.bodies and receiver.bodies[0]["category"] == "morning_report"
    sent = [e for e in read_events(wd.config.events_path).events if e["kind"] == "alert_sent"]
    assert [(e["delivered"], e["attempts"]) for e in sent] == [(False, 1), (True, 2)]


def test_settings_reach_the_watchdog_config(tmp_path: Path) -> None:
    spec = load_inventory(ROOT / "inventory.example.yml")
    env = {"TPWARDEN_API_KEY": "k"}
    assert build_config(spec, str(tmp_path), environ=env).report is None  # off by default
    report = ReportSpec(deliver_at="07:30", tz="Asia/Seoul", window_h=10)
    cfg = build_config(dataclasses.replace(spec, report=report), str(tmp_path), environ=env)
    assert cfg.report == ReportConfig(
        deliver_at="07:30", tz="Asia/Seoul", window_h=10, thermal_dir=spec.thermal.dir,
        nodes=tuple(n.name for n in spec.nodes), ledger=str(ledger_file(spec)),
    )  # fmt: skip
    moved = dataclasses.replace(cfg, report=dataclasses.replace(cfg.report, deliver_at="06:00"))
    change = config_changes(cfg, moved)["report"]
    assert [c["deliver_at"] for c in change] == ["07:30", "06:00"]


def test_a_followed_plan_moves_the_delivery(tmp_path: Path) -> None:
    clock = Clock(time.time())
    changes: list[PlanChange] = []
    wd, daily, sched = night(tmp_path, clock, follow=lambda: changes.pop() if changes else None)
    assert wd.config.report is not None
    later = dataclasses.replace(
        wd.config, report=dataclasses.replace(wd.config.report, deliver_at="06:00")
    )
    wd.start()
    try:
        before = daily.next_fire()
        changes.append(PlanChange(later, Prober(clock, 60), Actuator(), {}))
        wd.tick()
        after = daily.next_fire()
    finally:
        wd.stop()
    zone = ZoneInfo("Asia/Seoul")
    assert before is not None and before.astimezone(zone).strftime("%H:%M") == "07:30"
    assert after is not None and after.astimezone(zone).strftime("%H:%M") == "06:00"
    assert not sched.running  # stopped with the daemon


class BrokenScheduler(BackgroundScheduler):
    def start(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no thread for you")


def test_a_scheduler_that_cannot_start_never_keeps_the_watchdog_down(tmp_path: Path) -> None:
    clock = Clock(time.time())
    report = ReportConfig(deliver_at="07:30")
    cfg = WatchdogConfig(probe_url="http://127.0.0.1:9", state_dir=str(tmp_path / "wd"),
                         interval_s=60, report=report)  # fmt: skip
    daily = DailyReport(lambda r, now: {}, BrokenScheduler(daemon=True), clock)
    wd = Watchdog(cfg, Prober(clock, 60), Actuator(), clock, StateStore(cfg.state_path),
                  EventLog(cfg.events_path, clock), Alerter(None, None), daily=daily)  # fmt: skip
    wd.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            e["kind"] == "probe" for e in read_events(cfg.events_path).events
        ):
            time.sleep(0.02)
    finally:
        wd.stop()
    evs = read_events(cfg.events_path).events
    assert any(e["kind"] == "probe" for e in evs)  # it watches all the same
    errors = [e for e in evs if e["kind"] == "tick_error"]
    assert errors and errors[0]["seam"] == "report" and "no thread for you" in errors[0]["error"]
