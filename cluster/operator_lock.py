"""One actor at a time: the cluster lock an operator's restart, a rollout and a watchdog restart
share, the watchdog hold that goes with it, and the record of an intentional `down`.

* `cluster_lock_path(spec)`: the flock the watchdog takes around its restarts. `tpwarden restart`
  and `tpwarden rollout` hold it for their whole duration, so a second one is refused naming who
  holds it, and a watchdog restart meanwhile is skipped (it verifies in boot grace instead).
* While it holds the lock, an operator action also holds the watchdog (hold.json, where a
  watchdog reads it: this machine and the head node), so the watchdog does not judge a server
  that is being restarted on purpose.
* `tpwarden down` leaves a hold of kind "down": the watchdog sees an intentional stop and does
  not restart until `tpwarden up` (or `restart`) clears it.
* `operator_identity()`: who acts, `user@host`, the one name lock notes, holds and event
  records give an operator.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec

DOWN_HOLD_S = 7 * 24 * 3600.0  # the longest hold the watchdog accepts; `up` ends it sooner


def operator_identity(
    user: Callable[[], str] = getpass.getuser, host: Callable[[], str] = socket.gethostname
) -> str:
    """`user@host`: who acts, as lock notes, holds and event records name an operator. A user
    with no name (a container's uid without a passwd entry) is its uid."""
    try:
        name = user()
    except (KeyError, OSError):
        name = str(os.getuid())
    return f"{name}@{host()}"


class ClusterBusy(TpwardenError):
    """Another operator action (or a watchdog restart) holds the cluster lock."""

    exit_code = 2


class Holder(Protocol):
    def hold(self, reason: str, until: float, kind: str = "hold") -> None: ...
    def release(self) -> None: ...


def cluster_lock_path(spec: ClusterSpec, state_dir: str | None = None) -> str:
    """The cluster-wide restart lock, next to the watchdog's state dir on this machine."""
    sd = state_dir or spec.watchdog.state_dir
    return os.path.join(os.path.dirname(os.path.abspath(sd)), f"restart-{spec.name}.lock")


def _holder_note(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def one_actor(
    lock_path: str,
    what: str,
    holder: Holder | None = None,
    hold_s: float = 0.0,
    clock: Callable[[], float] = time.time,
) -> Iterator[None]:
    """Hold the cluster lock (or raise ClusterBusy naming the holder) and, with a holder, the
    watchdog for `hold_s`, both for the duration of the block."""
    lock = FileLock(lock_path)
    try:
        lock.acquire(f"{what} (pid {os.getpid()})")
    except WatchdogLocked:
        raise ClusterBusy(
            f"another action holds the cluster lock {lock_path}: {_holder_note(lock_path)}; "
            "wait for it to finish"
        ) from None
    try:
        if holder is not None:
            holder.hold(what, clock() + hold_s)
        try:
            yield
        finally:
            if holder is not None:
                holder.release()
    finally:
        lock.release()


def mark_down(holder: Holder, who: str, clock: Callable[[], float] = time.time) -> None:
    """Record an intentional stop where the watchdog reads it (a hold of kind "down")."""
    holder.hold(f"tpwarden down by {who}", clock() + DOWN_HOLD_S, kind="down")


def clear_down(holder: Holder) -> None:
    """`up`/`restart`: end an intentional stop (and any hold) so the watchdog watches again."""
    holder.release()


class LeasedHolder:
    """A watchdog hold kept as a short lease, renewed while this process lives.

    A rollout holds the watchdog for two boots (6600 s by default); killed with -9 it used to
    leave that whole hold behind with the server down. As a lease, the hold lapses `lease_s`
    after the holder died (the watchdog then alerts `hold_expired` and its rules resume), and
    never outlives the `until` that was asked for.
    """

    def __init__(
        self, inner: Holder, lease_s: float = 600.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._inner = inner
        self._lease_s = lease_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, reason: str, until: float, kind: str = "hold") -> None:
        self._stop_renewing()
        self._stop = threading.Event()
        self._renew(reason, until, kind)
        self._thread = threading.Thread(
            target=self._loop, args=(reason, until, kind), name="watchdog-hold-lease", daemon=True
        )
        self._thread.start()

    def _renew(self, reason: str, until: float, kind: str) -> None:
        self._inner.hold(reason, min(until, self._clock() + self._lease_s), kind)

    def _loop(self, reason: str, until: float, kind: str) -> None:
        while not self._stop.wait(self._lease_s / 3):
            if self._clock() >= until:
                return
            try:
                self._renew(reason, until, kind)
            except Exception:  # noqa: BLE001 - a missed renewal: the next one may get through
                continue

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def release(self) -> None:
        self._stop_renewing()
        self._inner.release()


class WatchdogLocked(TpwardenError):
    """Another watchdog already holds this lock."""


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

    def fileno(self) -> int | None:
        """The locked file's descriptor while held (None otherwise). A child given it
        (`subprocess.Popen(pass_fds=...)`) shares the lock: flock belongs to the open file,
        so the lock stays held while the child lives, even if this process is killed."""
        return self._fd

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


def holder_note(path: str) -> str | None:
    """The note the holder of `path` wrote ("pid=123 ..."; "unknown" when unreadable), or None
    when nobody holds it. Never blocks."""
    if lock_holder(path) is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or "unknown"
    except OSError:
        return "unknown"
