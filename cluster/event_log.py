"""The watchdog's event log: `{"ts": clock(), "kind": kind, **fields}` per line, in that key
order, written by `tpwarden.cluster.durable.JsonlLog` (one fsynced line per record; a torn last
line is skipped by `read_events()` and ended by the next writer).

The log rotates by size: past `max_bytes` it becomes `events.jsonl.1` (one rotated file kept,
the older one dropped) and a new file starts. `read_events()` streams both, oldest first, and
keeps only the last `limit` records in memory when asked to.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tpwarden.cluster.durable import JsonlLog, JSONObject, JSONValue, iter_jsonl


def rotated_path(path: str) -> str:
    return path + ".1"


class EventLog:
    """Appends timestamped events to `path`. Opens the file on first use; `close()` releases it."""

    def __init__(
        self, path: str, clock: Callable[[], float], *, max_bytes: int | None = None
    ) -> None:
        self.path = path
        self._clock = clock
        self._max_bytes = max_bytes
        self._log = JsonlLog(path, sort_keys=False)

    def append(self, kind: str, **fields: JSONValue) -> JSONObject:
        record = {"ts": self._clock(), "kind": kind, **fields}
        self._log.append(record)
        if self._max_bytes is not None and os.path.getsize(self.path) >= self._max_bytes:
            self._log.close()
            os.replace(self.path, rotated_path(self.path))  # the next append starts a new file
        return record

    def close(self) -> None:
        self._log.close()


@dataclass(frozen=True)
class EventRead:
    events: list[JSONObject]
    skipped_lines: int


def read_events(path: str, limit: int | None = None, since: float | None = None) -> EventRead:
    """Every well-formed record of the rotated file and the current one, oldest first (the
    last `limit` when given; with `since`, none stamped earlier), read line by line. Torn or
    non-object lines are skipped."""
    events: deque[JSONObject] = deque(maxlen=limit)
    skipped = 0
    for part in (rotated_path(path), path):
        for rec in iter_jsonl(part):
            if rec is None:
                skipped += 1
            elif since is None or not _before(rec, since):
                events.append(rec)
    return EventRead(list(events), skipped)


def _before(rec: JSONObject, since: float) -> bool:
    ts = rec.get("ts")
    return isinstance(ts, int | float) and not isinstance(ts, bool) and ts < since
