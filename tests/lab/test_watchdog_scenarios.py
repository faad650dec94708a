"""The watchdog against the lab, time scaled down, with the REAL actuator (cluster control).

Each scenario drives `Watchdog.tick()` in-process (the daemon's own loop body) except the kill -9
one, which runs `tpwarden watchdog run` as a subprocess and SIGKILLs it. Restarts are counted from
cluster control's own event log (`events.jsonl` in the control state dir, the same record an
operator's `tpwarden restart` writes), so a scenario counts restarts that really happened.

Scenarios share one running server: `ctl.up()` is a no-op when the right config already runs,
and the `ctl` fixture leaves a healthy server behind (faults cleared, restarted if needed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operator_lock import cluster_lock_path, lock_holder
from tpwarden.lab import faults
from tpwarden.lab.paths import HEAD
from tpwarden.watchdog.actuator import WATCHDOG_WHO, build_actuator
from tpwarden.watchdog.daemon import Watchdog, build_watchdog
from tpwarden.watchdog.policy_state import WatchdogPhase
from tpwarden.watchdog.wiring import build_config

pytestmark = pytest.mark.lab

INTERVAL_S = 1.5
TIMEOUT_S = 2.0
FAILURES = 3
WORKER = "node3"


# ---- fixtures and helpers ------------------------------------------------------------------
@pytest.fixture
def ctl(lab, tmp_path, monkeypatch):
    control = tmp_path / "control"
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(control))  # the restart job's default too
    spec = load_inventory(lab.inventory)
    with Controller(spec, state_dir=control, node_timeout_s=10) as c:
        result = c.up(timeout_s=300)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        yield c
        _leave_healthy(c, lab)


def _leave_healthy(c: Controller, lab) -> None:
    faults.clear_sim_faults(lab.paths)
    for node in (HEAD, WORKER):
        with contextlib.suppress(Exception):
            faults.container_action(lab.paths, node, "unpause")
    if not c.probe(timeout=5)[0]:
        result = c.restart("test cleanup", timeout_s=300)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)


def make_watchdog(spec, tmp_path: Path, name: str = "wd", **overrides) -> Watchdog:
    settings = dict(
        interval_s=INTERVAL_S,
        timeout_s=TIMEOUT_S,
        failures=FAILURES,
        boot_deadline_s=60.0,
        boot_extend_s=5.0,
        metrics_timeout_s=1.0,
        metrics_port=0,  # a free port per watchdog: never the one a demo or real daemon uses
        max_restarts=2,
        alert_command=(
            "sh",
            "-c",
            f"cat >> {tmp_path / (name + '-alerts.jsonl')}; echo >> "
            f"{tmp_path / (name + '-alerts.jsonl')}",
        ),
    )
    settings.update(overrides)
    cfg = dataclasses.replace(build_config(spec, str(tmp_path / name)), **settings)
    return build_watchdog(cfg, build_actuator(spec, str(tmp_path / "control")))


def events(wd_or_dir) -> list[dict]:
    path = (
        wd_or_dir.config.events_path
        if isinstance(wd_or_dir, Watchdog)
        else os.path.join(wd_or_dir, "events.jsonl")
    )
    return read_events(path).events


def kinds(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e.get("kind") == kind]


def control_restarts(tmp_path: Path, who: str | None = WATCHDOG_WHO) -> list[dict]:
    path = tmp_path / "control" / "events.jsonl"
    if not path.exists():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if r.get("event") == "restart" and (who is None or r["who"] == who)]


def tick_until(wd: Watchdog, cond, timeout_s: float, what: str) -> None:
    """Tick at the configured interval until `cond()`; fail with the recent events if not."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        t0 = time.monotonic()
        wd.tick()
        if cond():
            return
        time.sleep(max(0.0, wd.config.interval_s - (time.monotonic() - t0)))
    tail = [
        {k: v for k, v in e.items() if k not in ("evidence", "metrics")} for e in events(wd)[-12:]
    ]
    pytest.fail(f"not {what} after {timeout_s:g}s; last events: {tail}")


def phase_is(wd: Watchdog, phase: WatchdogPhase):
    return lambda: wd.state is not None and wd.state.phase is phase


def counted_before_restart(evs: list[dict], since_ts: float) -> list[dict]:
    """count_failure decisions after `since_ts` up to the first restart_begin."""
    out = []
    for e in evs:
        if e["ts"] < since_ts:
            continue
        if e["kind"] == "restart_begin":
            return out
        if e["kind"] == "decision" and e.get("decision") == "count_failure":
            out.append(e)
    return out


def ready_watchdog(ctl, tmp_path, name="wd", **kw) -> Watchdog:
    wd = make_watchdog(ctl.spec, tmp_path, name, **kw)
    tick_until(wd, phase_is(wd, WatchdogPhase.READY), 60, "ready")
    return wd


def restart_then_healthy(wd: Watchdog, tmp_path: Path, t_fault: float) -> list[dict]:
    tick_until(wd, lambda: kinds(events(wd), "restart_end"), 90, "restarted")
    tick_until(wd, phase_is(wd, WatchdogPhase.READY), 120, "healthy again")
    evs = events(wd)
    (end,) = kinds(evs, "restart_end")
    assert end["ok"], end
    assert len(control_restarts(tmp_path)) == 1
    counted = counted_before_restart(evs, t_fault)
    assert [c["count"] for c in counted] == list(range(1, FAILURES + 1)), counted
    return evs


# ---- scenarios -----------------------------------------------------------------------------
def test_hung_api_head_paused_restarts_after_exactly_n_failures(ctl, lab, tmp_path):
    wd = ready_watchdog(ctl, tmp_path)
    try:
        t_fault = time.time()
        faults.container_action(lab.paths, HEAD, "pause")
        evs = restart_then_healthy(wd, tmp_path, t_fault)
        (begin,) = kinds(evs, "restart_begin")
        assert set(begin["evidence"]["nodes"]["last_log_lines"]) == {n.name for n in ctl.spec.nodes}
        assert "metrics" in begin["evidence"]["nodes"]
        (rec,) = control_restarts(tmp_path)
        assert rec["why"].startswith("watchdog: ") and rec["plan"]
    finally:
        wd.close()


def test_lost_worker_rank_is_stalled_then_restarted(ctl, lab, tmp_path):
    wd = ready_watchdog(ctl, tmp_path)
    try:
        t_fault = time.time()
        faults.container_action(lab.paths, WORKER, "pause")
        evs = restart_then_healthy(wd, tmp_path, t_fault)
        counted = counted_before_restart(evs, t_fault)
        # /health stays 200 and /metrics answers: the probe times out with flat counters
        assert any(c["verdict"] == "stalled" for c in counted), counted
    finally:
        wd.close()


def test_head_container_crash_restarts(ctl, lab, tmp_path):
    wd = ready_watchdog(ctl, tmp_path)
    try:
        t_fault = time.time()
        faults.container_action(lab.paths, HEAD, "kill")
        evs = restart_then_healthy(wd, tmp_path, t_fault)
        assert {c["verdict"] for c in counted_before_restart(evs, t_fault)} == {"hard_fail"}
    finally:
        wd.close()


def _stream_worker(base: str, model: str, stop: threading.Event, done: list[int]) -> None:
    body = {"model": model, "prompt": "tell me a story", "max_tokens": 200, "stream": True}
    with httpx.Client(base_url=base, timeout=120) as c:
        while not stop.is_set():
            with (
                contextlib.suppress(httpx.HTTPError),
                c.stream("POST", "/v1/completions", json=body) as r,
            ):
                for _ in r.iter_lines():
                    if stop.is_set():
                        break
                done.append(r.status_code)


def _prefill_worker(base: str, model: str, words: int, stop: threading.Event, done: list[int]):
    body = {"model": model, "prompt": "hello " * words, "max_tokens": 4}
    with httpx.Client(base_url=base, timeout=300) as c:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                done.append(c.post("/v1/completions", json=body).status_code)


def test_load_32_streams_and_a_long_prefill_never_restart(ctl, tmp_path):
    wd = ready_watchdog(ctl, tmp_path)
    base, model = ctl.spec.api_base, ctl.spec.serving.model.served_name
    stop, streams, prefills = threading.Event(), [], []
    threads = [
        threading.Thread(target=_stream_worker, args=(base, model, stop, streams), daemon=True)
        for _ in range(32)
    ]
    # ~400k prompt tokens: at the lab's step scale a chunked prefill of several seconds, over
    # and over, so one is always in flight
    threads.append(
        threading.Thread(
            target=_prefill_worker, args=(base, model, 400_000, stop, prefills), daemon=True
        )
    )
    for t in threads:
        t.start()
    try:
        window = FAILURES * (INTERVAL_S + TIMEOUT_S)
        t0 = time.time()
        end = time.monotonic() + 3 * window
        while time.monotonic() < end:
            started = time.monotonic()
            wd.tick()
            time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - started)))
        evs = [e for e in events(wd) if e["ts"] >= t0]
        probes = kinds(evs, "probe")
        verdicts = {
            v: sum(1 for p in probes if p["verdict"] == v) for v in {p["verdict"] for p in probes}
        }
        print(
            f"load: {len(probes)} probes {verdicts}, {len(streams)} streams and "
            f"{len(prefills)} long prefills completed"
        )
        assert len(probes) >= 8
        assert not kinds(evs, "restart_begin") and not control_restarts(tmp_path)
        assert not [e for e in evs if e.get("decision") == "count_failure"], verdicts
        assert len(streams) >= 32 and prefills, "the load did not run"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        wd.close()


def test_never_finishing_boot_gives_up_with_one_alert_and_no_loop(ctl, lab, tmp_path):
    faults.sim_fault(lab.paths, "boot_stuck_at", phase="load_weights")
    op = ctl.restart("test: boot will stick", wait_ready=False)  # an operator restart
    assert all(o.ok for o in op.outcomes), op.outcomes
    wd = make_watchdog(ctl.spec, tmp_path, boot_deadline_s=12.0, boot_extend_s=3.0)
    try:
        tick_until(wd, phase_is(wd, WatchdogPhase.GIVEN_UP), 120, "given up")
        # keep watching: no restart loop, no second alert
        deadline = time.monotonic() + 4 * INTERVAL_S
        tick_until(wd, lambda: time.monotonic() > deadline, 30, "still given up")
        evs = events(wd)
        assert wd.state.phase is WatchdogPhase.GIVEN_UP
        assert len(kinds(evs, "restart_end")) == 1  # the 1st missed boot is restarted once
        assert len(control_restarts(tmp_path)) == 1
        (alert,) = kinds(evs, "alert_sent")
        assert alert["category"] == "gave_up" and alert["delivered"], alert
        sent = (tmp_path / "wd-alerts.jsonl").read_text().split("\n\n")
        assert len([s for s in sent if s.strip()]) == 1
        # a watchdog restart and an operator restart look the same in cluster control's log
        (operator,) = control_restarts(tmp_path, who=None)[:1]
        (auto,) = control_restarts(tmp_path)
        assert set(operator) == set(auto) and operator["config_hash"] == auto["config_hash"]
    finally:
        wd.close()


def test_two_watchdogs_on_one_cluster_restart_once(ctl, lab, tmp_path):
    a = ready_watchdog(ctl, tmp_path, "a")
    b = ready_watchdog(ctl, tmp_path, "b")
    assert a.config.restart_lock_path == b.config.restart_lock_path
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop(wd: Watchdog) -> None:
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                wd.tick()
                stop.wait(max(0.0, INTERVAL_S - (time.monotonic() - t0)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(wd,), daemon=True) for wd in (a, b)]
    try:
        faults.container_action(lab.paths, HEAD, "pause")
        for t in threads:
            t.start()
        end = time.monotonic() + 180

        def settled() -> bool:
            return (
                bool(control_restarts(tmp_path))
                and a.state.phase is WatchdogPhase.READY
                and b.state.phase is WatchdogPhase.READY
            )

        while time.monotonic() < end and not settled() and not errors:
            time.sleep(0.5)
        assert not errors, errors
        assert settled(), (a.state.phase, b.state.phase, control_restarts(tmp_path))
        # a few more rounds: the other one must not restart the fresh server
        time.sleep(4 * INTERVAL_S)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        a.close()
        b.close()
    assert len(control_restarts(tmp_path)) == 1
    ends = kinds(events(a), "restart_end") + kinds(events(b), "restart_end")
    assert len(ends) == 1, ends
    skipped = kinds(events(a), "restart_skipped") + kinds(events(b), "restart_skipped")
    print(f"two watchdogs: 1 restart, skipped by the other: {[s['error'][:80] for s in skipped]}")


def _state(sd: Path) -> dict:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return json.loads((sd / "state.json").read_text())["policy"]
    return {}


def _wait(cond, timeout_s: float, what: str, poll_s: float = 0.2) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(poll_s)
    pytest.fail(f"not {what} after {timeout_s:g}s")


def _daemon(lab, sd: Path, log: Path) -> subprocess.Popen:
    tpwarden = os.path.join(os.path.dirname(sys.executable), "tpwarden")
    argv = [tpwarden, "watchdog", "run", "-i", str(lab.inventory), "--state-dir", str(sd)]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def test_kill_9_mid_restart_does_not_restart_twice(ctl, lab, tmp_path):
    """`tpwarden watchdog run` (the lab inventory's 2 s interval/timeout, 3 failures) is killed
    with -9 while its restart is being applied; the next daemon verifies, never repeats it."""
    sd, log = tmp_path / "wd", tmp_path / "daemon.log"
    first = _daemon(lab, sd, log)
    second = None
    try:
        _wait(lambda: _state(sd).get("phase") == "ready", 90, "ready")
        faults.container_action(lab.paths, HEAD, "pause")
        # mid-restart: cluster control has recorded the plan and is applying it
        _wait(lambda: control_restarts(tmp_path), 90, "restarting", poll_s=0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert _state(sd).get("restart_in_progress"), _state(sd)
        # Its restart job goes on and holds the cluster restart lock until it ends: the next
        # daemon reads the containers the job stops as a restart elsewhere, not a failed boot
        # (without it, CI of stop 56 restarted a second time on "node1: container exited").
        lock_path = cluster_lock_path(ctl.spec, str(sd))
        assert lock_holder(lock_path), "the cluster restart lock went with the killed daemon"
        second = _daemon(lab, sd, log)
        _wait(lambda: _state(sd).get("phase") == "ready", 150, "ready after the restart")
        n = len(kinds(events(sd), "probe"))
        _wait(lambda: len(kinds(events(sd), "probe")) >= n + 3, 60, "probing on")
        evs = events(sd)
        assert len(kinds(evs, "restart_begin")) == 1 and not kinds(evs, "restart_end")
        assert kinds(evs, "restart_interrupted")
        assert len(control_restarts(tmp_path)) == 1
        assert lock_holder(lock_path) is None  # the job ended, and the lock with it
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=15)
        print(log.read_text()[-3000:] if log.exists() else "")
