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
import dataclasses
import fcntl
import logging
import math
import os
import time
from collections.abc import Iterator

from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, read_json
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.config import MAX_HOLD_S
from tpwarden.watchdog.observation import OperatorHold
from tpwarden.watchdog.policy_state import PolicyState

log = logging.getLogger(__name__)

STATE_VERSION = 1


class WatchdogLocked(TpwardenError):
    """Another watchdog already holds this lock."""


def move_aside(path: str, error: object) -> str | None:
    """Rename an invalid file to `<path>.invalid-<ts>` (kept for a post-mortem, never read
    again); returns where it went, or None when it could not be moved."""
    aside = f"{path}.invalid-{int(time.time())}"
    log.error("watchdog file %s is invalid (%s); moving it to %s", path, error, aside)
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.error("cannot move %s aside: %s", path, exc)
        return None
    return aside


class StateStore:
    """Loads and saves `PolicyState` atomically. A file that is not valid JSON of the right
    shape and types is moved aside (`quarantined` says where and why), never trusted: the
    daemon starts from a safe state (boot grace) and alerts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.quarantined: list[tuple[str | None, str]] = []

    def load(self) -> PolicyState | None:
        try:
            data = read_json(self.path)
            if data is None:
                return None
            if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
                raise ValueError("no policy object")
            return PolicyState.from_json(data["policy"])
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.quarantined.append((move_aside(self.path, error), error))
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
) -> JSONObject:
    """hold.json holding restarts until `until` (`kind` "down": an intentional stop)."""
    hold = {"until": until, "reason": reason, "by": by, "set_at": now, "kind": kind}
    return {"hold": hold, "released_at": None}


def release_document(*, by: str, now: float) -> JSONObject:
    """hold.json after a release: restarts re-armed at `now`."""
    return {"hold": None, "released_at": now, "released_by": by}


def write_hold(
    path: str, *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> None:
    doc = hold_document(until=until, reason=reason, by=by, now=now, kind=kind)
    atomic_write_json(path, doc)


def write_release(path: str, *, by: str, now: float) -> None:
    atomic_write_json(path, release_document(by=by, now=now))


@dataclasses.dataclass(frozen=True)
class HoldRead:
    hold: OperatorHold | None
    released_at: float | None
    invalid: str | None = None  # why the file was not used (it was moved aside)
    moved_to: str | None = None


def _finite(v: JSONValue, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} {v!r} is not a finite number")
    return float(v)


def _parse_hold(data: JSONValue, path: str) -> tuple[OperatorHold | None, float | None]:
    if not isinstance(data, dict):
        raise ValueError("not an object")
    h = data.get("hold")
    hold = None
    if h:
        if not isinstance(h, dict):
            raise ValueError("hold is not an object")
        until = _finite(h.get("until"), "until")
        # Capped on read: a hold lasts at most MAX_HOLD_S from when it was set (or written).
        set_at = h.get("set_at")
        base = _finite(set_at, "set_at") if set_at is not None else os.path.getmtime(path)
        until = min(until, base + MAX_HOLD_S)
        hold = OperatorHold(
            until, str(h.get("reason", "")), str(h.get("by", "")), str(h.get("kind") or "hold")
        )
    rel = data.get("released_at")
    return hold, _finite(rel, "released_at") if rel is not None else None


def load_hold(path: str, *, quarantine: bool = False) -> HoldRead:
    """hold.json as data, not trust: an `until` of Infinity/NaN or of the wrong type makes the
    file invalid (reported in `invalid`; no hold; moved aside when `quarantine`, which only the
    daemon asks for); any hold is capped at MAX_HOLD_S after it was set."""
    try:
        data = read_json(path)
        if data is None:
            return HoldRead(None, None)
        hold, released = _parse_hold(data, path)
        return HoldRead(hold, released)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        return HoldRead(None, None, error, move_aside(path, error) if quarantine else None)
    except OSError as exc:  # unreadable now (permissions, I/O): no hold this tick, file kept
        return HoldRead(None, None, f"{type(exc).__name__}: {exc}")


def read_hold(path: str) -> tuple[OperatorHold | None, float | None]:
    """(active-or-expired hold, last release time); an invalid file counts as no hold."""
    got = load_hold(path)
    return got.hold, got.released_at
