"""Append-only JSON-lines event log: one record per line, flushed and fsynced per record.

A process killed with -9 loses at most the record it was writing. A torn last line is skipped by
`read_events()`, and the next writer first terminates it with a newline so the torn bytes never
glue onto a good record.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class EventLog:
    """Appends events to `path`. Opens the file on first use; `close()` releases it."""

    def __init__(self, path: str, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._fd: int | None = None
        self._lock = threading.Lock()

    def _open(self) -> int:
        if self._fd is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        os.write(fd, b"\n")  # terminate a torn last record
            self._fd = fd
        return self._fd

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"ts": self._clock(), "kind": kind, **fields}
        line = (json.dumps(record, default=str, sort_keys=False) + "\n").encode()
        with self._lock:
            fd = self._open()
            os.write(fd, line)  # one write() on an O_APPEND fd: lines never interleave
            os.fsync(fd)
        return record

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


@dataclass(frozen=True)
class EventRead:
    events: list[dict[str, Any]]
    skipped_lines: int


def read_events(path: str, limit: int | None = None) -> EventRead:
    """All well-formed records (oldest first; the last `limit` when given). Torn lines skipped."""
    events: list[dict[str, Any]] = []
    skipped = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    skipped += 1
                    continue
                if isinstance(rec, dict):
                    events.append(rec)
                else:
                    skipped += 1
    except FileNotFoundError:
        pass
    if limit is not None:
        events = events[-limit:]
    return EventRead(events, skipped)
