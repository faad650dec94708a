"""Arming a night's deadline guard, and reading where it stands (`experiment.guard`).

* `arm_guard`: `tpwarden experiment guard PLAN -i INVENTORY` started as a detached process: its
  own session (`start_new_session`: a kill -9 of the night, or of the night's process group,
  does not reach it), stdin from /dev/null, stdout and stderr appended to `guard.log` in the
  night's results directory, no descriptor of the night's (its locks stay the night's). None is
  started when a live guard holds `guard.lock` already (a resumed night keeps its guard; one
  that has acted and is only exiting is waited for, briefly). The guard writes its own record
  (`guard.json`); the night's events say it was started (`guard_started`, `guard_alive`, or
  `guard_not_armed` with why: the night goes on, restoring production itself at its end).
* `guard_status`: `guard.json` and whether a guard holds the lock now; local files only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Protocol

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.experiment.guard import GUARD_LOCK, GUARD_LOG, GuardState, read_guard
from tpwarden.cluster.experiment.night import NightFiles
from tpwarden.cluster.operator_lock import holder_note

CLI_MODULE = "tpwarden.cluster.cli"  # `python -m tpwarden.cluster.cli` is `tpwarden`
FINISHING_S = 10.0  # a guard that has acted, still exiting: waited for this long


class Spawn(Protocol):
    """How the guard is started: `subprocess.Popen` (tests inject a fake)."""

    def __call__(
        self,
        args: list[str],
        *,
        stdin: int,
        stdout: int | IO[bytes],
        stderr: int,
        start_new_session: bool,
        close_fds: bool,
    ) -> subprocess.Popen[bytes]: ...


@dataclass(frozen=True)
class GuardArming:
    started: bool  # False: one was alive already, or it could not start (`detail`)
    pid: int | None
    detail: str

    def to_json(self) -> JSONObject:
        return asdict(self)


def guard_argv(plan: Path, inventory: Path) -> list[str]:
    """The guard's command line: this Python, absolute paths (it outlives the night's cwd)."""
    return [sys.executable, "-m", CLI_MODULE, "experiment", "guard", str(plan.resolve()),
            "-i", str(inventory.resolve())]  # fmt: skip


def live_guard(root: Path) -> str | None:
    """The note of the guard that holds `guard.lock` now ("pid=123 ..."), or None."""
    return holder_note(str(root / GUARD_LOCK))


def pid_of(note: str | None) -> int | None:
    """The pid a lock's note starts with (`FileLock` writes "pid=N ...")."""
    got = re.match(r"pid=(\d+)", note or "")
    return int(got.group(1)) if got else None


def arm_guard(
    plan: Path, inventory: Path, files: NightFiles, spawn: Spawn | None = None
) -> GuardArming:
    """The night's guard started, unless one is alive (module docstring)."""
    alive = _watching(files.root)
    if alive is not None:
        files.event("guard_alive", holder=alive)
        return GuardArming(False, pid_of(alive), f"a guard watches this night already ({alive})")
    log = files.root / GUARD_LOG
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = (spawn or subprocess.Popen)(
                guard_argv(plan, inventory),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a kill -9 of the night (or its group) misses it
                close_fds=True,  # none of the night's descriptors: its locks stay its own
            )
        finally:
            os.close(fd)
    except OSError as exc:
        files.event("guard_not_armed", why=str(exc))
        return GuardArming(False, None, f"the guard could not start: {exc}")
    files.event("guard_started", pid=proc.pid, log=str(log))
    return GuardArming(True, proc.pid, f"pid {proc.pid}, its log {log}")


def _watching(root: Path, grace_s: float = FINISHING_S) -> str | None:
    """The live guard's note, unless it has acted or ended already and is only exiting: then
    its lock is waited for (`grace_s`), so a resume right after a guard restored production
    gets a guard of its own."""
    end = time.monotonic() + grace_s
    while (alive := live_guard(root)) is not None:
        rec = read_guard(root)
        if rec is None or rec.state in (GuardState.ARMED, GuardState.WAITING):
            return alive
        if time.monotonic() >= end:
            return alive
        time.sleep(0.2)
    return None


def guard_status(root: Path) -> JSONObject | None:
    """`guard.json` with `alive` (a guard holds the lock now) and its lock's note; None when
    no guard was ever armed for this night."""
    rec, alive = read_guard(root), live_guard(root)
    if rec is None and alive is None:
        return None
    doc: JSONObject = rec.to_json() if rec is not None else {}
    return {**doc, "alive": alive is not None, "holder": alive}
