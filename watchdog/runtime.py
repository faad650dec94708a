"""Time and waiting for the daemon: a steady clock, the tick cadence, bounded calls.

* `SteadyClock`: wall-clock seconds that advance with the monotonic clock. Every deadline and
  cadence inside one daemon life is measured on it, so an NTP step (+3 h during a boot) neither
  expires a grace period nor stalls the loop; the value is still wall time at the daemon's start,
  so persisted fields stay readable (and `Policy.on_startup` re-bases what survives a restart).
* `Cadence`: starts a tick every `interval_s`, measured start to start. A tick that overran its
  slot (a probe that timed out at `timeout_s >= interval_s`) is followed by the next one at once,
  never skipped to the slot after (APScheduler's `max_instances=1` did that: 240 s between probes
  at interval = timeout = 120 s, and it schedules on wall-clock datetimes).
* `bounded()`: runs a blocking call on a daemon thread and gives up after a timeout, so a frozen
  node costs one bounded wait, never the loop (the thread cannot keep the process alive).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tpwarden.cluster.errors import TpwardenError

T = TypeVar("T")


class SteadyClock:
    """`wall0 + (monotonic() - mono0)`: wall time at construction, monotonic afterwards."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self.wall = wall  # the wall clock now: fencing compares with the nodes' wall times
        self._wall0 = wall()
        self._mono0 = monotonic()

    def __call__(self) -> float:
        return self._wall0 + (self._monotonic() - self._mono0)


def next_start(started: float, interval_s: float) -> float:
    """Pure: when the tick after one that started at `started` is due (start to start)."""
    return started + interval_s


class Cadence:
    """Calls `fn` every `interval_s` (monotonic, start to start) on the calling thread until
    `stop()`; an overrun tick is followed at once by the next. Starts nothing when built."""

    def __init__(
        self,
        fn: Callable[[], object],
        interval_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fn = fn
        self.interval_s = interval_s  # the daemon changes it when it follows a new plan
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        due = self._monotonic()
        while not self._stop.is_set():
            delay = due - self._monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            started = self._monotonic()
            self._fn()
            due = next_start(started, self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="watchdog-cadence", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def running(self) -> bool:
        return not self._stop.is_set()


class CallTimedOut(TimeoutError):
    """A bounded call did not return in time (its thread is left to finish on its own)."""


def bounded(fn: Callable[[], T], timeout_s: float, what: str = "call") -> T:
    """`fn()` on a daemon thread; its result or exception, or CallTimedOut after `timeout_s`."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    t = threading.Thread(target=target, name=f"bounded-{what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise CallTimedOut(f"{what}: no answer within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


class RestartJobOverdue(TpwardenError):
    """The restart job outlived the actuator's wait. It is still running: whoever holds the
    cluster restart lock keeps it until `still_running()` says the job really ended."""

    def __init__(self, message: str, pid: int, still_running: Callable[[], bool]) -> None:
        super().__init__(message)
        self.pid = pid
        self.still_running = still_running
