"""`py-spy dump` on a node: the text parser (pure) and the one call of the binary.

py-spy 0.4.x prints, per process::

    Process 2764: /usr/bin/python3 gloo_rank.py 0
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 2764 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:3252)
        serve_step (gloo_rank.py:7)

innermost frame first; `--locals` adds indented ``Arguments:``/``Locals:`` blocks under a frame;
a failure is ``Error: ...`` with ``Caused by:`` lines (exit 1). Fixtures captured from the real
tool are in tests/fixtures/pyspy/ (README there). Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_PYTHON = re.compile(r"^Python v(\S+) \((.*)\)$")
_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?$')
_FRAME = re.compile(r"^    (\S.*?) \((.+?)(?::(\d+))?\)$")
_ERROR = re.compile(r"^Error: (.*)$")

# Where a rank of a tensor-parallel server waits for its peers: torch.distributed collectives,
# vLLM's own communicators and its shared-memory broadcast queue (workers waiting for the
# scheduler's next step), NCCL/gloo process groups.
COLLECTIVE_FILES = ("torch/distributed/", "vllm/distributed/", "shm_broadcast")
COLLECTIVE_NAMES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "send",
        "recv",
        "wait",
    }
)
PYSPY_TIMEOUT_S = 4.0
OUTPUT_MAX_CHARS = 20000


@dataclass(frozen=True)
class Frame:
    name: str
    file: str
    line: int | None

    def text(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{self.name} ({where})"


@dataclass(frozen=True)
class Thread:
    ident: str  # the OS thread id, or py-spy's hex id where it has none
    status: str  # "idle", "active", "active+gil", ...
    name: str | None
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them


@dataclass(frozen=True)
class Dump:
    """One `py-spy dump`: the processes it read, or the error it gave."""

    pid: int | None
    command: str | None
    python: str | None
    threads: tuple[Thread, ...] = ()
    error: str | None = None
    causes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> JSONObject:
        waiting = collective_frame(self.threads)
        return {
            "pid": self.pid,
            "command": self.command,
            "python": self.python,
            "error": self.error,
            "causes": list(self.causes),
            "waiting_in": None if waiting is None else waiting.text(),
            "threads": [
                {
                    "id": t.ident,
                    "status": t.status,
                    "name": t.name,
                    "frames": [f.text() for f in t.frames],
                }
                for t in self.threads
            ],
        }


def _thread(line: str) -> Thread | None:
    m = _THREAD.match(line)
    return None if m is None else Thread(m.group(1), m.group(2), m.group(3), ())


def parse_dump(text: str) -> Dump:
    """`py-spy dump` stdout+stderr -> Dump. Locals and lines it does not know are skipped;
    an ``Error:`` anywhere makes it a failed dump (with the ``Caused by`` lines)."""
    pid = command = python = error = None
    causes: list[str] = []
    threads: list[Thread] = []
    frames: list[Frame] = []
    in_causes = False
    for line in text.splitlines():
        if m := _PROCESS.match(line):
            pid, command = pid or int(m.group(1)), command or m.group(2)
        elif m := _PYTHON.match(line):
            python = python or m.group(1)
        elif (t := _thread(line)) is not None:
            if threads:
                threads[-1] = _with_frames(threads[-1], frames)
            threads.append(t)
            frames = []
        elif (m := _FRAME.match(line)) and threads:
            frames.append(Frame(m.group(1), m.group(2), _int(m.group(3))))
        elif m := _ERROR.match(line):
            error, in_causes = m.group(1).strip(), False
        elif line.strip() == "Caused by:":
            in_causes = True
        elif in_causes and (m := re.match(r"^\s+\d+: (.*)$", line)):
            causes.append(m.group(1).strip())
        elif in_causes:
            in_causes = False
    if threads:
        threads[-1] = _with_frames(threads[-1], frames)
    return Dump(pid, command, python, tuple(threads), error, tuple(causes))


def _with_frames(thread: Thread, frames: list[Frame]) -> Thread:
    return Thread(thread.ident, thread.status, thread.name, tuple(frames))


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def is_collective(frame: Frame) -> bool:
    """A frame of a collective operation or of a communicator's wait for its peers."""
    if any(part in frame.file for part in COLLECTIVE_FILES):
        return True
    return frame.name.rpartition(".")[2] in COLLECTIVE_NAMES and "distributed" in frame.file


def collective_frame(threads: Sequence[Thread]) -> Frame | None:
    """The innermost collective frame of the first thread that is in one (the main thread
    comes first in py-spy's output), or None."""
    for thread in threads:
        for frame in thread.frames:
            if is_collective(frame):
                return frame
    return None


def find_pyspy(candidates: Sequence[str]) -> str | None:
    """The first py-spy that exists: explicit paths first, then ``py-spy`` on PATH."""
    for path in candidates:
        if path and shutil.which(path):
            return path
    return shutil.which("py-spy")


def run_dump(
    binary: str, pid: int, *, nonblocking: bool, timeout_s: float = PYSPY_TIMEOUT_S
) -> JSONObject:
    """Run `py-spy dump --pid PID` (bounded) and parse it; a timeout or a failure to start is
    an ``error`` in the JSON, never an exception. ``--nonblocking`` reads the process without
    pausing it: the only way to read one that is already stopped (a blocking dump of a stopped
    process fails with "Failed to suspend process", see the fixtures)."""
    argv = [binary, "dump", "--pid", str(pid)] + (["--nonblocking"] if nonblocking else [])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return _failed(pid, f"py-spy dump gave no answer within {timeout_s:g} s", argv)
    except OSError as e:
        return _failed(pid, f"cannot run py-spy: {e}", argv)
    doc = parse_dump((proc.stdout + proc.stderr)[:OUTPUT_MAX_CHARS]).to_json()
    if proc.returncode != 0 and doc["error"] is None:
        doc["error"] = f"py-spy exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    doc.update(pid=pid, argv=argv, nonblocking=nonblocking)
    return doc


def _failed(pid: int, error: str, argv: list[str]) -> JSONObject:
    doc = Dump(pid, None, None, error=error).to_json()
    doc.update(argv=argv, nonblocking="--nonblocking" in argv)
    return doc
