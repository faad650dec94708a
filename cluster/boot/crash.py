"""A worker process that died, by which signal, and when: the lines that say so, and the named
cause built from them. Pure; no I/O.

vLLM says a worker died in three forms (reference/vllm.md, real logs in tests/fixtures/real):

* V1's executor: `Worker proc VllmWorker-1 died unexpectedly (exit code: -4), shutting down
  executor.` (the exit code since 0.28-ish; `exit code: None` when the process was not reaped
  yet; before that no exit code at all). The name's number is the worker's global rank.
* V0's: `Worker VllmWorkerProcess pid 6341 died, exit code: -15` (no rank).
* The dying process's own report, when a native crash lets it write one: Python's faulthandler
  (`Fatal Python error: Bus error`) or absl's handler under Ray (`*** SIGSEGV received at
  time=...`); the process prefix says which worker.

An exit code -N is death by signal N (`tpwarden.cluster.signals`). The phase is when it happened:
during boot, on the first request after a healthy boot (the head's log shows "Application
startup complete." and no request answered before the death), or while serving.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.signals import (
    FAULTHANDLER_NAMES,
    Signal,
    from_exitcode,
    signal_by_name,
    signal_by_number,
)
from tpwarden.cluster.vllm.log_prefix import LogLine

LINE_COLUMNS = 80  # `Crash.line()` fits a terminal's default width with its "crash: " label
LINE_LABEL = "crash: "
UNNAMED = "main"  # LogLine.who of a line without a process prefix


class CrashPhase(StrEnum):
    """When the worker died, as far as one log (or a node's logs together) can tell."""

    BOOT = "boot"  # before the server was ready
    AFTER_LOAD = "after_load"  # a worker node's log: loaded its model; the server's state unseen
    AFTER_READY = "after_ready"  # ready, and no request in the log
    FIRST_REQUEST = "first_request"  # ready, no request answered before it, a request failed
    SERVING = "serving"  # requests were answered before it
    UNKNOWN = "unknown"  # the lines show neither the boot nor a request

    @property
    def text(self) -> str:
        """How a report says it: `on the first request after a healthy boot`."""
        return _PHASE_TEXT[self]

    @property
    def short(self) -> str:
        """The same for a one-line report: `on the first request`."""
        return _PHASE_SHORT[self]


_PHASE_TEXT = {
    CrashPhase.BOOT: "during boot",
    CrashPhase.AFTER_LOAD: (
        "after loading its model (a worker node's log does not show the server's requests)"
    ),
    CrashPhase.AFTER_READY: "after a healthy boot, with no request logged",
    CrashPhase.FIRST_REQUEST: "on the first request after a healthy boot",
    CrashPhase.SERVING: "while serving",
    CrashPhase.UNKNOWN: "",
}
_PHASE_SHORT = {
    CrashPhase.BOOT: "during boot",
    CrashPhase.AFTER_LOAD: "after loading its model",
    CrashPhase.AFTER_READY: "after a healthy boot",
    CrashPhase.FIRST_REQUEST: "on the first request",
    CrashPhase.SERVING: "while serving",
    CrashPhase.UNKNOWN: "",
}


@dataclass(frozen=True, kw_only=True)
class WorkerDeath:
    """One worker's death as a line reported it. `exit_code` is Python's `Process.exitcode`
    as logged (-4), None when the line gave none; `signal` the signal that ended it, if known;
    `node` is set when deaths from several nodes' logs are put together."""

    worker: str  # VllmWorker-1, VllmWorkerProcess, RayWorker
    rank: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: Signal | None = None
    node: str | None = None
    line: str = ""

    @property
    def who(self) -> str:
        """`node2 rank 1`, `rank 0`, `VllmWorkerProcess pid 6341`, `the process` (a line
        without a process prefix)."""
        if self.rank is not None:
            head = f"rank {self.rank}"
        elif self.pid is not None:
            head = f"{self.worker} pid {self.pid}"
        else:
            head = "the process" if self.worker == UNNAMED else self.worker
        return f"{self.node} {head}" if self.node else head

    @property
    def how(self) -> str:
        """`died by SIGILL (illegal instruction)`, `exited with code 1`, `died (no exit code
        logged)`."""
        if self.signal is not None:
            return f"died by {self.signal.name} ({self.signal.short})"
        if self.exit_code is not None:
            return f"exited with code {self.exit_code}"
        return "died (no exit code logged)"

    def to_json(self) -> JSONObject:
        return {
            "worker": self.worker,
            "rank": self.rank,
            "pid": self.pid,
            "node": self.node,
            "exit_code": self.exit_code,
            "signal": self.signal.to_json() if self.signal else None,
            "line": self.line,
        }


@dataclass(frozen=True, kw_only=True)
class Crash:
    """The named cause of a server whose workers died: every death seen (log order) and when.
    `lead` is the one a report names first: a death by a signal that is a cause (SIGILL,
    SIGKILL...), else one by any signal, else the first."""

    deaths: tuple[WorkerDeath, ...]
    phase: CrashPhase
    requests_answered: int = 0

    @property
    def lead(self) -> WorkerDeath:
        return next(
            (d for d in self.deaths if d.signal and d.signal.cause),
            next((d for d in self.deaths if d.signal), self.deaths[0]),
        )

    @property
    def signal(self) -> Signal | None:
        return self.lead.signal

    @property
    def named(self) -> bool:
        """A signal that is itself the cause names this crash (SIGTERM and no-code deaths
        leave the cause to the log's exceptions)."""
        return self.signal is not None and self.signal.cause

    def _others(self) -> list[WorkerDeath]:
        lead = self.lead
        return [d for d in self.deaths if d is not lead]

    def line(self, columns: int = LINE_COLUMNS - len(LINE_LABEL)) -> str:
        """One line of at most `columns` characters: `node2 rank 1 died by SIGILL (illegal
        instruction) on the first request`, plus how many other ranks died when it fits."""
        lead = self.lead
        how = lead.how if lead.signal or lead.exit_code is not None else "died (no exit code)"
        text = f"{lead.who} {how}"
        phase = self.phase.short
        if phase and len(text) + 1 + len(phase) <= columns:
            text = f"{text} {phase}"
        more = len(self._others())
        tail = f"; +{more} more" if more else ""
        if tail and len(text) + len(tail) <= columns:
            text += tail
        return text if len(text) <= columns else text[: columns - 1] + "…"

    def describe(self) -> str:
        """The whole cause for `up`, `status` and the dossier: the lead death with its signal's
        meaning and the phase, then the other deaths."""
        lead = self.lead
        if lead.signal is not None:
            text = f"{lead.who} died by {lead.signal.name}: {lead.signal.meaning}"
        else:
            text = f"{lead.who} {lead.how}"
        if self.phase.text:
            text += f", {self.phase.text}"
        if self.phase is CrashPhase.SERVING and self.requests_answered:
            text += f" ({self.requests_answered} requests answered before)"
        others = self._others()
        if others:
            text += "; also " + ", ".join(f"{d.who} ({_brief(d)})" for d in others)
        return text

    def to_json(self) -> JSONObject:
        sig = self.signal
        return {
            "signal": sig.name if sig else None,
            "meaning": sig.meaning if sig else None,
            "named": self.named,
            "phase": self.phase.value,
            "requests_answered": self.requests_answered,
            "line": self.line(),
            "describe": self.describe(),
            "deaths": [d.to_json() for d in self.deaths],
        }


def _brief(d: WorkerDeath) -> str:
    if d.signal is not None:
        return d.signal.name
    return f"code {d.exit_code}" if d.exit_code is not None else "no exit code"


# -- lines ----------------------------------------------------------------------------------
_V1 = re.compile(
    r"Worker proc (?P<worker>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+|None)\))?"
)
_V0 = re.compile(r"Worker (?P<worker>\S+) pid (?P<pid>\d+) died, exit code: (?P<code>-?\d+|None)")
_FAULTHANDLER = re.compile(
    r"^Fatal Python error: (?P<what>" + "|".join(map(re.escape, FAULTHANDLER_NAMES)) + r")\b"
)
_ABSL = re.compile(r"\*\*\* (?P<name>SIG[A-Z]+) received at time=\d+")
_RANK_IN_NAME = re.compile(r"(?:VllmWorker-|Worker_TP|_TP)(?P<rank>\d+)$")


def _rank(name: str | None) -> int | None:
    m = _RANK_IN_NAME.search(name or "")
    return int(m.group("rank")) if m else None


def _code(text: str | None) -> int | None:
    return None if text in (None, "None") else int(text)


def parse_death(ln: LogLine) -> WorkerDeath | None:
    """The death a prefix-free line reports; None for any other line."""
    text = ln.text.strip()
    if m := _V1.search(text):
        code = _code(m.group("code"))
        worker = m.group("worker")
        return WorkerDeath(
            worker=worker, rank=_rank(worker), exit_code=code, signal=from_exitcode(code), line=text
        )
    if m := _V0.search(text):
        code = _code(m.group("code"))
        return WorkerDeath(
            worker=m.group("worker"),
            pid=int(m.group("pid")),
            exit_code=code,
            signal=from_exitcode(code),
            line=text,
        )
    sig: Signal | None = None
    if m := _FAULTHANDLER.match(text):
        sig = signal_by_number(FAULTHANDLER_NAMES[m.group("what")])
    elif m := _ABSL.search(text):
        sig = signal_by_name(m.group("name"))
    if sig is None:
        return None
    rank = ln.rank if ln.rank is not None else _rank(ln.process)
    return WorkerDeath(
        worker=ln.process or UNNAMED, rank=rank, pid=ln.pid, signal=sig, exit_code=None, line=text
    )


def same_process(a: WorkerDeath, b: WorkerDeath) -> bool:
    """Two reports of one death (absl prints its line twice, faulthandler adds a third; the
    executor's line names the rank the worker's own prefix also gives)."""
    if a.node != b.node:
        return False
    if a.rank is not None and b.rank is not None:
        return a.rank == b.rank
    return (a.worker, a.pid) == (b.worker, b.pid)


def merge_death(deaths: tuple[WorkerDeath, ...], new: WorkerDeath) -> tuple[WorkerDeath, ...]:
    """`deaths` with `new` added, or folded into an earlier report of the same process (a
    signal learnt later fills one that had none)."""
    for i, d in enumerate(deaths):
        if same_process(d, new):
            if d.signal is None and new.signal is not None:
                return (*deaths[:i], replace(d, signal=new.signal), *deaths[i + 1 :])
            return deaths
    return (*deaths, new)


def combine(crashes: Mapping[str, Crash], head: str | None = None) -> Crash | None:
    """Several nodes' crashes as one, each death tagged with its node. The phase is the head's
    (its log shows the server's boot and requests), else the first one known."""
    deaths: tuple[WorkerDeath, ...] = ()
    for node, crash in crashes.items():
        for d in crash.deaths:
            deaths = merge_death(deaths, replace(d, node=node))
    if not deaths:
        return None
    first = crashes.get(head) if head is not None else None
    ordered = ([first] if first is not None else []) + list(crashes.values())
    known = [c for c in ordered if c.phase is not CrashPhase.UNKNOWN]
    best = known[0] if known else ordered[0]
    return Crash(deaths=deaths, phase=best.phase, requests_answered=best.requests_answered)


# -- what a log showed around the first death ---------------------------------------------------
_LOADED_KINDS = frozenset({"weights_loaded", "model_loaded", "drafter_start"})


@dataclass(frozen=True)
class _AtDeath:
    ready: bool
    answered: int
    loaded: bool
    headless: bool
    booting: bool


class CrashWatch:
    """Folds a log's events into its `Crash`: the deaths, and what the log had shown when the
    first one came (ready? requests answered? a worker node that loaded its model?). A failed
    request is counted whenever it comes: vLLM's access log writes the 500 after the death."""

    def __init__(self) -> None:
        self.deaths: tuple[WorkerDeath, ...] = ()
        self.ready = False
        self.answered = 0  # POSTs answered below 500 before the first death
        self.failed_requests = 0  # POSTs answered 500 or more after ready
        self.loaded = False
        self.headless = False
        self.booting = False
        self._at: _AtDeath | None = None

    def progress(self, kind: str, moves_phase: bool) -> None:
        """A progress event (`BootEvent.kind`; `moves_phase`: it implies a boot phase)."""
        if kind == "ready":
            self.ready = True
        elif kind == "headless":
            self.headless = True
        elif kind in _LOADED_KINDS:
            self.loaded = True
        self.booting = self.booting or moves_phase

    def request(self, status: int) -> None:
        if status >= 500:
            self.failed_requests += 1 if self.ready else 0
        elif self._at is None:
            self.answered += 1

    def died(self, death: WorkerDeath) -> None:
        if self._at is None:
            self._at = _AtDeath(self.ready, self.answered, self.loaded, self.headless, self.booting)
        self.deaths = merge_death(self.deaths, death)

    def phase(self) -> CrashPhase:
        at = self._at
        if at is None:
            return CrashPhase.UNKNOWN
        if at.answered:
            return CrashPhase.SERVING
        if at.ready:
            return CrashPhase.FIRST_REQUEST if self.failed_requests else CrashPhase.AFTER_READY
        if at.headless and at.loaded:
            return CrashPhase.AFTER_LOAD
        return CrashPhase.BOOT if at.booting else CrashPhase.UNKNOWN

    def crash(self) -> Crash | None:
        if not self.deaths:
            return None
        return Crash(deaths=self.deaths, phase=self.phase(), requests_answered=self.answered)
