"""Process facts from the host's /proc: state, wchan, threads, CPU time, RSS (issue 32).

The parsers are pure (text of /proc/PID/stat, status and wchan in, a `ProcFacts` out) and are
tested on real files captured from a Linux host (tests/fixtures/proc/, README there);
`read_proc` is the one reader of /proc and `descendants` finds a container's processes from its
init PID. Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject

STATE_NAMES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep (uninterruptible)",
    "T": "stopped",
    "t": "tracing stop",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
    "P": "parked",
}


class ProcGone(Exception):
    """The process is not there (any more)."""


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat this package uses (man 5 proc numbering in comments)."""

    pid: int
    comm: str
    state: str  # (3)
    ppid: int  # (4)
    cpu_ticks: int  # utime (14) + stime (15), in clock ticks
    threads: int  # (20)
    start_ticks: int  # (22) since boot: tells a PID reused by another process
    rss_pages: int  # (24)


@dataclass(frozen=True)
class ProcFacts:
    pid: int
    comm: str
    state: str
    state_name: str
    ppid: int
    wchan: str | None  # None: running, or the kernel hides it
    threads: int
    cpu_s: float  # utime + stime
    rss_bytes: int
    start_ticks: int

    def to_json(self) -> JSONObject:
        return asdict(self)


def parse_stat(text: str) -> Stat:
    """/proc/PID/stat. The command name is in parentheses and may hold spaces and ')' itself:
    the fields start after the LAST ')'."""
    head, sep, tail = text.strip().rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = tail.split()
    if not sep or len(fields) < 22:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    # fields[0] is field (3), so field (n) is fields[n - 3]
    return Stat(
        pid=int(pid_text),
        comm=comm,
        state=fields[0],
        ppid=int(fields[1]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
        threads=int(fields[17]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
    )


def parse_status(text: str) -> dict[str, str]:
    """/proc/PID/status as ``{key: value}`` (values stripped, units kept)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_wchan(text: str) -> str | None:
    """/proc/PID/wchan: the kernel function a sleeping task waits in; "0" (or nothing) when it
    runs or the kernel does not tell."""
    value = text.strip()
    return None if value in ("", "0") else value


def facts_from(
    stat_text: str, status_text: str, wchan_text: str, *, clk_tck: int = 100, page: int = 4096
) -> ProcFacts:
    """One process's facts from its three /proc files. status's VmRSS (kB) wins over stat's
    page count when present (a zombie has none: then 0)."""
    stat = parse_stat(stat_text)
    status = parse_status(status_text)
    rss = stat.rss_pages * page
    if "VmRSS" in status:
        rss = int(status["VmRSS"].split()[0]) * 1024
    threads = int(status.get("Threads", stat.threads))
    return ProcFacts(
        pid=stat.pid,
        comm=stat.comm,
        state=stat.state,
        state_name=STATE_NAMES.get(stat.state, "unknown"),
        ppid=stat.ppid,
        wchan=parse_wchan(wchan_text),
        threads=threads,
        cpu_s=stat.cpu_ticks / clk_tck,
        rss_bytes=rss,
        start_ticks=stat.start_ticks,
    )


def read_proc(pid: int, root: str | Path = "/proc") -> ProcFacts:
    """The facts of `pid` from ``root`` (the host's /proc). Raises ProcGone when it exited."""
    base = Path(root) / str(pid)
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcGone(f"process {pid} is gone") from e
    try:
        wchan = (base / "wchan").read_text()
    except OSError:  # hidden by the kernel's settings: not a reason to lose the rest
        wchan = ""
    return facts_from(stat, status, wchan, clk_tck=_sysconf("SC_CLK_TCK", 100))


def _sysconf(name: str, default: int) -> int:
    try:
        return int(os.sysconf(name))
    except (ValueError, OSError):
        return default


def parent_map(root: str | Path = "/proc") -> dict[int, int]:
    """pid -> ppid of every process readable under ``root`` (races with exits are skipped)."""
    out: dict[int, int] = {}
    for entry in os.listdir(root):
        if not entry.isdigit():
            continue
        try:
            stat = parse_stat((Path(root) / entry / "stat").read_text())
        except (OSError, ValueError):
            continue
        out[stat.pid] = stat.ppid
    return out


def descendants(parents: Mapping[int, int], roots: Iterable[int]) -> list[int]:
    """``roots`` and every process below them, in PID order (a container's processes from its
    init PID, as the host sees them)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return sorted(found)


def cpu_delta(before: ProcFacts, after: ProcFacts) -> float | None:
    """CPU seconds the process used between two readings; None when the PID now names a
    different process (it was reused: another start time)."""
    if before.pid != after.pid or before.start_ticks != after.start_ticks:
        return None
    return round(after.cpu_s - before.cpu_s, 3)
