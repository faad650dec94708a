"""Durable watchdog state: atomic JSON files and flock-based locks.

* `state.json`: the policy state, written by the daemon only (`durable.atomic_write_json`).
* `hold.json`: the operator's hold / release request, written by operators (the CLI, a rollout,
  an operator action), always through `hold_document` / `write_hold`... below, at
  `config.hold_path(state_dir)`; the daemon reads it every tick, so nobody races the daemon for
  `state.json`.
* `watchdog.lock`: flock held for the daemon's life; a second daemon on the same dir refuses.
* the cluster restart lock (`restart_lock_path`): flock held only while the actuator restarts, so
  two watchdogs with different state dirs never restart the same cluster at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from tpwarden.cluster.durable import atomic_write_json, read_json
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.observation import OperatorHold
from tpwarden.watchdog.policy_state import PolicyState

log = logging.getLogger(__name__)

STATE_VERSION = 1


class WatchdogLocked(TpwardenError):
    """Another watchdog already holds this lock."""


class StateStore:
    """Loads and saves `PolicyState` atomically. A corrupt file is moved aside, never trusted."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> PolicyState | None:
        try:
            data = read_json(self.path)
            if data is None:
                return None
            return PolicyState.from_json(data["policy"])
        except (ValueError, KeyError, TypeError) as exc:
            aside = f"{self.path}.corrupt-{int(time.time())}"
            log.error("state file %s unreadable (%s); moved to %s", self.path, exc, aside)
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return None

    def save(self, state: PolicyState) -> None:
        atomic_write_json(self.path, {"version": STATE_VERSION, "policy": state.to_json()})


class FileLock:
    """Non-blocking exclusive flock; the file records the holder's pid for diagnostics."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, note: str = "") -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            raise WatchdogLocked(
                f"{self.path} is held by another watchdog ({holder or 'unknown'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} {note}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    @contextlib.contextmanager
    def holding(self, note: str = "") -> Iterator[None]:
        self.acquire(note)
        try:
            yield
        finally:
            self.release()


def lock_holder(path: str) -> str | None:
    """Who holds `path` (its recorded note) or None when nobody does. Never blocks."""
    lock = FileLock(path)
    if not os.path.exists(path):
        return None
    try:
        lock.acquire("probe")
    except WatchdogLocked as exc:
        return str(exc)
    lock.release()
    return None


# ---- operator hold / release (hold.json) --------------------------------------------------------
def hold_document(
    *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> dict[str, Any]:
    """hold.json holding restarts until `until` (`kind` "down": an intentional stop)."""
    hold = {"until": until, "reason": reason, "by": by, "set_at": now, "kind": kind}
    return {"hold": hold, "released_at": None}


def release_document(*, by: str, now: float) -> dict[str, Any]:
    """hold.json after a release: restarts re-armed at `now`."""
    return {"hold": None, "released_at": now, "released_by": by}


def write_hold(
    path: str, *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> None:
    doc = hold_document(until=until, reason=reason, by=by, now=now, kind=kind)
    atomic_write_json(path, doc)


def write_release(path: str, *, by: str, now: float) -> None:
    atomic_write_json(path, release_document(by=by, now=now))


def read_hold(path: str) -> tuple[OperatorHold | None, float | None]:
    """(active-or-expired hold, last release time); a broken file counts as no hold."""
    try:
        data = read_json(path) or {}
        h = data.get("hold")
        hold = (
            OperatorHold(
                float(h["until"]),
                str(h.get("reason", "")),
                str(h.get("by", "")),
                str(h.get("kind") or "hold"),
            )
            if h
            else None
        )
        rel = data.get("released_at")
        return hold, float(rel) if rel is not None else None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.error("hold file %s unreadable: %s", path, exc)
        return None, None
