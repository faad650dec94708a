"""Who else runs on this node: the ledger's state sample (`collector state`, issue 53).

Every process outside the serving containers (and outside tpwarden's own tools), its CPU over a
window and its resident memory, by psutil where the node's python3 has it and from /proc
otherwise (`procfacts`, the same arithmetic); GPU users by the device files they hold
(`/dev/nvidia*`). A process belongs to a container when its cgroup path names the container's
ID (`docker-<id>.scope`, `/docker/<id>`): PIDs are not compared, so a container the node cannot
see (its engine elsewhere) never hides a process of the node.

Pure: `summarize` (two snapshots -> co-tenants grouped by command name). Readers: `snapshot`,
`gpu_holders`. Standard library only at import time: this runs on the nodes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.node.procfacts import ProcGone, read_proc

OWN_NAME = "tpwarden"  # what tpwarden's programs, modules and install folder are named after


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    cpu_s: float
    rss_bytes: int
    start: float  # start time (ticks or seconds): a reused PID is another process
    cgroup: str


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _argv(pid: int, root: str) -> tuple[str, ...]:
    try:
        with open(f"{root}/{pid}/cmdline", "rb") as f:
            return tuple(a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a)
    except OSError:
        return ()


def _snapshot_proc(root: str) -> dict[int, Proc]:
    out: dict[int, Proc] = {}
    for name in os.listdir(root):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            f = read_proc(pid, root)
        except (ProcGone, OSError, ValueError):
            continue
        cg = _read(f"{root}/{pid}/cgroup")
        out[pid] = Proc(pid, f.ppid, f.comm, _argv(pid, root), f.cpu_s, f.rss_bytes,
                        float(f.start_ticks), cg)  # fmt: skip
    return out


def _snapshot_psutil(root: str) -> dict[int, Proc] | None:
    try:
        import psutil  # deferred: optional on the node (a C extension the zipapp cannot carry)
    except ImportError:
        return None
    out: dict[int, Proc] = {}
    attrs = ["pid", "ppid", "name", "cmdline", "cpu_times", "memory_info", "create_time"]
    for p in psutil.process_iter(attrs):
        info = p.info
        times, mem = info.get("cpu_times"), info.get("memory_info")
        if times is None or mem is None:
            continue
        pid = int(info["pid"])
        out[pid] = Proc(
            pid, int(info.get("ppid") or 0), str(info.get("name") or "?"),
            tuple(info.get("cmdline") or ()), float(times.user + times.system), int(mem.rss),
            float(info.get("create_time") or 0.0), _read(f"{root}/{pid}/cgroup"),
        )  # fmt: skip
    return out


def snapshot(root: str = "/proc") -> tuple[dict[int, Proc], str]:
    """Every readable process now, and the source ("psutil" or "/proc")."""
    got = _snapshot_psutil(root) if root == "/proc" else None
    if got is not None:
        return got, "psutil"
    return _snapshot_proc(root), "/proc"


def is_own_tool(argv: Sequence[str]) -> bool:
    """Whether a command line is one of tpwarden's own tools (the thermal agent, the collector,
    a node-side watchdog): the program, or the script or module a Python runs, is named
    `tpwarden` or `tpwarden-*` (`tpwarden-collector.pyz`; `-m tpwarden.node.collector`) or lies
    under a `tpwarden` folder (the node prefix, `/opt/tpwarden`). Only the program counts: a
    co-tenant whose arguments or whose folder merely contain the word is still a co-tenant."""
    if not argv:
        return False
    if _own_path(argv[0]):
        return True
    if not os.path.basename(argv[0]).startswith("python"):
        return False
    rest = list(argv[1:])
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        rest = rest[2:] if rest[0] in ("-W", "-X") else rest[1:]  # an option and its value
    if rest[:1] == ["-m"]:
        return len(rest) > 1 and (rest[1] == OWN_NAME or rest[1].startswith(OWN_NAME + "."))
    return bool(rest) and not rest[0].startswith("-") and _own_path(rest[0])


def _own_path(path: str) -> bool:
    parts = Path(path).parts
    name = parts[-1] if parts else ""
    return name == OWN_NAME or name.startswith(OWN_NAME + "-") or OWN_NAME in parts[:-1]


def in_containers(cgroup: str, container_ids: Iterable[str]) -> bool:
    """Whether a process's cgroup text places it in one of these containers (full IDs)."""
    return any(cid and cid in cgroup for cid in container_ids)


def _chain(pid: int, procs: Mapping[int, Proc]) -> set[int]:
    seen: set[int] = set()
    while pid and pid not in seen:
        seen.add(pid)
        p = procs.get(pid)
        pid = p.ppid if p is not None else 0
    return seen


@dataclass(frozen=True, kw_only=True)
class Cotenant:
    comm: str
    procs: int
    cpu_pct: float
    rss_mib: float
    pids: tuple[int, ...]
    argv: tuple[str, ...]  # the busiest one's, as read (the control side redacts it)

    def to_json(self) -> JSONObject:
        return {"comm": self.comm, "procs": self.procs, "cpu_pct": self.cpu_pct,
                "rss_mib": self.rss_mib, "pids": list(self.pids), "argv": list(self.argv)}  # fmt: skip


def summarize(
    before: Mapping[int, Proc],
    after: Mapping[int, Proc],
    window_s: float,
    *,
    exclude_containers: Sequence[str] = (),
    self_pid: int = 0,
    min_cpu_pct: float = 5.0,
    min_rss_mib: float = 1024.0,
) -> list[Cotenant]:
    """Processes outside the given containers, outside this collector's own chain and outside
    tpwarden's tools, grouped by command name; a group is kept when its CPU over the window
    reaches `min_cpu_pct` (percent of one core) or its memory `min_rss_mib`. Busiest first."""
    mine = _chain(self_pid, after) if self_pid else set()
    groups: dict[str, list[tuple[Proc, float]]] = {}
    for pid, p in after.items():
        if pid in mine or pid == 2 or p.ppid == 2 or not p.argv:  # kernel threads: no argv
            continue
        if in_containers(p.cgroup, exclude_containers) or is_own_tool(p.argv):
            continue
        old = before.get(pid)
        used = p.cpu_s - old.cpu_s if old is not None and old.start == p.start else p.cpu_s
        pct = 100.0 * max(0.0, used) / window_s if window_s > 0 else 0.0
        groups.setdefault(p.comm, []).append((p, pct))
    out = []
    for comm, members in groups.items():
        cpu = round(sum(pct for _, pct in members), 1)
        rss = round(sum(p.rss_bytes for p, _ in members) / 2**20, 1)
        if cpu < min_cpu_pct and rss < min_rss_mib:
            continue
        busiest = max(members, key=lambda m: m[1])[0]
        out.append(Cotenant(comm=comm, procs=len(members), cpu_pct=cpu, rss_mib=rss,
                            pids=tuple(sorted(p.pid for p, _ in members)),
                            argv=busiest.argv[:32]))  # fmt: skip
    return sorted(out, key=lambda c: (-c.cpu_pct, c.comm))


def gpu_holders(root: str = "/proc") -> set[int]:
    """PIDs holding a `/dev/nvidia*` device open (reading other users' fds needs root)."""
    pids: set[int] = set()
    for name in os.listdir(root):
        if not name.isdigit():
            continue
        fd_dir = Path(root) / name / "fd"
        try:
            for fd in os.listdir(fd_dir):
                if os.readlink(fd_dir / fd).startswith("/dev/nvidia"):
                    pids.add(int(name))
                    break
        except OSError:
            continue
    return pids


def gpu_users(
    holders: Iterable[int], procs: Mapping[int, Proc], exclude_containers: Sequence[str]
) -> JSONObject:
    """GPU holders split into the serving containers' and the others (by command name)."""
    serving, others = 0, set()
    for pid in holders:
        p = procs.get(pid)
        if p is None:
            continue
        if in_containers(p.cgroup, exclude_containers):
            serving += 1
        else:
            others.add(p.comm)
    return {"serving_procs": serving, "others": sorted(others)}
