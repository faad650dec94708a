"""vLLM-style log lines: ``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:LINE] msg``.

Logger lines go to stdout, tqdm-style progress bars to stderr, as in vLLM. Every write is
flushed so a log follower (docker logs -f) sees lines as they happen.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

_LOCK = threading.Lock()


class VllmLog:
    """Writes lines for the simulated processes of one `vllm serve` instance."""

    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, pid: int | None = None
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.pid = pid or os.getpid()
        # EngineCore and the workers are separate processes in vLLM; give them stable fake pids.
        self.pids = {"APIServer": self.pid, "EngineCore": self.pid + 1}

    def pid_of(self, proc: str) -> int:
        if proc not in self.pids:
            self.pids[proc] = self.pid + 1 + len(self.pids)
        return self.pids[proc]

    def _write(self, stream: TextIO, text: str) -> None:
        with _LOCK:
            try:
                stream.write(text)
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def log(self, proc: str, level: str, where: str, msg: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        prefix = f"({proc} pid={self.pid_of(proc)}) {level} {stamp} [{where}] "
        self._write(self.out, "".join(prefix + line + "\n" for line in msg.split("\n")))

    def info(self, proc: str, where: str, msg: str) -> None:
        self.log(proc, "INFO", where, msg)

    def warning(self, proc: str, where: str, msg: str) -> None:
        self.log(proc, "WARNING", where, msg)

    def error(self, proc: str, where: str, msg: str) -> None:
        self.log(proc, "ERROR", where, msg)

    def raw(self, proc: str, text: str, stderr: bool = False) -> None:
        """A line without level/time, e.g. uvicorn's ``INFO:     ...`` or a tqdm bar."""
        self._write(self.err if stderr else self.out, f"({proc} pid={self.pid_of(proc)}) {text}\n")

    def plain(self, text: str, stderr: bool = True) -> None:
        self._write(self.err if stderr else self.out, text + "\n")


def fmt_hms(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_line(desc: str, n: int, total: int, elapsed: float) -> str:
    """tqdm with vLLM's bar_format ``{desc}: {percentage:3.0f}% Completed | {n}/{total} [...]``."""
    pct = 100.0 * n / total if total else 100.0
    if n == 0:
        tail = f"[{fmt_hms(elapsed)}<?, ?it/s]"
    else:
        per = elapsed / n
        remaining = per * (total - n)
        rate = f"{per:5.2f}s/it" if per >= 1 else f"{1 / per if per else 0:5.2f}it/s"
        tail = f"[{fmt_hms(elapsed)}<{fmt_hms(remaining)}, {rate}]"
    return f"{desc}: {pct:3.0f}% Completed | {n}/{total} {tail}"
