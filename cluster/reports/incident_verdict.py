"""Which rank hung, and where: the pure verdict over an incident dossier (issue 32).

A dossier (`tpwarden.cluster.reports.incident`) holds, per node: its rank, the serving container as the
engine reports it (state, exit code, OOM flag), and what the node's collector saw (process facts
from /proc with the CPU time used over the probe window, py-spy stacks, kernel log events) or the
error that stood in for it. `verdict(dossier)` weighs each node's facts, strongest first:

* 3 (decisive): no serving container, container exited/paused, a worker that its log says
  died by a signal that is a cause (SIGILL, SIGKILL, SIGSEGV...), a process stopped (T), frozen
  by the cgroup freezer (its freezer state, or a freezer wchan), a zombie, an NVIDIA Xid, the
  OOM killer;
* 2: a process in D state, another NVRM error, the node did not answer;
* 1: no CPU progress over the window while another rank waits in a collective.

The suspect's facts end with where the other ranks wait ("node1, node2, node4 wait in
all_reduce (...)"), a torch.distributed collective before a message-queue wait.

One node with the highest weight is the suspect; several, or none, is "no single suspect" with
why. When several ranks died by the same signal (every rank's SIGILL on a CPU that lacks an
instruction), that signal, its meaning and when it came are the summary. The facts it used are
in the result, so an operator can check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tpwarden.cluster.boot.crash import CrashPhase
from tpwarden.node.kernlog import xid_name

FROZEN_WCHANS = ("__refrigerator", "do_freezer_trap")  # cgroup v1 / v2 freezer (docker pause)
DECISIVE, STRONG, WEAK = 3, 2, 1


SUMMARY_OWN = 2  # the suspect's facts a summary line names


@dataclass(frozen=True)
class Finding:
    node: str
    weight: int
    text: str


@dataclass(frozen=True)
class Verdict:
    suspect: str | None  # the node
    rank: int | None
    summary: str  # "suspect: node3 (rank 2): ..." or "no single suspect: ..."
    facts: list[str] = field(default_factory=list)  # what the summary rests on
    findings: list[dict[str, Any]] = field(default_factory=list)  # every node's, strongest first

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _container_findings(name: str, node: Mapping[str, Any]) -> list[Finding]:
    c = node.get("container")
    if node.get("error"):
        return []  # the node did not answer: nothing is known of its container
    if c is None:
        return [Finding(name, DECISIVE, "no serving container")]
    state = c.get("state")
    if state in ("exited", "dead"):
        oom = ", OOM-killed" if c.get("oom_killed") else ""
        return [Finding(name, DECISIVE, f"container {state} (code {c.get('exit_code')}{oom})")]
    if state == "paused":
        return [Finding(name, DECISIVE, "container paused (all its processes frozen)")]
    return []


def _crash_findings(name: str, node: Mapping[str, Any]) -> list[Finding]:
    """The workers an exited container's log says died: decisive when by a signal that is a
    cause (the line names the rank, the signal and when)."""
    crash = node.get("crash") or {}
    if not crash.get("deaths"):
        return []
    return [Finding(name, DECISIVE if crash.get("named") else STRONG, str(crash["line"]))]


def _process_findings(
    name: str, procs: list[Mapping[str, Any]], pid_space: str = "host"
) -> list[Finding]:
    out = []
    where = " in the container" if pid_space == "container" else ""
    for p in procs:
        who = f"process {p.get('pid')}{where} ({p.get('comm')})"
        state, wchan = p.get("state"), p.get("wchan")
        if state == "T" or state == "t":
            out.append(Finding(name, DECISIVE, f"{who} stopped ({state})"))
        elif p.get("frozen") is True:
            at = f" at {wchan}" if wchan else ""
            out.append(Finding(name, DECISIVE, f"{who} frozen by the cgroup freezer ({state}{at})"))
        elif wchan in FROZEN_WCHANS:
            out.append(Finding(name, DECISIVE, f"{who} frozen ({state} at {wchan})"))
        elif state == "Z":
            out.append(Finding(name, DECISIVE, f"{who} is a zombie (Z)"))
        elif state == "D":
            out.append(Finding(name, STRONG, f"{who} in D state at {wchan or 'unknown'}"))
    return out


def _kernel_findings(name: str, events: list[Mapping[str, Any]]) -> list[Finding]:
    out = []
    for e in events:
        if e.get("kind") == "xid" and e.get("xid") is not None:
            what = xid_name(int(e["xid"])) or e.get("message") or ""
            pid = f", pid {e['pid']}" if e.get("pid") else ""
            out.append(Finding(name, DECISIVE, f"Xid {e['xid']} ({what}{pid})"))
        elif e.get("kind") == "oom":
            out.append(Finding(name, DECISIVE, f"OOM killer: {e.get('line', '')[:120]}"))
        elif e.get("kind") == "nvrm":
            out.append(Finding(name, STRONG, f"NVRM: {e.get('message', '')[:120]}"))
    return out


def _processes(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    collected = node.get("collected") or {}
    return list(collected.get("processes") or [])


def _frame_rank(frame: str) -> int:
    """0: a torch.distributed collective, where the ranks meet in lockstep (a rank that does not
    arrive holds the others there); 1: another wait for peers, such as vLLM's shared-memory
    queues, where an idle worker waits for the scheduler's next step and the engine core for
    its workers' answers (the real engine's stacks: tests/fixtures/pyspy/vllm-*)."""
    return 0 if "torch/distributed/" in frame else 1


def waiting_frame(node: Mapping[str, Any]) -> str | None:
    """The frame the node's processes wait for their peers in, if any: a collective first."""
    frames = [str(f) for p in _processes(node) if (f := (p.get("pyspy") or {}).get("waiting_in"))]
    return min(frames, key=_frame_rank) if frames else None


def no_progress(node: Mapping[str, Any]) -> bool:
    """Every serving process measured used no CPU time over the window."""
    deltas = [p.get("cpu_delta_s") for p in _processes(node)]
    return bool(deltas) and all(d is not None and d <= 0.0 for d in deltas)


def node_findings(name: str, node: Mapping[str, Any]) -> list[Finding]:
    """Everything that makes ``name`` a suspect, strongest first."""
    out = _container_findings(name, node) + _crash_findings(name, node)
    if node.get("error"):
        out.append(Finding(name, STRONG, f"node did not answer: {node['error']}"))
    collected = node.get("collected") or {}
    pid_space = str(collected.get("pid_namespace") or "host")
    out += _process_findings(name, _processes(node), pid_space)
    out += _kernel_findings(name, list((collected.get("kernel") or {}).get("events") or []))
    return sorted(out, key=lambda f: -f.weight)


def _others_waiting(
    nodes: Mapping[str, Mapping[str, Any]], suspect: str
) -> list[tuple[str, list[str]]]:
    """Where the other nodes' ranks wait: (frame, nodes), a collective first, then the frame
    most nodes wait in."""
    groups: dict[str, list[str]] = {}
    for name, node in nodes.items():
        if name != suspect and (frame := waiting_frame(node)) is not None:
            groups.setdefault(frame, []).append(name)
    return sorted(groups.items(), key=lambda g: (_frame_rank(g[0]), -len(g[1]), g[0]))


def _waiting_facts(groups: list[tuple[str, list[str]]]) -> list[str]:
    """'node1, node2, node4 wait in all_reduce (...)': a line per frame."""
    return [
        f"{', '.join(names)} {'waits' if len(names) == 1 else 'wait'} in {frame}"
        for frame, names in groups
    ]


def _with_progress_findings(
    nodes: Mapping[str, Mapping[str, Any]], findings: list[Finding]
) -> list[Finding]:
    """Adds the weak finding: a rank not in a collective that made no CPU progress, while
    another rank waits in one."""
    for name, node in nodes.items():
        if waiting_frame(node) is None and no_progress(node) and _others_waiting(nodes, name):
            findings.append(Finding(name, WEAK, "no CPU progress over the window"))
    return findings


def _first_exited(nodes: Mapping[str, Mapping[str, Any]], leaders: list[str]) -> str | None:
    """When every leading node's container exited (a dead rank takes its peers down after a
    while), the one that exited first, by more than a second; else None."""
    ends = []
    for name in leaders:
        c = nodes[name].get("container") or {}
        if c.get("state") not in ("exited", "dead") or c.get("finished_at_unix_s") is None:
            return None
        ends.append((float(c["finished_at_unix_s"]), name))
    ends.sort()
    return ends[0][1] if ends[1][0] - ends[0][0] > 1.0 else None


def _only_killed(nodes: Mapping[str, Mapping[str, Any]], leaders: list[str]) -> str | None:
    """The one leading node whose rank was killed (container gone, or exited 137 = SIGKILL)
    while the other leaders' containers exited on their own (another code)."""
    killed: list[str] = []
    others: list[str] = []
    for name in leaders:
        node = nodes[name]
        c = node.get("container")
        if node.get("error") or (c is not None and c.get("state") not in ("exited", "dead")):
            return None
        (killed if c is None or c.get("exit_code") == 137 else others).append(name)
    return killed[0] if len(killed) == 1 and others else None


def _named(nodes: Mapping[str, Mapping[str, Any]], leaders: list[str]) -> list[str]:
    """The leading nodes whose log says a rank died by a signal that is a cause."""
    return [n for n in leaders if (nodes[n].get("crash") or {}).get("named")]


def _same_signal(nodes: Mapping[str, Mapping[str, Any]], leaders: list[str]) -> str | None:
    """Several leading nodes' ranks died by one signal that is a cause: the summary names it,
    its meaning and when (the head's log says when, even where its own worker's exit code was
    not logged)."""
    named = _named(nodes, leaders)
    crashes = [nodes[n]["crash"] for n in named]
    if not crashes or len({c["signal"] for c in crashes}) > 1:
        return None
    logs = [nodes[n].get("crash") or {} for n in leaders]
    heads = [c for n, c in zip(leaders, logs, strict=True) if nodes[n].get("role") == "head"]
    known = [c["phase"] for c in heads + logs if c.get("phase") not in (None, "unknown")]
    when = f", {CrashPhase(known[0]).text}" if known else ""
    ranks = ", ".join(f"{n} (rank {nodes[n].get('rank')})" for n in named)
    return (
        f"no single suspect: {len(named)} ranks died by {crashes[0]['signal']} "
        f"({crashes[0]['meaning']}){when}: {ranks}"
    )


def _tiebreak(
    nodes: Mapping[str, Mapping[str, Any]], leaders: list[str]
) -> tuple[str | None, str | None]:
    """Several ranks died: the only one whose log names a signal that is a cause, the one that
    went first, or the only one killed; else none."""
    named = _named(nodes, leaders)
    if len(named) == 1:
        sig = nodes[named[0]]["crash"]["signal"]
        return named[0], f"the only rank whose log says it died by {sig} (of {', '.join(leaders)})"
    first = _first_exited(nodes, leaders)
    if first is not None:
        return first, f"its container exited first (of {', '.join(leaders)})"
    killed = _only_killed(nodes, leaders)
    if killed is not None:
        return killed, f"the only rank killed (of {', '.join(leaders)}); the others exited after"
    return None, None


def verdict(dossier: Mapping[str, Any]) -> Verdict:
    """The suspect of a dossier, or "no single suspect" with why."""
    nodes: Mapping[str, Mapping[str, Any]] = dossier.get("nodes") or {}
    findings: list[Finding] = []
    for name, node in nodes.items():
        findings += node_findings(name, node)
    findings = _with_progress_findings(nodes, findings)
    table = [asdict(f) for f in sorted(findings, key=lambda f: (-f.weight, f.node))]
    if not findings:
        return Verdict(None, None, "no single suspect: no rank stands out", [], table)
    top = max(f.weight for f in findings)
    leaders = sorted({f.node for f in findings if f.weight == top})
    suspect, tiebreak = (leaders[0], None) if len(leaders) == 1 else _tiebreak(nodes, leaders)
    if suspect is None:
        why = "; ".join(f"{f.node}: {f.text}" for f in findings if f.weight == top)
        summary = _same_signal(nodes, leaders) or (
            f"no single suspect: {len(leaders)} ranks stand out ({why})"
        )
        return Verdict(None, None, summary, [], table)
    own = [f.text for f in findings if f.node == suspect] + ([tiebreak] if tiebreak else [])
    waits = _waiting_facts(_others_waiting(nodes, suspect))
    rank = nodes[suspect].get("rank")
    return Verdict(suspect, rank, _summary(suspect, rank, own, waits), own + waits, table)


def _summary(suspect: str, rank: Any, own: list[str], waits: list[str]) -> str:
    """One line for an alert, a status line or a table cell: the suspect's strongest
    `SUMMARY_OWN` facts and where the others wait first; the rest are counted (the dossier
    lists them all: a paused rank has a fact per frozen process)."""
    shown = own[:SUMMARY_OWN] + waits[:1]
    more = len(own) + len(waits) - len(shown)
    tail = [f"+{more} more in the dossier"] if more else []
    return f"suspect: {suspect} (rank {rank}): " + "; ".join(shown + tail)
