"""Chaos test of the watchdog daemon (issue 29, item 11).

A hung-server scenario (the API answers 5xx from tick HANG_TICK on, until restarted) driven
tick by tick with the daemon's own fakes and a fake world clock (wall + monotonic; nothing
sleeps). At tick INJECT_TICK one seam starts failing in one way. Invariant for every cell:
within 3 x interval + timeout + restart deadline of simulated time after the hang began, the
server was restarted, or an alert was delivered or is queued for retry; and after no tick is
the phase `restarting` past the restart deadline.

Failure kinds: `raise` (arbitrary exception types, a different one per call, from the
injection on), `hang` (the call outlives its own bound once; the bound answers as it would:
a timeout error, an overdue restart job, a late return), `enospc` (OSError ENOSPC from the
injection on), `corrupt` (the seam's data is garbage once: a file, an answer, a reading),
`step+24h` / `step-24h` (the wall clock steps when the seam is first used after injection).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.cluster.operator_lock import FileLock
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.watchdog.actuator import raise_unless_applied
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import Watchdog
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.policy_state import WatchdogPhase
from tpwarden.watchdog.runtime import CallTimedOut, RestartJobOverdue, SteadyClock
from tpwarden.watchdog.state import StateStore

INTERVAL, TIMEOUT, DEADLINE = 30.0, 120.0, 1900.0
BOUND = 3 * INTERVAL + TIMEOUT + DEADLINE
HANG_TICK, INJECT_TICK = 2, 3
DAY = 86400.0

SEAMS = (
    "alerter",
    "restart_lock",
    "state_store",
    "event_log",
    "outbox",
    "actuator_restart",
    "actuator_evidence",
    "probe",
    "clock",
)
KINDS = ("raise", "hang", "enospc", "corrupt", "step+24h", "step-24h")
# Combinations left out, and why (each is a failure the seam cannot have):
NOT_MEANINGFUL = {
    ("clock", "enospc"): "a clock does no I/O: there is no disk to be full",
}


class ChaosError(Exception):
    """A type nobody catches by name."""


RAISED = (ChaosError, KeyError, TypeError, httpx.InvalidURL, RecursionError, AttributeError)


class World:
    """Simulated time: a monotonic clock and a wall clock that can be stepped."""

    def __init__(self) -> None:
        self.mono = 0.0
        self.step = 0.0
        self.true0 = 1_800_000_000.0

    def wall(self) -> float:
        return self.true0 + self.mono + self.step

    def true(self) -> float:
        return self.true0 + self.mono


class Fault:
    """One failure of one kind, armed at the injection tick; `hit(seam)` at each seam call."""

    def __init__(self, seam: str, kind: str, world: World) -> None:
        self.seam, self.kind, self.world = seam, kind, world
        self.armed = False
        self.spent = False  # one-shot kinds fire once
        self.calls = 0

    def active(self, seam: str) -> bool:
        if not self.armed or seam != self.seam:
            return False
        if self.kind in ("raise", "enospc"):
            return True
        return not self.spent

    def hit(self, seam: str, hang: Callable[[], Any] | None = None) -> Any:
        """Apply the fault (raise, advance time, step the clock); returns a marker for the
        caller's own `hang`/`corrupt` handling."""
        if not self.active(seam):
            return None
        self.calls += 1
        if self.kind == "raise":
            exc_type = RAISED[self.calls % len(RAISED)]
            raise exc_type(f"chaos at {seam}")
        if self.kind == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        self.spent = True
        if self.kind.startswith("step"):
            self.world.step += DAY if self.kind == "step+24h" else -DAY
            return None
        return self.kind  # "hang" or "corrupt": the seam's fake acts on it


class ChaosClock:
    """The daemon's clock: SteadyClock over the world, with the clock seam's faults."""

    def __init__(self, world: World, fault: Fault) -> None:
        self._steady = SteadyClock(world.wall, lambda: world.mono)
        self.wall = world.wall
        self.world, self.fault = world, fault

    def __call__(self) -> float:
        f = self.fault
        if f.seam == "clock" and f.armed and not f.spent:
            if f.kind == "raise":
                f.spent = True  # one-shot: a clock that always raised would stop all I/O
                raise ChaosError("clock read failed")
            marker = f.hit("clock")
            if marker == "hang":  # the process was stopped for one probe's bound
                self.world.mono += TIMEOUT + INTERVAL
            elif marker == "corrupt":
                return float("nan")
        return self._steady()


class ChaosProber:
    def __init__(self, world: World, fault: Fault) -> None:
        self.world, self.fault = world, fault
        self.tick = 0
        self.server_ok = True

    def probe(self) -> ProbeResult:
        self.tick += 1
        self.world.mono += INTERVAL
        marker = self.fault.hit("probe")
        if marker == "hang":  # the probe's own timeout answers
            self.world.mono += TIMEOUT
            return ProbeResult(Outcome.TIMEOUT, TIMEOUT, "timed out")
        if marker == "corrupt":
            return ProbeResult(Outcome.MALFORMED, 0.1, "200 without a completion")
        if self.server_ok:
            return ProbeResult(Outcome.OK, 0.2)
        return ProbeResult(Outcome.HTTP_5XX, 0.05, "500: engine core dead", status_code=500)

    def scrape_metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot(self.world.mono, {"vllm:generation_tokens_total": 5.0})

    def close(self) -> None:
        pass


class ChaosActuator:
    def __init__(self, world: World, fault: Fault, prober: ChaosProber) -> None:
        self.world, self.fault, self.prober = world, fault, prober
        self.started = world.true() - 2 * 3600
        self.restarted_at: list[float] = []  # monotonic times of restarts that took effect
        self.overdue_running = False

    def restart(
        self, reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()
    ) -> None:
        marker = self.fault.hit("actuator_restart")
        if marker == "hang":  # the job outlives the actuator's 1800 s wait, ends later
            self.world.mono += 1800.0
            self.overdue_running = True
            self._took_effect()
            raise RestartJobOverdue("restart job (pid 99) still running", 99, self._running)
        if marker == "corrupt":  # the job printed a result without the fields it must have
            raise_unless_applied({"outcomes": {"node1": {"message": "?"}}})
        self._took_effect()

    def _running(self) -> bool:
        running, self.overdue_running = self.overdue_running, False  # ends by the next look
        return running

    def _took_effect(self) -> None:
        self.prober.server_ok = True
        self.started = self.world.true()
        self.restarted_at.append(self.world.mono)

    def boot_progress(self) -> Any:
        return "garbage" if self.fault.hit("actuator_evidence") == "corrupt" else None

    def collect_evidence(self) -> Any:
        marker = self.fault.hit("actuator_evidence")
        if marker == "hang":  # bounded(): the evidence bound answers
            self.world.mono += 20.0
            raise CallTimedOut("evidence: no answer within 20s")
        if marker == "corrupt":
            return {1, 2, 3}  # not a dict, not JSON
        return {"node1": "last lines"}

    def server_started_at(self) -> Any:
        if self.fault.hit("actuator_evidence") == "corrupt":
            return "yesterday"
        return self.started

    def collect_dossier(self, reason: str) -> dict[str, Any] | None:
        return None  # takes no dossier

    def close(self) -> None:
        pass


class ChaosPoster:
    def __init__(self, world: World, fault: Fault) -> None:
        self.world, self.fault = world, fault
        self.delivered_at: list[float] = []

    def __call__(self, url: str, **kw: Any) -> Any:
        marker = self.fault.hit("alerter")
        if marker == "hang":  # httpx's own timeout answers
            self.world.mono += 30.0
            raise httpx.ReadTimeout("timed out")
        if marker == "corrupt":
            return type("Garbage", (), {"status_code": "two hundred"})()
        self.delivered_at.append(self.world.mono)
        return httpx.Response(200)


class ChaosLock(FileLock):
    def __init__(self, path: str, fault: Fault, world: World) -> None:
        super().__init__(path)
        self.fault, self.world = fault, world

    def acquire(self, note: str = "") -> None:
        marker = self.fault.hit("restart_lock")
        if marker == "hang":  # a lock file on a stalled file system: late, then taken
            self.world.mono += TIMEOUT
        if marker == "corrupt":  # the lock path is a directory: open() fails
            os.makedirs(self.path, exist_ok=True)
        super().acquire(note)


class ChaosStore(StateStore):
    def __init__(self, path: str, fault: Fault, world: World) -> None:
        super().__init__(path)
        self.fault, self.world = fault, world

    def save(self, state: Any) -> None:
        if self.fault.hit("state_store") == "hang":  # a slow fsync: late, then written
            self.world.mono += TIMEOUT
        super().save(state)


class ChaosLog(EventLog):
    def __init__(self, path: str, clock: Any, fault: Fault, world: World) -> None:
        super().__init__(path, clock, max_bytes=64 * 1024)
        self.fault, self.world = fault, world

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        marker = self.fault.hit("event_log")
        if marker == "hang":
            self.world.mono += TIMEOUT
        if marker == "corrupt":  # binary garbage and a torn line in the middle of the log
            with open(self.path, "ab") as fh:
                fh.write(b'\x00\xff{not json\n{"ts": 1, "kind": "tor')
        return super().append(kind, **fields)


@dataclasses.dataclass
class Run:
    wd: Watchdog
    world: World
    fault: Fault
    prober: ChaosProber
    actuator: ChaosActuator
    poster: ChaosPoster
    cfg: WatchdogConfig


def build(tmp_path: Path, seam: str, kind: str) -> Run:
    world = World()
    fault = Fault(seam, kind, world)
    cfg = WatchdogConfig(
        probe_url="http://127.0.0.1:9",
        state_dir=str(tmp_path / "wd"),
        interval_s=INTERVAL,
        timeout_s=TIMEOUT,
        restart_deadline_s=DEADLINE,
        alert_webhook="http://127.0.0.1:9/hook",
        alert_on_restart=True,
        restart_lock_path=str(tmp_path / "restart.lock"),
    )
    prober = ChaosProber(world, fault)
    actuator = ChaosActuator(world, fault, prober)
    poster = ChaosPoster(world, fault)
    return Run(_watchdog(cfg, world, fault, prober, actuator, poster), world, fault, prober,
               actuator, poster, cfg)  # fmt: skip


def _watchdog(cfg: WatchdogConfig, world: World, fault: Fault, prober: Any, actuator: Any,
              poster: Any) -> Watchdog:  # fmt: skip
    clock = ChaosClock(world, fault)
    wd = Watchdog(
        cfg,
        prober,
        actuator,
        clock,
        ChaosStore(cfg.state_path, fault, world),
        ChaosLog(cfg.events_path, clock, fault, world),
        Alerter(webhook=cfg.alert_webhook, poster=poster, clock=world.wall),
        metrics=WatchdogMetrics(),
        restart_lock=ChaosLock(str(cfg.restart_lock_path), fault, world),
    )
    if fault.seam == "outbox" and fault.kind == "enospc":  # outbox.json cannot be written
        real_write = wd.files.write_json

        def write(path: str, doc: Any) -> None:
            fault.hit("outbox")
            real_write(path, doc)

        wd.files.write_json = write  # the daemon's outbox writer, injected at its seam
    return wd


def _outbox_fault(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outbox seam: its flush and its file (outbox.json)."""
    fault, world, box = run.fault, run.world, run.wd._outbox
    flush = box.flush

    def chaos_flush(now: float) -> list[dict[str, Any]]:
        if fault.hit("outbox") == "hang":
            world.mono += TIMEOUT
        return flush(now)

    monkeypatch.setattr(box, "flush", chaos_flush)


def _restart_daemon(run: Run) -> None:
    """A new daemon process on the same state dir (how corrupt files are read back)."""
    run.wd.close()
    run.wd = _watchdog(run.cfg, run.world, run.fault, run.prober, run.actuator, run.poster)


def _corrupt_file(run: Run) -> None:
    if run.fault.seam == "state_store":
        Path(run.cfg.state_path).write_text('{"version": 1, "policy": {"consecutive_failures": "3"')
    else:  # outbox: an item without next_at
        doc = {"pending": [{"incident": {"category": "x"}, "attempts": 0}]}
        Path(run.cfg.state_dir, "outbox.json").write_text(json.dumps(doc))
    run.fault.spent = True
    _restart_daemon(run)


@pytest.mark.parametrize(
    ("seam", "kind"),
    [
        pytest.param(s, k, id=f"{s}-{k}")
        for s in SEAMS
        for k in KINDS
        if (s, k) not in NOT_MEANINGFUL
    ],
)
def test_no_dead_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seam: str, kind: str) -> None:
    outcome = run_cell(tmp_path, monkeypatch, seam, kind)
    assert outcome["fault_fired"], outcome  # the seam was really reached and failed
    assert outcome["restarted"] or outcome["alert_delivered"] or outcome["alert_queued"], outcome
    assert not outcome["stuck_restarting"], outcome


def run_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seam: str, kind: str
) -> dict[str, Any]:
    """Drive the scenario for one cell; what happened by the bound, and whether the phase was
    ever `restarting` past its deadline after a tick."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not under test here
    run = build(tmp_path, seam, kind)
    if seam == "outbox":  # outbox.json's writer: see _watchdog
        _outbox_fault(run, monkeypatch)
    hang_at: float | None = None
    stuck = False
    restarted = delivered = queued = False
    for tick in range(200):
        if tick == HANG_TICK:
            run.prober.server_ok = False
            hang_at = run.world.mono
        if tick == INJECT_TICK:
            run.fault.armed = True
            if kind == "corrupt" and seam in ("state_store", "outbox"):
                _corrupt_file(run)
                if seam == "outbox":
                    _outbox_fault(run, monkeypatch)
        run.wd._safe_tick()
        state = run.wd.state
        if state is not None and state.phase is WatchdogPhase.RESTARTING:
            began, now = state.restart_started_at, run.wd._clock._steady()
            stuck = stuck or began is None or now - began > DEADLINE
        if hang_at is not None and run.world.mono - hang_at <= BOUND:
            restarted = restarted or any(t >= hang_at for t in run.actuator.restarted_at)
            delivered = delivered or any(t >= hang_at for t in run.poster.delivered_at)
            queued = queued or bool(run.wd._outbox.pending)
        if hang_at is not None and run.world.mono - hang_at > BOUND:
            break
    run.wd.close()
    read_events(run.cfg.events_path)  # the log stays readable whatever was written into it
    return {
        "restarted": restarted,
        "alert_delivered": delivered,
        "alert_queued": queued,
        "stuck_restarting": stuck,
        "fault_fired": run.fault.calls > 0 or run.fault.spent,
    }


def test_the_matrix_names_every_seam_and_kind() -> None:
    cells = {(s, k) for s in SEAMS for k in KINDS}
    assert set(NOT_MEANINGFUL) <= cells and len(cells) - len(NOT_MEANINGFUL) == 53


@pytest.mark.parametrize(
    ("seam", "kind"),
    [("actuator_restart", "raise"), ("probe", "raise"), ("restart_lock", "enospc")],
)
def test_the_faults_really_fire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seam: str,
                                kind: str) -> None:  # fmt: skip
    outcome = run_cell(tmp_path, monkeypatch, seam, kind)
    assert outcome["fault_fired"] and not outcome["restarted"], outcome
