"""A node's part of an incident dossier: `collector.pyz dossier --pid PID ...` (issue 32).

Given the host PIDs of the serving container's init process (Docker's ``State.Pid``), it finds
every process below them in the host's /proc and returns, each part bounded:

* process facts (state, wchan, threads, RSS), the CPU time each used over ``window_s``, and
  whether the cgroup freezer holds it (``frozen``: True/False, None when unreadable);
* a `py-spy dump` of each (at most ``MAX_DUMPS``, in parallel), ``--nonblocking`` for a process
  that is not running or sleeping, or is frozen (a blocking dump of a stopped process fails, one
  of a process the v1 freezer holds never answers: tests/fixtures/pyspy/README.md);
* the kernel log events (Xid, NVRM, OOM) of the last ``since_s`` seconds;

while the collector adds the NVML facts. A part that cannot be had (no py-spy, no journalctl, a
PID this node's /proc does not show) is a line in ``findings``, never an error. Standard library
only: this runs on the nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.node.freezer import read_frozen
from tpwarden.node.kernlog import read_kernel_log
from tpwarden.node.procfacts import (
    ProcFacts,
    ProcGone,
    cpu_delta,
    descendants,
    parent_map,
    read_proc,
)
from tpwarden.node.pyspy import find_pyspy, run_dump

WINDOW_S = 1.5  # CPU-time probe window
MAX_PROCESSES = 64
MAX_DUMPS = 8
NOT_PYTHON = frozenset({"sh", "bash", "dash", "tini", "docker-init", "dumb-init", "sleep"})
BLOCKING_STATES = frozenset({"R", "S"})


def _sample(pids: Sequence[int], root: str) -> dict[int, ProcFacts]:
    out = {}
    for pid in pids:
        try:
            out[pid] = read_proc(pid, root)
        except (ProcGone, OSError, ValueError):
            continue
    return out


def _no_kernel_log(since_s: float) -> JSONObject:
    return {"source": None, "events": [], "reason": None}


def find_processes(
    roots: Sequence[int], proc_root: str, findings: list[str]
) -> tuple[list[int], list[int]]:
    """The roots' process trees as this node's /proc shows them (capped), and the roots it
    does not show."""
    pids = descendants(parent_map(proc_root), roots)
    missing = [r for r in roots if r not in pids]
    for r in missing:
        findings.append(f"process {r} not in this node's /proc (exited, or another PID space)")
    if len(pids) > MAX_PROCESSES:
        findings.append(f"{len(pids)} processes; facts of the first {MAX_PROCESSES} only")
    return pids[:MAX_PROCESSES], missing


def _dump_targets(facts: dict[int, ProcFacts]) -> list[ProcFacts]:
    """The processes worth a py-spy dump: not a shell or an init, most threads first."""
    candidates = [f for f in facts.values() if f.comm not in NOT_PYTHON and f.state != "Z"]
    return sorted(candidates, key=lambda f: (-f.threads, f.pid))[:MAX_DUMPS]


def _dumps(
    binary: str | None,
    facts: dict[int, ProcFacts],
    frozen: dict[int, bool | None],
    timeout_s: float,
    findings: list[str],
    all_frozen: bool = False,
) -> dict[int, JSONObject]:
    if binary is None:
        findings.append("py-spy: not installed on this node (no stacks)")
        return {}
    targets = _dump_targets(facts)
    pool = ThreadPoolExecutor(max_workers=max(1, len(targets)), thread_name_prefix="pyspy")
    futures = {
        f.pid: pool.submit(
            run_dump,
            binary,
            f.pid,
            nonblocking=(
                all_frozen
                or f.state not in BLOCKING_STATES
                or f.wchan == "do_freezer_trap"
                or frozen.get(f.pid) is True
            ),
            timeout_s=timeout_s,
        )
        for f in targets
    }
    wait(futures.values(), timeout=timeout_s + 1.0)
    pool.shutdown(wait=False, cancel_futures=True)
    return {pid: fut.result() for pid, fut in futures.items() if fut.done()}


def collect_dossier(
    roots: Sequence[int],
    *,
    window_s: float = WINDOW_S,
    since_s: float = 600.0,
    pyspy: Sequence[str] = (),
    pyspy_timeout_s: float = 3.0,
    proc_root: str = "/proc",
    cgroup_root: str = "/sys/fs/cgroup",
    sleep: Callable[[float], None] = time.sleep,
    kernel_log: Callable[[float], JSONObject] | None = read_kernel_log,
    all_frozen: bool = False,
) -> JSONObject:
    """The node's dossier part as JSON (see the module doc). Its time is about
    ``window_s + pyspy_timeout_s``: the kernel log is read while the window runs. With
    ``all_frozen`` (the engine says the container is paused) every dump is nonblocking; with no
    ``kernel_log`` none is read (a diagnostic container has no host journal)."""
    findings: list[str] = []
    started = time.monotonic()
    pids, missing = find_processes(roots, proc_root, findings)
    read_kernel = kernel_log or _no_kernel_log
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernlog") as side:
        kernel = side.submit(read_kernel, since_s)
        before = _sample(pids, proc_root)
        if pids:  # nothing to watch: no window to wait out
            sleep(window_s)
        after = _sample(pids, proc_root)
        frozen = {pid: read_frozen(pid, proc_root, cgroup_root) for pid in after}
        if all_frozen:  # the engine's word where the freezer cannot be read from here
            frozen = {pid: True if f is None else f for pid, f in frozen.items()}
        stacks = _dumps(
            find_pyspy(pyspy), after, frozen, pyspy_timeout_s, findings, all_frozen=all_frozen
        )
        kernel_doc = kernel.result()
    if kernel_doc.get("reason"):
        findings.append(f"kernel log: {kernel_doc['reason']}")
    processes = []
    for pid, fact in after.items():
        doc = fact.to_json()
        doc["cpu_delta_s"] = cpu_delta(before[pid], fact) if pid in before else None
        doc["frozen"] = frozen.get(pid)
        doc["pyspy"] = stacks.get(pid)
        processes.append(doc)
    return {
        "roots": list(roots),
        "missing_roots": missing,
        "window_s": window_s,
        "processes": processes,
        "kernel": kernel_doc,
        "findings": findings,
        "proc_root": str(Path(proc_root)),
        "took_s": round(time.monotonic() - started, 3),
    }
