"""`lab down` stops the watchdog that watches the lab, found through its state-dir lock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tpwarden.lab.host import stop_lock_holder

HOLDER = """
import sys, time
from tpwarden.cluster.operator_lock import FileLock
lock = FileLock(sys.argv[1]); lock.acquire("probe_url=http://127.0.0.1:1/v1")
print("held", flush=True)
time.sleep(120)
"""

IGNORES_TERM = """
import signal, sys, time
from tpwarden.cluster.operator_lock import FileLock
signal.signal(signal.SIGTERM, signal.SIG_IGN)
lock = FileLock(sys.argv[1]); lock.acquire("")
print("held", flush=True)
time.sleep(120)
"""


def _start(code: str, lock: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_nobody_holds_the_lock(tmp_path: Path) -> None:
    assert stop_lock_holder(tmp_path / "missing.lock", 1) is None
    stale = tmp_path / "watchdog.lock"
    stale.write_text("pid=1 left by a daemon that exited\n")  # file kept, lock released
    assert stop_lock_holder(stale, 1) is None


def test_the_holder_is_stopped_and_the_lock_freed(tmp_path: Path) -> None:
    lock = tmp_path / "watchdog.lock"
    proc = _start(HOLDER, lock)
    t0 = time.monotonic()
    assert stop_lock_holder(lock, 10) == proc.pid
    assert not Path(f"/proc/{proc.pid}").exists()  # gone (and reaped: no zombie left)
    assert time.monotonic() - t0 < 5  # SIGTERM was enough: no wait for the grace
    assert stop_lock_holder(lock, 1) is None


def test_a_holder_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    lock = tmp_path / "watchdog.lock"
    proc = _start(IGNORES_TERM, lock)
    t0 = time.monotonic()
    assert stop_lock_holder(lock, 0.5) == proc.pid
    assert not Path(f"/proc/{proc.pid}").exists()
    assert 0.5 <= time.monotonic() - t0 < 10  # waited out the grace, then SIGKILL
