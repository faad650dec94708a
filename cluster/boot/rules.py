"""What one vLLM log line means for a boot, and which exception in a crash is the root cause.

`parse_line` turns a raw line (any prefix form, see `tpwarden.cluster.vllm.log_prefix`) into events:
progress (phase changes, shard counts...), `note` (a non-fatal ERROR or WARNING), `exception`
(a Python exception line), `traceback` (start of a traceback), `fatal` (the engine's own
"failed to start" / "initialization failed" lines), `worker_died` (a worker process that died,
with its exit code or signal: `tpwarden.cluster.boot.crash`) and `request` (an answered POST).

The level is not the verdict: vLLM logs non-fatal ERRORs during healthy boots (a Triton kernel
import that falls back, a client asking for a model name that does not exist) and the real cause
of a crash is often several lines away from the line that says the engine failed. `root_cause`
ranks the exceptions a crash printed: named resource errors first (out of memory, free memory
below --gpu-memory-utilization), then the earliest exception that is not a wrapper.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tpwarden.cluster.boot.crash import WorkerDeath, parse_death
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.vllm.log_prefix import LogLine, parse_prefix


@dataclass(frozen=True, kw_only=True)
class BootEvent:
    kind: str
    phase: BootPhase | None  # the phase this event implies (None: no phase change)
    data: Mapping[str, JSONValue] = field(default_factory=dict)
    line: str = ""
    who: str = "main"  # the emitting process (LogLine.who)
    level: str | None = None
    death: WorkerDeath | None = None  # kind "worker_died": which worker, by which signal


def _num(text: str) -> float:
    return float(text.replace(",", ""))


# (kind, phase, regex): first match wins; order matters. Regexes follow vLLM's format strings
# (reference/vllm.md section 4) and older spellings seen in real logs (0.5 .. 0.33).
_RULES: list[tuple[str, BootPhase | None, re.Pattern[str]]] = [
    ("ready", BootPhase.READY, re.compile(r"Application startup complete\.")),
    (
        "version",
        BootPhase.ENGINE_INIT,
        re.compile(r"server version (?P<version>\S+), serving model (?P<model>\S+)"),
    ),
    ("version", BootPhase.ENGINE_INIT, re.compile(r"vLLM API server version (?P<version>\S+)")),
    ("version", BootPhase.ENGINE_INIT, re.compile(r"█\s+version (?P<version>\S+)")),
    ("args", BootPhase.ENGINE_INIT, re.compile(r"non-default args: (?P<args>.*)")),
    ("max_model_len", None, re.compile(r"Using max model len (?P<max_model_len>\d+)")),
    (
        "engine_init",
        BootPhase.ENGINE_INIT,
        re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\)"),
    ),
    (
        "engine_init",
        BootPhase.ENGINE_INIT,
        re.compile(r"Initializing an? LLM engine \(v(?P<version>[^)]+)\)"),
    ),
    (
        "headless",
        BootPhase.RENDEZVOUS,
        re.compile(
            r"Launching vLLM \(v(?P<version>[^)]+)\) headless multiproc executor, with head "
            r"node address (?P<master>\S+?),? "
        ),
    ),
    (
        "rendezvous",
        BootPhase.RENDEZVOUS,
        re.compile(r"DP group leader: node_rank=(?P<node_rank>\d+)"),
    ),
    (
        "rendezvous",
        BootPhase.RENDEZVOUS,
        re.compile(r"world_size=(?P<world_size>\d+) rank=(?P<rank>\d+) .*distributed_init_method="),
    ),
    (
        "rendezvous",
        BootPhase.RENDEZVOUS,
        re.compile(r"rank (?P<rank>\d+) in world size (?P<world_size>\d+) is assigned"),
    ),
    # NCCL set-up: the ranks have found each other's rendezvous (0.5+ pynccl)
    (
        "rendezvous",
        BootPhase.RENDEZVOUS,
        re.compile(r"vLLM is using nccl==|Found nccl from library"),
    ),
    (
        "load_start",
        BootPhase.LOADING_WEIGHTS,
        re.compile(r"Starting to load model (?P<model>.+?)\.\.\."),
    ),
    (
        "shards",
        BootPhase.LOADING_WEIGHTS,
        re.compile(
            r"Loading (?:safetensors|pt) checkpoint shards(?: \(eager\))?:\s+(?P<pct>\d+)% "
            r"Completed \| (?P<n>\d+)/(?P<total>\d+)"
        ),
    ),
    ("weights_loaded", None, re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds")),
    ("drafter_start", BootPhase.LOADING_DRAFTER, re.compile(r"Loading drafter model")),
    (
        "model_loaded",
        BootPhase.PROFILING,
        re.compile(
            r"(?:Model loading took|Loading model weights took) (?P<gib>[\d.]+) ?GiB"
            r"(?: memory)?(?: and (?P<seconds>[\d.]+) seconds)?"
        ),
    ),
    (
        "profiling",
        BootPhase.PROFILING,
        re.compile(
            r"Dynamo bytecode transform time|Initial profiling/warmup run took|"
            r"torch\.compile take?s? "
        ),
    ),
    (
        "kv_memory",
        BootPhase.KV_CACHE,
        re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB"),
    ),
    ("kv_tokens", BootPhase.KV_CACHE, re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")),
    ("kv_blocks", BootPhase.KV_CACHE, re.compile(r"# (?:GPU|cuda) blocks: (?P<blocks>\d+)")),
    (
        "max_concurrency",
        BootPhase.KV_CACHE,
        re.compile(
            r"Maximum concurrency for (?P<tokens_per_request>[\d,]+) tokens per request: "
            r"(?P<concurrency>[\d.]+)x"
        ),
    ),
    (
        "cuda_graphs",
        BootPhase.WARMUP,
        re.compile(r"Capturing CUDA graphs? \((?P<label>[^)]+)\):\s+(?P<pct>\d+)%"),
    ),
    (
        "graphs_done",
        BootPhase.WARMUP,
        re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs"),
    ),
    (
        "autotune",
        BootPhase.WARMUP,
        re.compile(r"Autotuning process starts|FlashInfer autotune cache|\[kernel_warmup\.py"),
    ),
    (
        "engine_ready",
        BootPhase.API_STARTING,
        re.compile(
            r"init engine \(profile, create kv cache, warmup model\) took "
            r"(?P<seconds>[\d.]+) s"
        ),
    ),
    (
        "api_starting",
        BootPhase.API_STARTING,
        re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (?P<url>\S+)"),
    ),
    ("api_starting", BootPhase.API_STARTING, re.compile(r"Supported[_ ]tasks: ")),
    # uvicorn's access log: a request and its answer (when the server died: serving or not)
    ("request", None, re.compile(r'"POST (?P<path>/\S*) HTTP/[\d.]+" (?P<status>\d{3})\b')),
]

# The engine's own "this process is done" lines. Logged at ERROR (0.8-0.11 `EngineCore failed
# to start.`) or raised (`RuntimeError: Engine core initialization failed. See root cause
# above.`, V0 `Engine process failed to start`); either way they are wrappers, not causes.
_FATAL = re.compile(
    r"(?:Engine ?Core|Engine core|Engine process|EngineCore_\w+|WorkerProc)\b[^.]*?"
    r"\b(?:failed to start|initialization failed)"
    r"|Worker proc \S+ died unexpectedly|Worker \w+ pid \d+ died, exit code"
    # a worker noticing its engine process is gone (multiproc_executor's parent monitor)
    r"|Parent process exited, terminating worker"
    r"|EngineDeadError",
    re.IGNORECASE,
)
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_CHAIN = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+, in (?P<func>\S+)')
# `torch.OutOfMemoryError: ...`, `ray.exceptions.RayTaskError(ValueError): ...`, `ValueError`
_EXC_LINE = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit))"
    r"(?:\((?P<inner>[\w.]+)\))?(?::\s?(?P<message>.*))?$"
)
_PROCESS_HEADER = re.compile(r"^Process [\w-]+:$")
_CARETS = re.compile(r"^[\^~\s]+$")  # Python 3.11+ underlines under a traceback's code line


def _coerce(data: Mapping[str, str | None]) -> JSONObject:
    out: JSONObject = {}
    for k, v in data.items():
        if v is None:
            continue
        if k in {
            "n",
            "total",
            "pct",
            "rank",
            "world_size",
            "node_rank",
            "max_model_len",
            "blocks",
            "status",
        }:
            out[k] = int(_num(v))
        elif k in {"tokens", "tokens_per_request"}:
            out[k] = int(_num(v))
        elif k in {"gib", "seconds", "concurrency"}:
            out[k] = float(v)
        else:
            out[k] = v
    return out


def classify(ln: LogLine) -> BootEvent | None:
    """One prefix-free line -> its event (None: nothing a boot reader needs)."""
    text = ln.text
    stripped = text.strip()
    if not stripped:
        return None

    def ev(
        kind: str, phase: BootPhase | None = None, data: Mapping[str, JSONValue] | None = None
    ) -> BootEvent:
        return BootEvent(
            kind=kind, phase=phase, data=data or {}, line=ln.raw, who=ln.who, level=ln.level
        )

    if _TRACEBACK.match(stripped):
        return ev("traceback")
    if _CHAIN.match(stripped):
        return ev("chain")
    if _PROCESS_HEADER.match(stripped):
        return ev("process_header")
    death = parse_death(ln) if not text[:1].isspace() else None
    if death is not None:
        return BootEvent(
            kind="worker_died", phase=None, line=ln.raw, who=ln.who, level=ln.level, death=death
        )
    fm = _FRAME.match(text)
    if fm:
        return ev("frame", data={"func": fm.group("func")})
    em = _EXC_LINE.match(stripped)
    if em and not text.startswith(" "):
        fatal = bool(_FATAL.search(stripped))
        return ev("exception", data={"message": stripped, "type": em.group("type"), "fatal": fatal})
    indented = text[:1].isspace()
    if _FATAL.search(stripped) and not indented:  # indented: source code quoted in a traceback
        return ev("fatal", data={"message": stripped})
    for kind, phase, rx in _RULES:
        m = rx.search(text)
        if m:
            return ev(kind, phase, _coerce(m.groupdict()))
    if (
        ln.level in ("ERROR", "CRITICAL", "WARNING")
        and not indented
        and not _CARETS.match(stripped)
    ):
        return ev("note", data={"message": stripped})
    return None


def parse_line(line: str) -> list[BootEvent]:
    """One raw log line -> zero or more events; tqdm `\\r` updates are split into segments."""
    events: list[BootEvent] = []
    for segment in line.split("\r"):
        if not segment.strip():
            continue
        event = classify(parse_prefix(segment))
        if event is not None:
            events.append(event)
    return events


# -- root cause ----------------------------------------------------------------------------------
_NAMED = [
    (
        "out of memory",
        re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory", re.IGNORECASE),
    ),
    (
        "free GPU memory below --gpu-memory-utilization",
        re.compile(r"Free memory on device .*less than desired GPU memory utilization"),
    ),
    (
        "no GPU memory left for the KV cache",
        re.compile(
            r"No available memory for the cache blocks|larger than the maximum number of tokens "
            r"that can be stored in KV cache|KV cache is needed, which is larger than"
        ),
    ),
]
# Exceptions that report another one: never the root cause while anything else is known.
_WRAPPERS = re.compile(
    r"See root cause above|See stack trace|for the root cause|initialization failed|"
    r"failed to start|EngineDeadError|EngineGenerateError|DistBackendError|"
    r"TCPStore|recvValue|Connection was likely closed|KeyboardInterrupt|SystemExit|"
    r"ProcessLookupError|BrokenPipeError|CancelledError|Shutdown|terminat",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Cause:
    """The reported cause of a failed boot: `message` is the root exception; `kind` names it
    when known (out of memory...); `context` is the wrapper that said the engine failed."""

    message: str
    kind: str | None = None
    context: str | None = None

    def describe(self) -> str:
        head = f"{self.kind}: {self.message}" if self.kind else self.message
        return f"{head} (reported as: {self.context})" if self.context else head


def root_cause(exceptions: Iterable[str], wrappers: Iterable[str] = ()) -> Cause | None:
    """Rank what a crash printed. `exceptions`: exception lines in log order; `wrappers`: the
    fatal lines ("EngineCore failed to start.") in log order."""
    excs = [e for e in exceptions if e]
    wraps = [w for w in wrappers if w]
    context = wraps[0] if wraps else None
    for kind, rx in _NAMED:
        for e in excs:
            if rx.search(e):
                return Cause(e, kind, _context(context, e, excs))
    for e in excs:
        if not _WRAPPERS.search(e):
            return Cause(e, None, _context(context, e, excs))
    if excs:
        return Cause(excs[-1], None, context if context != excs[-1] else None)
    if context:
        return Cause(context)
    return None


def _context(first_wrapper: str | None, root: str, excs: list[str]) -> str | None:
    # the outermost wrapper is what the operator saw last ("Engine core initialization failed")
    wrapper = next((e for e in reversed(excs) if _WRAPPERS.search(e) and e != root), None)
    ctx = wrapper or first_wrapper
    return ctx if ctx and ctx != root else None
