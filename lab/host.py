"""The lab's gateway to the host: commands, mounts, detached process groups, polling."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tpwarden.cluster.durable import atomic_write_bytes
from tpwarden.cluster.errors import LabError


def run(
    argv: Sequence[str],
    *,
    timeout: float = 600,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run a host command (argument list, no shell); return stdout or raise LabError."""
    try:
        proc = subprocess.run(
            list(argv), input=input, capture_output=True, timeout=timeout, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise LabError(f"{' '.join(argv[:3])} ... exited {proc.returncode}: " + " | ".join(tail))
    return proc.stdout.decode(errors="replace")


def mountpoints() -> set[str]:
    """Mount points in this mount namespace (from /proc/self/mountinfo)."""
    out: set[str] = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split(" ")[4]
        out.add(field.encode().decode("unicode_escape"))
    return out


def is_mounted(path: Path) -> bool:
    return str(path) in mountpoints()


def mount(fstype: str, source: str, target: Path, options: str) -> None:
    if is_mounted(target):
        return
    target.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", fstype, "-o", options, source, str(target)])


def umount(target: Path) -> None:
    """Unmount ``target`` (every stacked mount on it); absent or unmounted is fine."""
    for _ in range(8):
        if not is_mounted(target):
            return
        try:
            run(["umount", str(target)], timeout=60)
        except LabError:
            run(["umount", "-l", str(target)], timeout=60)
    raise LabError(f"{target} is still mounted")


def start_detached(
    argv: Sequence[str],
    log: Path,
    pidfile: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in its own session/process group, output to ``log``; write its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=cwd,
            )
        except OSError as exc:
            raise LabError(f"cannot start {argv[0]}: {exc}") from exc
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def read_pid(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` if that process is alive and leads its own session, else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        if os.getsid(pid) != pid:
            return None  # pid reused by something that is not ours
    except ProcessLookupError:
        return None
    return pid


def _reap(pid: int) -> None:
    try:  # our own child (same Python process started it): collect its exit status
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def group_alive(pgid: int) -> bool:
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader with no other members still "exists"; check /proc for live members
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop_group(pidfile: Path, grace_s: float, first_signal: int = signal.SIGTERM) -> None:
    """Signal the group led by the pid in ``pidfile``, wait ``grace_s``, then SIGKILL it."""
    pid = read_pid(pidfile)
    if pid is not None:
        try:
            os.kill(pid, first_signal)
        except ProcessLookupError:
            pass
        if not wait_for(lambda: not group_alive(pid), grace_s, 0.2):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if not wait_for(lambda: not group_alive(pid), 10, 0.2):
                raise LabError(f"process group {pid} survived SIGKILL")
    pidfile.unlink(missing_ok=True)


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    interval_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout_s`` passes (False)."""
    deadline = clock() + timeout_s
    while True:
        if predicate():
            return True
        if clock() >= deadline:
            return False
        time.sleep(interval_s)


def tcp_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """`durable.atomic_write_bytes`, world-readable by default: the lab's files are read by
    its machines and containers as other users."""
    atomic_write_bytes(path, data.encode() if isinstance(data, str) else data, mode=mode)


def stop_lock_holder(lockfile: Path, grace_s: float) -> int | None:
    """Stop the process that holds ``lockfile`` (a flock whose file starts ``pid=N``).

    Returns the pid that was stopped, or None when nobody held the lock. SIGTERM first (the
    watchdog records ``daemon_stop`` and releases its lock), SIGKILL after ``grace_s``.
    """
    if not lockfile.is_file():
        return None
    with open(lockfile, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: somebody runs
        else:
            return None
        head = f.read(64).decode(errors="replace")
    match = re.match(r"pid=(\d+)", head)
    if not match:
        raise LabError(f"{lockfile} is held by a process that did not record its pid")
    pid = int(match.group(1))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return pid
        if wait_for(lambda: not _alive(pid), grace_s if sig == signal.SIGTERM else 10, 0.2):
            return pid
    raise LabError(f"process {pid} (holder of {lockfile}) survived SIGKILL")


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


ENGINE_PROCESSES = ("dockerd", "containerd")  # runc, which sets a container's rlimits, is theirs
_LIMIT_ROWS = {"Max locked memory": "memlock", "Max open files": "nofile"}


def parse_hard_limits(text: str) -> dict[str, int]:
    """The hard memlock and nofile limits in a ``/proc/PID/limits`` text; -1 is unlimited."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        for row, name in _LIMIT_ROWS.items():
            if line.startswith(row):
                hard = line[len(row) :].split()[1]
                found[name] = -1 if hard == "unlimited" else int(hard)
    return found


def engine_hard_limits(proc: Path = Path("/proc")) -> dict[str, int]:
    """The hard memlock/nofile limits the host's container engine can give a container.

    Without CAP_SYS_RESOURCE (a sandboxed host), runc cannot set a container's limit above the
    engine's own hard limit ("error setting rlimit type 8: operation not permitted"); with it,
    these are just what the engine was started with. The lowest over the engine's processes;
    this process's own limits where none is found."""
    import resource  # deferred: only the lab inventory asks

    own = {
        name: resource.getrlimit(res)[1]
        for name, res in (("memlock", resource.RLIMIT_MEMLOCK), ("nofile", resource.RLIMIT_NOFILE))
    }
    limits = {k: (-1 if v == resource.RLIM_INFINITY else v) for k, v in own.items()}
    engines = []
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ENGINE_PROCESSES:
                engines.append(parse_hard_limits((comm.parent / "limits").read_text()))
        except OSError:  # the process ended while we looked
            continue
    if engines:
        limits = {
            name: min(
                (e[name] for e in engines if name in e),
                key=lambda v: (v == -1, v),
                default=limits[name],
            )
            for name in limits
        }
    return limits
