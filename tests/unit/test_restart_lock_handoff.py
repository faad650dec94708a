"""The cluster restart lock outlives a watchdog killed with -9 mid-restart, until its restart job
ends: real processes, real flock. Without it the next daemon saw the job's stopped containers
as a failed boot and restarted a second time (stop 56's CI: `test_kill_9_mid_restart_...`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tpwarden.cluster.operator_lock import lock_holder

# The daemon's side, in a process of its own that the test kills: the cluster restart lock,
# then `ControllerActuator.restart` with the lock's descriptor handed on, as `daemon_restart`
# does. Its spawn starts JOB (standing in for `python -m tpwarden.watchdog.restart_job`) with
# everything else the actuator asks for, pass_fds included.
DAEMON = """
import subprocess, sys, types
from tpwarden.cluster.operator_lock import FileLock
from tpwarden.watchdog.actuator import ControllerActuator
lock_path, applied, job = sys.argv[1:4]
lock = FileLock(lock_path)
lock.acquire("restart_id=r1")
spawn = lambda argv, **kw: subprocess.Popen([sys.executable, job], **kw)
spec = types.SimpleNamespace(nodes=[], source_file=None)
act = ControllerActuator(spec, applied_path=applied, controller=object(), spawn=spawn)
act.restart("hang", {}, keep_fds=(lock.fileno(),))
"""

# The restart job: says it runs, applies until told to finish, prints its one result line.
JOB = """
import json, os, pathlib, sys, time
here = pathlib.Path(__file__).parent
(here / "job.pid").write_text(str(os.getpid()))
while not (here / "finish").exists():
    time.sleep(0.05)
print(json.dumps({"ok": True}))
"""


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"not {what} after {timeout_s:g}s"
        time.sleep(0.05)


def test_the_lock_is_held_until_the_job_ends_though_its_daemon_died(tmp_path: Path) -> None:
    lock_path = str(tmp_path / "cluster-restart.lock")
    (tmp_path / "daemon.py").write_text(DAEMON)
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "applied.json").write_text("{}")
    argv = [sys.executable, str(tmp_path / "daemon.py"), lock_path,
            str(tmp_path / "applied.json"), str(tmp_path / "job.py")]  # fmt: skip
    daemon = subprocess.Popen(argv)
    try:
        _until(lambda: (tmp_path / "job.pid").exists(), "the job started")
        assert "restart_id=r1" in (lock_holder(lock_path) or "")
        daemon.send_signal(signal.SIGKILL)
        assert daemon.wait(timeout=10) == -signal.SIGKILL
        # the daemon is gone; its job still applies the restart, and holds the lock meanwhile
        time.sleep(0.3)
        assert "restart_id=r1" in (lock_holder(lock_path) or ""), "freed with the daemon"
        (tmp_path / "finish").touch()
        _until(lambda: lock_holder(lock_path) is None, "the lock free once the job ended")
    finally:
        (tmp_path / "finish").touch()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    job = int((tmp_path / "job.pid").read_text())
    _until(lambda: not _running(job), "the job gone")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie has ended (its descriptors are closed)
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
