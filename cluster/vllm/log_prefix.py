"""One grammar for the prefixes in front of a vLLM log message, in every form it reaches us.

A message can arrive wrapped, outside in, in:

1. ANSI colour codes (vLLM colours the process prefix on a TTY: `ESC[1;36m(APIServer pid=1)ESC[0;0m`);
   they are removed everywhere first.
2. A collector's timestamp: `docker logs -t` / `kubectl logs --timestamps` (RFC 3339,
   `2026-05-01T19:34:19.036123456Z `), a CI runner's `[2026-02-24T20:21:58Z] `, or Docker
   Desktop's `2026-05-01 21:34:19.036 | `; `docker compose logs` adds `service-1  | `.
3. The process prefix: `(APIServer pid=1)`, `(EngineCore_DP0 pid=9)`, `(Worker_TP1 pid=7)`,
   `(VllmWorker rank=1 pid=4)` (0.8), `(VllmWorkerProcess pid=3)` (0.5-0.7) and Ray's
   `(RayWorkerWrapper pid=248, ip=10.1.160.68)`; Ray may put the pid alone: `(pid=248, ip=...)`.
4. The level and vLLM's own date: `INFO 12-02 10:38:00 [launcher.py:139] ` (0.8+),
   `INFO 08-12 11:46:11 launcher.py:14] ` (<= 0.7, no opening bracket), uvicorn's `INFO:     `.

`parse_prefix` peels these off and returns what is left as `text`. Pure; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

_OUTER = [
    # docker logs -t / kubectl logs --timestamps: RFC 3339 with nanoseconds and Z or an offset
    re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s"),
    # CI runners (Buildkite) put it in brackets
    re.compile(r"^\[(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?)\]\s"),
    # Docker Desktop's log view: `2026-05-01 21:34:19.036 | `
    re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?) \| ?"),
    # docker compose logs: `vllm-1  | ` (service names: letters, digits, _ . -)
    re.compile(r"^(?P<service>[A-Za-z0-9][\w.-]*)\s+\| ?"),
]
_PROCESS = re.compile(
    r"^\((?:(?P<proc>[A-Za-z_][A-Za-z0-9_]*)\s*)?(?:rank=(?P<rank>\d+)\s+)?"
    r"(?:pid=(?P<pid>\d+))?(?:,\s*ip=(?P<ip>[0-9A-Fa-f.:]+))?\)\s?"
)
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL"
# vLLM's formatter: LEVEL MM-DD HH:MM:SS [file.py:NN] (0.8+) or LEVEL MM-DD HH:MM:SS file.py:NN]
_VLLM_LEVEL = re.compile(
    rf"^(?P<level>{_LEVELS}) \d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)? "
    r"(?:\[?(?P<source>[^\]\s]+:\d+)\] ?)?"
)
# uvicorn and plain `logging`: `INFO:     Application startup complete.`
_BARE_LEVEL = re.compile(rf"^(?P<level>{_LEVELS}):\s+")


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """A log line with its prefixes taken apart; `text` is the message (leading spaces of a
    traceback frame kept). `level` is None for raw stderr (tqdm bars, uncaught tracebacks)."""

    raw: str
    text: str
    process: str | None = None
    pid: int | None = None
    rank: int | None = None  # `(VllmWorker rank=1 pid=4)` (0.8); the name holds it later
    ip: str | None = None
    level: str | None = None
    source: str | None = None
    timestamp: str | None = None

    @property
    def who(self) -> str:
        """A stable key for the emitting process: `Worker_TP1 pid=7`, `RayWorkerWrapper ip=..`."""
        parts = [self.process or "main"]
        if self.pid is not None:
            parts.append(f"pid={self.pid}")
        if self.ip:
            parts.append(f"ip={self.ip}")
        return " ".join(parts)


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def parse_prefix(line: str) -> LogLine:
    """Peel colour, collector timestamp, process and level prefixes off one line."""
    raw = line.rstrip("\r\n")
    text = strip_ansi(raw)
    timestamp = None
    for _ in range(3):  # collectors stack: `docker compose logs -t` = service | timestamp line
        m = next((m for rx in _OUTER if (m := rx.match(text))), None)
        if m is None:
            break
        timestamp = timestamp or m.groupdict().get("ts")
        text = text[m.end() :]
    process = ip = None
    pid = rank = None
    m = _PROCESS.match(text)
    if m and (m.group("proc") or m.group("pid")):
        process, ip = m.group("proc"), m.group("ip")
        pid = int(m.group("pid")) if m.group("pid") else None
        rank = int(m.group("rank")) if m.group("rank") else None
        text = text[m.end() :]
    level = source = None
    m = _VLLM_LEVEL.match(text) or _BARE_LEVEL.match(text)
    if m:
        level = "WARNING" if m.group("level") == "WARN" else m.group("level")
        source = m.groupdict().get("source")
        text = text[m.end() :]
    return LogLine(
        raw=raw,
        text=text,
        process=process,
        pid=pid,
        rank=rank,
        ip=ip,
        level=level,
        source=source,
        timestamp=timestamp,
    )
