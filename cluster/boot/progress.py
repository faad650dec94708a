"""vLLM boot progress: log lines -> events -> one boot state, with an ETA from earlier boots.

Pure apart from `BootHistory` (a JSON-lines file on the control machine). What a line means lives
in `tpwarden.cluster.boot.rules` (regexes after vLLM's format strings, fatal lines, root cause)
and `tpwarden.cluster.vllm.log_prefix` (the prefix grammar); this module folds events into a
`BootProgress` whose single `phase` is the verdict: READY and FAILED are phases, so a boot is
never both. Once READY, later lines only add notes: a client asking for an unknown model logs
ERROR on a healthy server. A worker process that died (`Worker proc VllmWorker-1 died
unexpectedly (exit code: -4)`) is named as the progress's `crash` (`tpwarden.cluster.boot.crash`:
rank, signal, phase) whenever it comes; after READY it stays a note for the verdict, and the
failure that follows (the containers exit) names it. Before READY a boot fails only on what
ends it (an uncaught traceback, the engine's "failed to start"/"initialization failed" lines, a
worker that died, a container that exited), never on the level of a line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tpwarden.cluster.boot.crash import Crash, CrashWatch
from tpwarden.cluster.boot.history import estimate_eta
from tpwarden.cluster.boot.phase import DEFAULT_WEIGHTS_S, TIMED_PHASES, BootPhase
from tpwarden.cluster.boot.rules import BootEvent, Cause, parse_line, root_cause
from tpwarden.cluster.durable import JSONObject

MAX_NOTES = 30
# A traceback whose first frame is one of these reached the top of its process: `vllm serve`
# (<module>), `python -m vllm...` (_run_module_as_main), a multiprocessing child (_bootstrap).
_TOP_FRAMES = ("<module>", "_run_module_as_main", "_bootstrap")
_CRASH_KINDS = ("traceback", "process_header", "frame", "chain", "exception", "fatal")


@dataclass(frozen=True)
class BootNote:
    """A non-fatal ERROR/WARNING line worth showing; repeats are counted, not kept."""

    level: str
    who: str
    message: str
    after_ready: bool = False
    count: int = 1

    def to_json(self) -> JSONObject:
        return {
            "level": self.level,
            "process": self.who,
            "message": self.message,
            "after_ready": self.after_ready,
            "count": self.count,
        }


@dataclass(frozen=True, kw_only=True)
class BootProgress:
    """Where a boot is. `phase` is the verdict (READY, FAILED or a phase short of them);
    `fraction` is 0..1 over the whole boot; `eta_s` None without history. On failure `error` is
    the root cause (named when known: "out of memory: ...", or the crash when a worker died by
    a signal: "rank 1 died by SIGILL: ...") and `error_context` the wrapper that reported it
    ("RuntimeError: Engine core initialization failed...")."""

    phase: BootPhase = BootPhase.STARTING
    fraction: float = 0.0
    shards_loaded: int = 0
    shards_total: int | None = None
    drafter_shards_loaded: int = 0
    drafter_shards_total: int | None = None
    cuda_graphs_pct: int | None = None
    cuda_graphs_label: str | None = None
    version: str | None = None
    max_model_len: int | None = None
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    api_url: str | None = None
    error: str | None = None
    error_kind: str | None = None
    error_context: str | None = None
    crash: Crash | None = None  # worker processes that died: which, by which signal, when
    notes: tuple[BootNote, ...] = ()
    last_line: str = ""
    phase_started_at: float | None = None
    started_at: float | None = None
    eta_s: float | None = None

    @property
    def ready(self) -> bool:
        return self.phase is BootPhase.READY

    @property
    def failed(self) -> bool:
        return self.phase is BootPhase.FAILED

    @property
    def verdict(self) -> str:
        """`ready`, `failed`, or `incomplete` (stopped short of ready without a failure)."""
        return "ready" if self.ready else "failed" if self.failed else "incomplete"

    @property
    def failure_text(self) -> str | None:
        """The cause with its wrapper, for one-line reports."""
        if not self.error:
            return None
        return (
            f"{self.error} (reported as: {self.error_context})"
            if self.error_context
            else self.error
        )

    def describe(self) -> str:
        """Short human text, e.g. `loading_weights 23/49`."""
        text = self.phase.value
        if self.phase is BootPhase.LOADING_WEIGHTS and self.shards_total:
            text += f" {self.shards_loaded}/{self.shards_total}"
        elif self.phase is BootPhase.WARMUP and self.cuda_graphs_pct is not None:
            text += f" cuda graphs {self.cuda_graphs_label} {self.cuda_graphs_pct}%"
        elif self.phase is BootPhase.FAILED and self.error:
            text += f": {self.error}"
        return text

    def to_json(self) -> JSONObject:
        return {
            "verdict": self.verdict,
            "phase": self.phase.value,
            "describe": self.describe(),
            "fraction": round(self.fraction, 4),
            "shards_loaded": self.shards_loaded,
            "shards_total": self.shards_total,
            "drafter_shards_loaded": self.drafter_shards_loaded,
            "drafter_shards_total": self.drafter_shards_total,
            "cuda_graphs_pct": self.cuda_graphs_pct,
            "version": self.version,
            "max_model_len": self.max_model_len,
            "kv_cache_gib": self.kv_cache_gib,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "api_url": self.api_url,
            "error": self.error,
            "error_kind": self.error_kind,
            "error_context": self.error_context,
            "crash": self.crash.to_json() if self.crash else None,
            "notes": [n.to_json() for n in self.notes],
            "last_line": self.last_line,
            "eta_s": self.eta_s,
        }


@dataclass
class _Traceback:
    raw: bool  # printed without a level: Python's own uncaught-exception report
    ends_process: bool  # `Process X:` header or a first frame in <module>/_bootstrap
    frames: int = 0


class BootTracker:
    """Folds events into `BootProgress`; phases only move forward, READY and FAILED are final
    for the log (only `fail()`, an outside fact such as an exited container, overrides READY).

    `durations` are the medians from `BootHistory` (phase -> seconds); time comes in as `now`.
    """

    def __init__(
        self, durations: Mapping[BootPhase, float] | None = None, started_at: float | None = None
    ) -> None:
        self.durations = dict(durations or {})
        self.progress = BootProgress(started_at=started_at, phase_started_at=started_at)
        self.phase_times: dict[BootPhase, float] = {}  # phase -> when entered
        if started_at is not None:
            self.phase_times[BootPhase.STARTING] = started_at
        self._tracebacks: dict[str, _Traceback] = {}
        self._headers: set[str] = set()
        self._exceptions: list[str] = []  # exception lines before ready, in log order
        self._fatal: list[str] = []  # the engine's own "failed" lines
        self._watch = CrashWatch()  # workers that died, and what the log showed by then
        self._causes_end: int | None = None  # exceptions after the first death are its echo

    def feed_lines(self, lines: Iterable[str], now: float) -> BootProgress:
        for line in lines:
            self.feed(line, now)
        return self.progress

    def feed(self, line: str, now: float) -> BootProgress:
        p = self.progress
        if p.started_at is None:
            p = replace(p, started_at=now, phase_started_at=now)
            self.phase_times.setdefault(BootPhase.STARTING, now)
        for ev in parse_line(line):
            p = self._apply(p, ev, now)
        if line.strip():
            p = replace(p, last_line=line.rstrip("\n").split("\r")[-1][-300:])
        self.progress = self._with_estimates(p, now)
        return self.progress

    def tick(self, now: float) -> BootProgress:
        """Refresh fraction and ETA without a new line (time passes within a phase)."""
        self.progress = self._with_estimates(self.progress, now)
        return self.progress

    def mark_ready(self, now: float) -> BootProgress:
        """The server answered a real request: ready, whatever the log said so far."""
        p = self.progress
        if not p.failed:
            self._watch.progress("ready", True)
            p = self._enter(p, BootPhase.READY, now)
        self.progress = self._with_estimates(p, now)
        return self.progress

    def fail(self, reason: str, now: float) -> BootProgress:
        """Mark failed from outside the log (container exited, deadline passed)."""
        p = self.progress
        if not p.failed:
            self.phase_times.setdefault(BootPhase.FAILED, now)
            p = replace(p, phase=BootPhase.FAILED, phase_started_at=now)
        errors = [n for n in p.notes if n.level in ("ERROR", "CRITICAL") and not n.after_ready]
        if self._watch.deaths or self._cause() is not None:
            p = self._judged(p)
            if not p.error_context:
                p = replace(p, error_context=reason)
        elif errors and not p.error:
            # no exception in the log: the last ERROR the process wrote before it went away
            # ("Failed to import Ray ...") says more than "container exited (1)"
            p = replace(p, error=errors[-1].message, error_context=reason)
        else:
            p = replace(p, error=p.error or reason)
        self.progress = replace(p, eta_s=None)
        return self.progress

    # -- folding -----------------------------------------------------------------------------
    def _enter(self, p: BootProgress, phase: BootPhase, now: float) -> BootProgress:
        if p.failed or p.ready or phase is p.phase:
            return p
        if phase is not BootPhase.FAILED and phase.order < p.phase.order:
            return p  # never go backwards
        self.phase_times.setdefault(phase, now)
        return replace(p, phase=phase, phase_started_at=now)

    def _cause(self) -> Cause | None:
        return root_cause(self._exceptions[: self._causes_end], self._fatal)

    def _judged(self, p: BootProgress, fallback: str | None = None) -> BootProgress:
        """The failure's error fields: a crash by a signal that is a cause (SIGILL, SIGKILL...)
        names it; otherwise the root exception logged before the first death (a worker stopped
        by SIGTERM after another one raised); a death with neither is the error itself."""
        crash = self._watch.crash()
        if crash is not None:
            p = replace(p, crash=crash)
            if crash.named or not self._exceptions[: self._causes_end]:
                kind = crash.signal.name if crash.named and crash.signal else "worker died"
                return replace(p, error=crash.describe(), error_kind=kind, error_context=None)
        cause = self._cause() or (Cause(fallback) if fallback is not None else None)
        return p if cause is None else self._with_cause(p, cause)

    @staticmethod
    def _with_cause(p: BootProgress, cause: Cause) -> BootProgress:
        error = f"{cause.kind}: {cause.message}" if cause.kind else cause.message
        return replace(p, error=error, error_kind=cause.kind, error_context=cause.context)

    def _note(self, p: BootProgress, ev: BootEvent, after_ready: bool) -> BootProgress:
        message = str(ev.data.get("message", ""))[:300]
        for i, n in enumerate(p.notes):
            if n.message == message and n.level == ev.level:
                notes = list(p.notes)
                notes[i] = replace(n, count=n.count + 1)
                return replace(p, notes=tuple(notes))
        if len(p.notes) >= MAX_NOTES:
            return p
        note = BootNote(ev.level or "ERROR", ev.who, message, after_ready)
        return replace(p, notes=(*p.notes, note))

    def _apply(self, p: BootProgress, ev: BootEvent, now: float) -> BootProgress:
        if ev.kind == "request":
            self._watch.request(int(ev.data["status"]))
            if p.crash is None:
                return p
            return self._judged(p) if p.failed else replace(p, crash=self._watch.crash())
        if ev.kind == "worker_died" and ev.death is not None:
            return self._worker_died(p, ev, now)
        if ev.kind not in _CRASH_KINDS and ev.kind != "note":
            self._watch.progress(ev.kind, ev.phase is not None)
        if p.ready:
            # a served request's ERROR (unknown model...) is worth a note, never a failure
            if ev.level in ("ERROR", "CRITICAL") and ev.kind in ("note", "fatal", "exception"):
                return self._note(p, ev, after_ready=True)
            return p
        if ev.kind in _CRASH_KINDS:
            return self._crash_event(p, ev, now)
        if ev.kind == "note":
            return self._note(p, ev, after_ready=self._watch.ready)
        if p.failed:
            return p  # progress lines after a failure (a drafter-like shard bar) mean nothing
        return self._progress_event(p, ev, now)

    def _crash_event(self, p: BootProgress, ev: BootEvent, now: float) -> BootProgress:
        d = ev.data
        tb: _Traceback | None
        if ev.kind == "process_header":
            self._headers.add(ev.who)
        elif ev.kind == "traceback":
            tb = _Traceback(raw=ev.level is None, ends_process=ev.who in self._headers)
            self._tracebacks[ev.who] = tb
            if tb.raw and tb.ends_process:
                # multiprocessing prints "Process X:" + a traceback only when X's run() raised
                return self._fail_from_log(p, f"{ev.who}: process ended by an exception", now)
        elif ev.kind == "frame":
            tb = self._tracebacks.get(ev.who)
            if tb is not None:
                tb.frames += 1
                first_is_top = tb.frames == 1 and d.get("func") in _TOP_FRAMES
                if first_is_top and tb.raw and not tb.ends_process:
                    # Python's own report of an exception that left the process's top frame
                    tb.ends_process = True
                    return self._fail_from_log(p, f"{ev.who}: process ended by an exception", now)
        elif ev.kind == "exception":
            self._exceptions.append(str(d["message"]))
            tb = self._tracebacks.pop(ev.who, None)
            ended = tb is not None and (tb.raw or tb.ends_process)
            if ended or d.get("fatal"):
                return self._fail_from_log(p, str(d["message"]), now)
            if p.failed:
                return self._judged(p, fallback=str(d["message"]))
        elif ev.kind == "fatal":
            return self._fail_from_log(p, str(d["message"]), now)
        return p

    def _fail_from_log(self, p: BootProgress, line: str, now: float) -> BootProgress:
        self._fatal.append(line)
        if not p.failed:
            self.phase_times.setdefault(BootPhase.FAILED, now)
            p = replace(p, phase=BootPhase.FAILED, phase_started_at=now)
        return self._judged(p, fallback=line)

    def _worker_died(self, p: BootProgress, ev: BootEvent, now: float) -> BootProgress:
        """A worker process died. Before ready it ends the boot; after, the boot stays READY
        (it did come up: what happens next is the watchdog's business) with the crash named
        beside it, for `fail()` (the containers that exit next) and for the reports."""
        assert ev.death is not None
        if self._causes_end is None:
            self._causes_end = len(self._exceptions)
        self._watch.died(ev.death)
        if p.ready:
            p = self._note(p, replace(ev, data={"message": ev.death.line}), after_ready=True)
            return replace(p, crash=self._watch.crash())
        return self._fail_from_log(p, ev.death.line, now)

    def _progress_event(self, p: BootProgress, ev: BootEvent, now: float) -> BootProgress:
        d = ev.data
        if ev.kind == "shards":
            # the drafter prints its own bar (1/1) after the model's: count it apart
            if p.phase.order >= BootPhase.LOADING_DRAFTER.order:
                return replace(p, drafter_shards_loaded=d["n"], drafter_shards_total=d["total"])
            if p.shards_total is not None and d["total"] != p.shards_total and p.shards_loaded:
                if p.shards_loaded >= p.shards_total:  # a second bar after the model's: drafter
                    return replace(p, drafter_shards_loaded=d["n"], drafter_shards_total=d["total"])
            p = self._enter(p, BootPhase.LOADING_WEIGHTS, now)
            return replace(p, shards_loaded=d["n"], shards_total=d["total"])
        if ev.phase is not None:
            p = self._enter(p, ev.phase, now)
        if ev.kind in ("version", "engine_init", "headless") and "version" in d:
            p = replace(p, version=p.version or d["version"])
        elif ev.kind == "max_model_len" and p.max_model_len is None:
            p = replace(p, max_model_len=d["max_model_len"])
        elif ev.kind == "kv_memory":
            p = replace(p, kv_cache_gib=d["gib"])
        elif ev.kind == "kv_tokens":
            p = replace(p, kv_cache_tokens=d["tokens"])
        elif ev.kind == "max_concurrency":
            p = replace(p, max_concurrency=d["concurrency"])
        elif ev.kind == "cuda_graphs":
            p = replace(p, cuda_graphs_pct=d["pct"], cuda_graphs_label=d["label"])
        elif ev.kind == "api_starting" and "url" in d:
            p = replace(p, api_url=d["url"])
        return p

    # -- fraction and ETA ---------------------------------------------------------------------
    def _within(self, p: BootProgress, now: float, expected: float | None) -> float:
        """How far into the current phase, 0..1."""
        if p.phase is BootPhase.LOADING_WEIGHTS and p.shards_total:
            return min(1.0, p.shards_loaded / p.shards_total)
        if p.phase is BootPhase.WARMUP and p.cuda_graphs_pct is not None and expected is None:
            return p.cuda_graphs_pct / 100
        if expected and p.phase_started_at is not None:
            return min(0.95, max(0.0, (now - p.phase_started_at) / expected))
        return 0.0

    def _with_estimates(self, p: BootProgress, now: float) -> BootProgress:
        if p.ready:
            return replace(p, fraction=1.0, eta_s=0.0)
        if p.failed:
            return replace(p, eta_s=None)
        weights: dict[BootPhase, float] = {
            ph: self.durations.get(ph, DEFAULT_WEIGHTS_S[ph]) for ph in TIMED_PHASES
        }
        total = sum(weights.values()) or 1.0
        idx = TIMED_PHASES.index(p.phase) if p.phase in TIMED_PHASES else len(TIMED_PHASES)
        within = self._within(p, now, weights.get(p.phase))
        done = sum(weights[ph] for ph in TIMED_PHASES[:idx])
        # a progress bar never moves back (CUDA graph capture restarts at 0% per graph kind)
        fraction = max(p.fraction, min(0.99, (done + weights.get(p.phase, 0) * within) / total))
        eta = estimate_eta(p.phase, within, self.durations, p.phase_started_at, now)
        return replace(p, fraction=fraction, eta_s=eta)


def read_boot_log(
    lines: Iterable[str], durations: Mapping[BootPhase, float] | None = None
) -> BootProgress:
    """Replay a whole log copied from anywhere (a file, stdin, `docker logs`): where did this
    boot stop, and why. Lines may hold several `\\r`-separated tqdm updates. A leading block of
    `#` lines (a note saying where the copy came from) is skipped: vLLM never starts a line so."""
    tracker = BootTracker(durations, started_at=0.0)
    header = True
    for line in lines:
        for part in line.rstrip("\n").split("\n"):
            if header and part.startswith("#"):
                continue
            header = False
            tracker.feed(part, 0.0)
    return tracker.progress
