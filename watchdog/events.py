"""The watchdog's event log: `{"ts": clock(), "kind": kind, **fields}` per line, in that key
order, written by `tpwarden.cluster.durable.JsonlLog` (one fsynced line per record; a torn last
line is skipped by `read_events()` and ended by the next writer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpwarden.cluster.durable import JsonlLog, scan_jsonl


class EventLog:
    """Appends timestamped events to `path`. Opens the file on first use; `close()` releases it."""

    def __init__(self, path: str, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._log = JsonlLog(path, sort_keys=False)

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"ts": self._clock(), "kind": kind, **fields}
        self._log.append(record)
        return record

    def close(self) -> None:
        self._log.close()


@dataclass(frozen=True)
class EventRead:
    events: list[dict[str, Any]]
    skipped_lines: int


def read_events(path: str, limit: int | None = None) -> EventRead:
    """All well-formed records (oldest first; the last `limit` when given). Torn lines skipped."""
    events, skipped = scan_jsonl(path)
    if limit is not None:
        events = events[-limit:]
    return EventRead(events, skipped)
