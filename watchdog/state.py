"""Durable watchdog state: atomic JSON files and flock-based locks.

* `state.json`: the policy state, written by the daemon only (temp file, fsync, rename, fsync dir).
* `hold.json`: the operator's hold / release request, written by the CLI only; the daemon reads it
  every tick, so the CLI never races the daemon for `state.json`.
* `watchdog.lock`: flock held for the daemon's life; a second daemon on the same dir refuses.
* the cluster restart lock (`restart_lock_path`): flock held only while the actuator restarts, so
  two watchdogs with different state dirs never restart the same cluster at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from servectl.cluster.errors import ServectlError
from servectl.watchdog.policy import OperatorHold, PolicyState

log = logging.getLogger(__name__)

STATE_VERSION = 1


class WatchdogLocked(ServectlError):
    """Another watchdog already holds this lock."""


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to `path` so readers see the old or the new file, never a torn one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_json(path: str) -> Any | None:
    """The decoded file, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


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


# ---- operator hold / release (hold.json, written by the CLI) ---------------------------------
def write_hold(
    path: str, *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> None:
    hold = {"until": until, "reason": reason, "by": by, "set_at": now, "kind": kind}
    atomic_write_json(path, {"hold": hold, "released_at": None})


def write_release(path: str, *, by: str, now: float) -> None:
    atomic_write_json(path, {"hold": None, "released_at": now, "released_by": by})


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
