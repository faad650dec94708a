"""Issue 29's reproductions: each failed before (a dead end, a crash loop, a trusted file, two
clocks), each now ends in a restart result or an alert. Driven with the daemon's own fakes."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.cluster.hold import read_hold, write_hold
from tpwarden.cluster.operator_lock import FileLock
from tpwarden.watchdog.alert import Alerter, Outbox
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import PolicyState, Restart, WatchdogPhase
from tpwarden.watchdog.runtime import RestartJobOverdue, SteadyClock
from tpwarden.watchdog.state import StateStore

from .test_watchdog_daemon import REFUSED, FakeClock, make
from .test_watchdog_policy import policy_config


def events(wd: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(wd.config.events_path).events if e["kind"] == kind]


BAD_URL = "http://127.0.0.1:9/ho\x00ok"  # httpx.InvalidURL (no HTTPError), before any traffic


def test_the_bad_url_raises_invalid_url_not_http_error() -> None:
    with pytest.raises(httpx.InvalidURL):
        httpx.post(BAD_URL, content=b"{}", timeout=1)


def test_invalid_webhook_url_with_an_expiring_hold_still_restarts(tmp_path: Path) -> None:
    # Reproduction: alert_webhook not a URL, a hold expiring while the server fails:
    # 0 restarts, phase `restarting`, 36 tick errors.
    metrics = WatchdogMetrics()
    wd, prober, act = make(tmp_path, alert_webhook=BAD_URL, metrics=metrics)
    wd.tick()
    write_hold(wd.config.hold_path, until=wd._clock() + 200, reason="m", by="me", now=wd._clock())
    prober.next = REFUSED
    for _ in range(6):
        wd.tick()
    assert len(act.restarts) == 1
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    sent = events(wd, "alert_sent")
    assert sent and sent[0]["category"] == "hold_expired" and not sent[0]["delivered"]
    assert "InvalidURL" in sent[0]["problems"][0]
    wd.close()


def test_oserror_creating_the_restart_lock_is_a_failed_restart_not_silence(
    tmp_path: Path,
) -> None:
    # Reproduction: any OSError creating the restart lock (only WatchdogLocked was caught):
    # 0 restarts, phase `restarting` for good, no alert.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the lock's directory should be")
    metrics = WatchdogMetrics()
    wd, prober, act = make(
        tmp_path, restart_lock_path=str(blocker / "restart.lock"), metrics=metrics
    )
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING
    (end,) = events(wd, "restart_end")
    assert end["ok"] is False and "Error" in end["error"]
    assert [a["category"] for a in events(wd, "alert_sent")] == ["restart_failed"]
    assert metrics.registry.get_sample_value(
        "tpwarden_watchdog_tick_errors_total", {"seam": "restart"}
    )
    wd.close()


def test_outbox_item_without_next_at_is_dropped_with_an_event(tmp_path: Path) -> None:
    # Reproduction: an outbox item written without next_at: KeyError in flush on every tick.
    wd, prober, _ = make(tmp_path)
    os.makedirs(wd.config.state_dir, exist_ok=True)
    good = {"incident": {"category": "x"}, "attempts": 1, "next_at": 0.0, "problems": []}
    bad = {"incident": {"category": "y"}, "attempts": 0}
    Path(wd.config.state_dir, "outbox.json").write_text(json.dumps({"pending": [bad, good]}))
    for _ in range(3):
        wd.tick()
    assert events(wd, "tick_error") == []
    (dropped,) = events(wd, "alert_dropped")
    assert "next_at" in dropped["error"]
    assert [e["category"] for e in events(wd, "alert_sent")] == ["x"]
    wd.close()


def test_outbox_flush_drops_a_malformed_item_in_memory() -> None:
    box = Outbox(Alerter())
    box.pending = [{"incident": {}, "attempts": 0}]
    (report,) = box.flush(0.0)
    assert report["dropped"] and box.pending == []


def test_tick_errors_are_counted_on_metrics(tmp_path: Path) -> None:
    metrics = WatchdogMetrics()
    wd, prober, _ = make(tmp_path, metrics=metrics)

    def broken() -> Any:
        raise RuntimeError("prober bug")

    prober.probe = broken  # type: ignore[method-assign]
    wd._safe_tick()
    wd._safe_tick()
    got = metrics.registry.get_sample_value("tpwarden_watchdog_tick_errors_total", {"seam": "tick"})
    assert got == 2
    wd.close()


def test_restarting_past_its_deadline_is_a_failed_restart() -> None:
    policy = Policy(policy_config(restart_deadline_s=100))
    s = PolicyState(
        phase=WatchdogPhase.RESTARTING, restart_in_progress="r1-0", restart_started_at=1000.0
    )
    from tpwarden.watchdog.observation import Observation

    obs = Observation(REFUSED, None, None, None, None)
    still, d = policy.decide(s, obs, 1050.0)
    assert still.phase is WatchdogPhase.RESTARTING
    after, d = policy.decide(s, obs, 1101.0)
    assert after.phase is WatchdogPhase.BOOTING and after.restart_in_progress is None
    assert any(getattr(x, "category", "") == "restart_failed" for x in d)


@pytest.mark.parametrize(
    "doc",
    [
        {"version": 1, "policy": {"phase": "ready", "consecutive_failures": "3"}},
        {"version": 1, "policy": {"phase": "sideways"}},
        {"version": 1, "policy": {"restart_times": ["x"]}},
        {"version": 1, "policy": []},
    ],
    ids=["string-count", "unknown-phase", "bad-restart-times", "policy-not-object"],
)
def test_state_json_with_wrong_types_is_moved_aside_and_alerted(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    # Reproduction: `"consecutive_failures": "3"` loaded, then every tick raised.
    wd, prober, _ = make(tmp_path)
    os.makedirs(wd.config.state_dir)
    Path(wd.config.state_path).write_text(json.dumps(doc))
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert events(wd, "tick_error") == []
    (bad,) = events(wd, "file_invalid")
    assert bad["file"] == "state" and ".invalid-" in bad["moved_to"]
    assert Path(bad["moved_to"]).exists()
    assert [e["category"] for e in events(wd, "alert_sent")] == ["state_invalid"]
    assert wd.state is not None and wd.state.phase is WatchdogPhase.BOOTING  # safe: boot grace
    wd.close()


def test_truncated_state_json_is_moved_aside(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state.json"))
    (tmp_path / "state.json").write_text('{"version": 1, "policy": {"phase": "rea')
    assert store.load() is None
    (aside, error) = store.quarantined[0]
    assert aside and Path(aside).exists() and not (tmp_path / "state.json").exists()


@pytest.mark.parametrize("until", ["Infinity", "NaN", '"tomorrow"'])
def test_hold_until_infinity_is_invalid_not_forever(tmp_path: Path, until: str) -> None:
    # Reproduction: hold.json with `until: Infinity` held forever.
    wd, prober, act = make(tmp_path)
    wd.tick()
    Path(wd.config.hold_path).write_text(
        f'{{"hold": {{"until": {until}, "reason": "x", "by": "y", "set_at": 1}}}}'
    )
    prober.next = REFUSED
    for _ in range(4):
        wd.tick()
    assert len(act.restarts) == 1
    (bad,) = events(wd, "file_invalid")
    assert bad["file"] == "hold" and not Path(wd.config.hold_path).exists()
    wd.close()


def test_absurd_hold_is_capped_at_a_week_after_it_was_set(tmp_path: Path) -> None:
    path = str(tmp_path / "hold.json")
    write_hold(path, until=1e300, reason="x", by="y", now=1000.0)
    hold, _ = read_hold(path)
    assert hold is not None and hold.until == 1000.0 + 7 * 24 * 3600


def test_events_rotate_by_size_and_read_across_the_rotation(tmp_path: Path) -> None:
    path = str(tmp_path / "events.jsonl")
    log = EventLog(path, lambda: 1.0, max_bytes=300)
    for i in range(40):
        log.append("e", i=i, pad="x" * 20)
    log.close()
    assert os.path.getsize(path + ".1") <= 400
    assert not os.path.exists(path) or os.path.getsize(path) < 300
    got = read_events(path).events
    assert [e["i"] for e in got] == list(range(40 - len(got), 40))  # oldest kept first
    assert [e["i"] for e in read_events(path, limit=3).events] == [37, 38, 39]


def test_full_disk_on_rotation_is_a_write_error_not_a_crash(tmp_path: Path) -> None:
    class NoSpace(EventLog):
        def append(self, kind: str, **fields: Any) -> dict[str, Any]:
            raise OSError(errno.ENOSPC, "No space left on device")

    wd, prober, act = make(tmp_path, event_log=NoSpace)
    prober.next = REFUSED
    wd.tick()
    assert wd.state is not None


class StartedAt:
    def __init__(self, started: float) -> None:
        self.started = started

    def __call__(self) -> float:
        return self.started


def test_fencing_after_an_ntp_step_of_24h_restarts(tmp_path: Path) -> None:
    # Reproduction: a daemon started 24 h behind, then stepped by NTP, compared failure times
    # on its steady clock with the container's start on the wall clock: it skipped both
    # restarts and gave up.
    true_now = 1_800_000_000.0
    wall, mono = [true_now - 86400], [0.0]
    clock = SteadyClock(lambda: wall[0], lambda: mono[0])
    wd, prober, act = make(tmp_path, daemon_clock=clock, restart_lock_path=str(tmp_path / "r.lock"))
    act.server_started_at = StartedAt(true_now - 2 * 3600)  # type: ignore[attr-defined]

    def advance() -> None:
        mono[0] += 150

    prober.probe = lambda: (advance(), REFUSED)[1]  # type: ignore[method-assign]
    wd.open()
    wall[0] = true_now + mono[0]  # NTP steps the wall clock by +24 h
    for _ in range(16):  # boot grace (1800 s), then three counted failures
        wd.tick()
    assert len(act.restarts) == 1 and events(wd, "restart_skipped") == []
    assert events(wd, "clock_step")
    wd.close()


def test_fencing_still_skips_a_restart_made_since_the_incident(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path, restart_lock_path=str(tmp_path / "r.lock"))
    clock = wd._clock
    act.server_started_at = lambda: clock() - 10  # type: ignore[attr-defined]
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert act.restarts == [] and len(events(wd, "restart_skipped")) == 1
    wd.close()


def test_overdue_restart_job_keeps_the_cluster_lock_until_it_ends(tmp_path: Path) -> None:
    # Reproduction: a restart job past 1800 s released the cluster lock while it still ran.
    lock_path = str(tmp_path / "r.lock")
    wd, prober, act = make(tmp_path, restart_lock_path=lock_path)
    running = [True]

    def overdue(reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()) -> None:
        act.restarts.append((reason, evidence))
        raise RestartJobOverdue("restart job (pid 4242) still running", 4242, lambda: running[0])

    act.restart = overdue  # type: ignore[method-assign]
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()
    assert len(act.restarts) == 1 and events(wd, "restart_job_overdue")
    other = FileLock(lock_path)
    with pytest.raises(Exception, match="held"):
        other.acquire("operator")
    wd.tick()
    running[0] = False  # the job's process ended
    wd.tick()
    assert events(wd, "restart_job_ended")[0]["pid"] == 4242
    other.acquire("operator")  # free now
    other.release()
    wd.close()


def test_clock_stays_fake_without_a_wall_clock(tmp_path: Path) -> None:
    wd, _, _ = make(tmp_path, clock=FakeClock())
    assert wd.restarts.wall_offset() == 0.0


def test_restart_decision_carries_its_start_time() -> None:
    policy = Policy(policy_config(failures=1))
    from tpwarden.watchdog.observation import Observation

    s = PolicyState(phase=WatchdogPhase.READY)
    s2, d = policy.decide(s, Observation(REFUSED, None, None, None, None), 500.0)
    assert any(isinstance(x, Restart) for x in d) and s2.restart_started_at == 500.0


def test_truncated_applied_plan_is_waited_past_not_a_crash_loop(tmp_path: Path) -> None:
    # Reproduction: a truncated applied.json crash-looped the unit into `failed`.
    from tpwarden.cluster.control.applied import write_local
    from tpwarden.watchdog.plan import wait_for_applied

    from .test_applied_plan import _inventory, _plan

    path = tmp_path / "applied.json"
    path.write_text('{"cluster": "glm", "config_ha')
    naps: list[float] = []

    def sleep(s: float) -> None:
        naps.append(s)
        if len(naps) == 2:  # the next `tpwarden up` writes it again
            write_local(_plan(_inventory(tmp_path)), [str(path)])

    plan = wait_for_applied(str(path), poll_s=1.0, sleep=sleep)
    assert plan.cluster and naps == [1.0, 1.0]


def test_the_watchdog_unit_orders_after_time_sync() -> None:
    # The steady clock starts from the wall clock at daemon start: after time sync, not before.
    unit = Path(__file__).resolve().parents[2] / "playbooks/roles/units/templates"
    text = (unit / "tpwarden-watchdog.service.j2").read_text()
    after = next(ln for ln in text.splitlines() if ln.startswith("After="))
    wants = next(ln for ln in text.splitlines() if ln.startswith("Wants="))
    assert "time-sync.target" in after.split("=")[1].split()
    assert "time-sync.target" in wants.split("=")[1].split()
