"""vLLM boot progress: log lines -> events -> phase, fraction and an ETA from earlier boots.

Pure apart from `BootHistory` (a JSON-lines file on the control machine). The regexes follow
vLLM's own format strings (docs: reference/vllm.md section 4), checked against a real 0.25.1
boot log: e.g. v0.25 prints `GPU KV cache size` and `Maximum concurrency` on two lines, v0.28+
on one, and the drafter prints a second `Loading safetensors checkpoint shards` bar (1/1) that
must not be mistaken for the model's.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from servectl.cluster.jsonl import append_jsonl, default_state_dir, read_jsonl


class Phase(StrEnum):
    """Boot phases in the order vLLM goes through them."""

    STARTING = "starting"  # container started, no engine line yet
    ENGINE_INIT = "engine_init"  # version banner, args, V1 engine config
    RENDEZVOUS = "rendezvous"  # torch.distributed world / waiting for the other ranks
    LOADING_WEIGHTS = "loading_weights"
    LOADING_DRAFTER = "loading_drafter"
    PROFILING = "profiling"  # torch.compile + profiling / warm-up run
    KV_CACHE = "kv_cache"  # KV cache sized
    WARMUP = "warmup"  # kernel autotune, CUDA graph capture
    API_STARTING = "api_starting"  # engine ready, API server binding routes
    READY = "ready"  # "Application startup complete."
    FAILED = "failed"

    @property
    def order(self) -> int:
        return _ORDER.index(self) if self in _ORDER else len(_ORDER)


_ORDER = [p for p in Phase if p is not Phase.FAILED]
TIMED_PHASES = [p for p in _ORDER if p is not Phase.READY]

# Seconds per phase from the reference boot (0.25.1, GB10, 49 shards, 24.5 min); only used to
# weight the progress bar before any boot has been recorded, never for the ETA.
DEFAULT_WEIGHTS_S = {
    Phase.STARTING: 5,
    Phase.ENGINE_INIT: 11,
    Phase.RENDEZVOUS: 2,
    Phase.LOADING_WEIGHTS: 575,
    Phase.LOADING_DRAFTER: 18,
    Phase.PROFILING: 755,
    Phase.KV_CACHE: 1,
    Phase.WARMUP: 115,
    Phase.API_STARTING: 5,
}


@dataclass(frozen=True)
class BootEvent:
    kind: str
    phase: Phase | None  # the phase this event implies (None: no phase change)
    data: Mapping[str, Any] = field(default_factory=dict)
    line: str = ""


def _num(text: str) -> float:
    return float(text.replace(",", ""))


_PREFIX = re.compile(r"^\((?P<proc>[A-Za-z_]+[A-Za-z0-9_]*)(?: pid=\d+)?\)\s?")
_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")

# (kind, phase, regex): first match wins; order matters.
_RULES: list[tuple[str, Phase | None, re.Pattern[str]]] = [
    ("ready", Phase.READY, re.compile(r"Application startup complete\.")),
    (
        "version",
        Phase.ENGINE_INIT,
        re.compile(r"server version (?P<version>\S+), serving model (?P<model>\S+)"),
    ),
    ("version", Phase.ENGINE_INIT, re.compile(r"█\s+version (?P<version>\S+)")),
    ("args", Phase.ENGINE_INIT, re.compile(r"non-default args: (?P<args>.*)")),
    ("max_model_len", None, re.compile(r"Using max model len (?P<max_model_len>\d+)")),
    (
        "engine_init",
        Phase.ENGINE_INIT,
        re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\)"),
    ),
    (
        "headless",
        Phase.RENDEZVOUS,
        re.compile(
            r"Launching vLLM \(v(?P<version>[^)]+)\) headless multiproc executor, with head "
            r"node address (?P<master>\S+?),? "
        ),
    ),
    ("rendezvous", Phase.RENDEZVOUS, re.compile(r"DP group leader: node_rank=(?P<node_rank>\d+)")),
    (
        "rendezvous",
        Phase.RENDEZVOUS,
        re.compile(r"world_size=(?P<world_size>\d+) rank=(?P<rank>\d+) .*distributed_init_method="),
    ),
    (
        "rendezvous",
        Phase.RENDEZVOUS,
        re.compile(r"rank (?P<rank>\d+) in world size (?P<world_size>\d+) is assigned"),
    ),
    (
        "load_start",
        Phase.LOADING_WEIGHTS,
        re.compile(r"Starting to load model (?P<model>.+?)\.\.\."),
    ),
    (
        "shards",
        Phase.LOADING_WEIGHTS,
        re.compile(
            r"Loading safetensors checkpoint shards(?: \(eager\))?:\s+(?P<pct>\d+)% Completed "
            r"\| (?P<n>\d+)/(?P<total>\d+)"
        ),
    ),
    ("weights_loaded", None, re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds")),
    ("drafter_start", Phase.LOADING_DRAFTER, re.compile(r"Loading drafter model")),
    (
        "model_loaded",
        Phase.PROFILING,
        re.compile(
            r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<seconds>[\d.]+) "
            r"seconds"
        ),
    ),
    (
        "profiling",
        Phase.PROFILING,
        re.compile(
            r"Dynamo bytecode transform time|Initial profiling/warmup run took|"
            r"torch\.compile took"
        ),
    ),
    ("kv_memory", Phase.KV_CACHE, re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")),
    ("kv_tokens", Phase.KV_CACHE, re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")),
    (
        "max_concurrency",
        Phase.KV_CACHE,
        re.compile(
            r"Maximum concurrency for (?P<tokens_per_request>[\d,]+) tokens per request: "
            r"(?P<concurrency>[\d.]+)x"
        ),
    ),
    (
        "cuda_graphs",
        Phase.WARMUP,
        re.compile(r"Capturing CUDA graphs \((?P<label>[^)]+)\):\s+(?P<pct>\d+)%"),
    ),
    (
        "graphs_done",
        Phase.WARMUP,
        re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs"),
    ),
    (
        "autotune",
        Phase.WARMUP,
        re.compile(r"Autotuning process starts|FlashInfer autotune cache|\[kernel_warmup\.py"),
    ),
    (
        "engine_ready",
        Phase.API_STARTING,
        re.compile(
            r"init engine \(profile, create kv cache, warmup model\) took "
            r"(?P<seconds>[\d.]+) s"
        ),
    ),
    (
        "api_starting",
        Phase.API_STARTING,
        re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (?P<url>\S+)"),
    ),
    ("api_starting", Phase.API_STARTING, re.compile(r"Supported tasks: ")),
]
_FATAL = [
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"Engine core initialization failed"),
    re.compile(r"EngineDeadError"),
    re.compile(r"Worker proc \S+ died unexpectedly"),
    re.compile(r"CUDA out of memory|torch\.OutOfMemoryError"),
]
_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception)|KeyboardInterrupt)(?::|$)")
_INT_KEYS = {"n", "total", "pct", "rank", "world_size", "node_rank", "max_model_len"}
_COMMA_KEYS = {"tokens", "tokens_per_request"}
_FLOAT_KEYS = {"gib", "seconds", "concurrency"}


def _strip(line: str) -> tuple[str, str | None]:
    """Drop `(Proc pid=N) ` and return (message with level, level)."""
    text = line.rstrip("\n")
    m = _PREFIX.match(text)
    if m:
        text = text[m.end() :]
    lm = _LEVEL.match(text)
    return text, (lm.group("level") if lm else None)


def parse_line(line: str) -> list[BootEvent]:
    """One raw log line -> zero or more events. tqdm `\\r` updates are split into segments."""
    events: list[BootEvent] = []
    for segment in line.split("\r"):
        if not segment.strip():
            continue
        text, level = _strip(segment)
        event = _parse_segment(text, level, segment)
        if event is not None:
            events.append(event)
    return events


def _parse_segment(text: str, level: str | None, raw: str) -> BootEvent | None:
    if level in ("ERROR", "CRITICAL") or any(p.search(text) for p in _FATAL):
        return BootEvent("error", Phase.FAILED, {"message": text.strip()}, raw)
    if _EXC_LINE.match(text.strip()):
        return BootEvent("exception", None, {"message": text.strip()}, raw)
    for kind, phase, rx in _RULES:
        m = rx.search(text)
        if m:
            data: dict[str, Any] = {}
            for k, v in m.groupdict().items():
                if v is None:
                    continue
                data[k] = (
                    int(_num(v))
                    if k in _INT_KEYS | _COMMA_KEYS
                    else float(v)
                    if k in _FLOAT_KEYS
                    else v
                )
            return BootEvent(kind, phase, data, raw)
    return None


@dataclass(frozen=True)
class BootProgress:
    """Where a boot is. `fraction` is 0..1 over the whole boot; `eta_s` None without history."""

    phase: Phase = Phase.STARTING
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
    ready: bool = False
    failed: bool = False
    error: str | None = None
    last_line: str = ""
    phase_started_at: float | None = None
    started_at: float | None = None
    eta_s: float | None = None

    def describe(self) -> str:
        """Short human text, e.g. `loading_weights 23/49`."""
        text = self.phase.value
        if self.phase is Phase.LOADING_WEIGHTS and self.shards_total:
            text += f" {self.shards_loaded}/{self.shards_total}"
        elif self.phase is Phase.WARMUP and self.cuda_graphs_pct is not None:
            text += f" cuda graphs {self.cuda_graphs_label} {self.cuda_graphs_pct}%"
        elif self.phase is Phase.FAILED and self.error:
            text += f": {self.error}"
        return text


class BootTracker:
    """Folds events into `BootProgress`; phases only move forward (or to FAILED).

    `durations` are the medians from `BootHistory` (phase -> seconds); time comes in as `now`.
    """

    def __init__(
        self, durations: Mapping[Phase, float] | None = None, started_at: float | None = None
    ) -> None:
        self.durations = dict(durations or {})
        self.progress = BootProgress(started_at=started_at, phase_started_at=started_at)
        self.phase_times: dict[Phase, float] = {}  # phase -> when entered
        if started_at is not None:
            self.phase_times[Phase.STARTING] = started_at

    def feed_lines(self, lines: Iterable[str], now: float) -> BootProgress:
        for line in lines:
            self.feed(line, now)
        return self.progress

    def feed(self, line: str, now: float) -> BootProgress:
        p = self.progress
        if p.started_at is None:
            p = replace(p, started_at=now, phase_started_at=now)
            self.phase_times.setdefault(Phase.STARTING, now)
        events = parse_line(line)
        for ev in events:
            p = self._apply(p, ev, now)
        if line.strip():
            p = replace(p, last_line=line.rstrip("\n").split("\r")[-1][-300:])
        self.progress = self._with_estimates(p, now)
        return self.progress

    def tick(self, now: float) -> BootProgress:
        """Refresh fraction and ETA without a new line (time passes within a phase)."""
        self.progress = self._with_estimates(self.progress, now)
        return self.progress

    def fail(self, reason: str, now: float) -> BootProgress:
        """Mark failed from outside the log (container exited, deadline passed)."""
        p = self._enter(self.progress, Phase.FAILED, now)
        self.progress = replace(p, failed=True, error=p.error or reason)
        return self.progress

    def _enter(self, p: BootProgress, phase: Phase, now: float) -> BootProgress:
        if p.failed or phase is p.phase:
            return p
        if phase is not Phase.FAILED and phase.order < p.phase.order:
            return p  # never go backwards
        self.phase_times.setdefault(phase, now)
        return replace(p, phase=phase, phase_started_at=now)

    def _apply(self, p: BootProgress, ev: BootEvent, now: float) -> BootProgress:
        d = ev.data
        if ev.kind == "error":
            p = self._enter(p, Phase.FAILED, now)
            return replace(p, failed=True, error=p.error or d["message"])
        if ev.kind == "exception":
            return replace(p, error=d["message"]) if p.failed else p
        if ev.kind == "shards":
            if p.phase.order >= Phase.LOADING_DRAFTER.order:
                return replace(p, drafter_shards_loaded=d["n"], drafter_shards_total=d["total"])
            p = self._enter(p, Phase.LOADING_WEIGHTS, now)
            return replace(p, shards_loaded=d["n"], shards_total=d["total"])
        if ev.phase is not None:
            p = self._enter(p, ev.phase, now)
        if ev.kind == "ready":
            p = replace(p, ready=True)
        elif ev.kind in ("version", "engine_init", "headless") and "version" in d:
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
        if p.phase is Phase.LOADING_WEIGHTS and p.shards_total:
            return min(1.0, p.shards_loaded / p.shards_total)
        if p.phase is Phase.WARMUP and p.cuda_graphs_pct is not None and expected is None:
            return p.cuda_graphs_pct / 100
        if expected and p.phase_started_at is not None:
            return min(0.95, max(0.0, (now - p.phase_started_at) / expected))
        return 0.0

    def _with_estimates(self, p: BootProgress, now: float) -> BootProgress:
        if p.ready:
            return replace(p, fraction=1.0, eta_s=0.0)
        if p.failed:
            return replace(p, eta_s=None)
        weights = {ph: self.durations.get(ph, DEFAULT_WEIGHTS_S[ph]) for ph in TIMED_PHASES}
        total = sum(weights.values()) or 1.0
        idx = TIMED_PHASES.index(p.phase) if p.phase in TIMED_PHASES else len(TIMED_PHASES)
        within = self._within(p, now, weights.get(p.phase))
        done = sum(weights[ph] for ph in TIMED_PHASES[:idx])
        # a progress bar never moves back (CUDA graph capture restarts at 0% per graph kind)
        fraction = max(p.fraction, min(0.99, (done + weights.get(p.phase, 0) * within) / total))
        eta = estimate_eta(p.phase, within, self.durations, p.phase_started_at, now)
        return replace(p, fraction=fraction, eta_s=eta)


def estimate_eta(
    phase: Phase,
    within: float,
    durations: Mapping[Phase, float],
    phase_started_at: float | None = None,
    now: float | None = None,
) -> float | None:
    """Seconds left: the rest of the current phase plus the medians of the phases after it.

    The current phase's rest is its median scaled by progress within it (shards a/b), or its
    median minus the time already spent when there is no finer progress. None without history.
    """
    if not durations or phase not in TIMED_PHASES:
        return 0.0 if phase is Phase.READY else None
    idx = TIMED_PHASES.index(phase)
    current = durations.get(phase, 0.0)
    if within > 0:
        rest = current * (1.0 - within)
    elif phase_started_at is not None and now is not None:
        rest = max(0.0, current - (now - phase_started_at))
    else:
        rest = current
    return rest + sum(durations.get(ph, 0.0) for ph in TIMED_PHASES[idx + 1 :])


def phase_durations(phase_times: Mapping[Phase, float], ended_at: float) -> dict[str, float]:
    """Entered-at times -> seconds spent in each phase (a phase skipped gets 0)."""
    seen = sorted(
        ((t, ph) for ph, t in phase_times.items() if ph in TIMED_PHASES),
        key=lambda x: (x[0], x[1].order),
    )
    out: dict[str, float] = {ph.value: 0.0 for ph in TIMED_PHASES}
    for (t, ph), nxt in zip(seen, [*seen[1:], (ended_at, Phase.READY)], strict=True):
        out[ph.value] = max(0.0, nxt[0] - t)
    return out


class BootHistory:
    """Durations of earlier successful boots, one JSON line each (`boots.jsonl`)."""

    def __init__(self, path: str | Path | None = None, keep: int = 20) -> None:
        self.path = Path(path) if path else default_state_dir() / "boots.jsonl"
        self.keep = keep

    def records(self, cluster: str | None = None) -> list[dict[str, Any]]:
        out = [r for r in read_jsonl(self.path) if cluster is None or r.get("cluster") == cluster]
        return out[-self.keep :]

    def medians(self, cluster: str | None = None) -> dict[Phase, float]:
        per: dict[Phase, list[float]] = {}
        for rec in self.records(cluster):
            for name, seconds in (rec.get("phases") or {}).items():
                try:
                    per.setdefault(Phase(name), []).append(float(seconds))
                except (ValueError, TypeError):
                    continue
        return {ph: statistics.median(v) for ph, v in per.items() if v}

    def record(
        self,
        cluster: str,
        config_hash: str,
        phases: Mapping[str, float],
        total_s: float,
        now: float | None = None,
    ) -> None:
        rec = {
            "ts": now if now is not None else time.time(),
            "cluster": cluster,
            "config_hash": config_hash,
            "total_s": round(total_s, 3),
            "phases": {k: round(v, 3) for k, v in phases.items()},
        }
        append_jsonl(self.path, rec)
