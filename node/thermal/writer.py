"""Durable JSON-lines writer for thermal samples, and a tolerant reader.

Each record is one ``os.write`` of one line followed by ``fsync``: a process killed with -9
loses at most the record it was writing. Files are ``thermal-<node>-YYYYMMDD[-N].jsonl`` (UTC
date of the record), rotated by size and by day; the oldest files are deleted to keep the total
under a byte budget. When the disk is full (ENOSPC/EDQUOT) the writer logs once, drops and counts
records, and resumes when space returns; the first record written after notes the drop.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, open_append

log = logging.getLogger(__name__)

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


@dataclass(frozen=True)
class _FileKey:
    day: str
    n: int


def _day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y%m%d")


class DurableWriter:
    """Append-only, fsync-per-record writer. Opens nothing until the first write."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        node: str,
        *,
        max_file_bytes: int = 64 * 1024 * 1024,
        max_total_bytes: int = 1024 * 1024 * 1024,
        os_write: Callable[[int, bytes], int] = os.write,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        if max_file_bytes <= 0 or max_total_bytes < max_file_bytes:
            raise ValueError("need 0 < max_file_bytes <= max_total_bytes")
        self.directory = Path(directory)
        self.node = node
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self._os_write = os_write  # injectable OS boundary (tests simulate ENOSPC/EIO)
        self._fsync = fsync
        self._pattern = re.compile(rf"thermal-{re.escape(node)}-(\d{{8}})(?:-(\d+))?\.jsonl")
        self._fd: int | None = None
        self._key: _FileKey | None = None
        self._size = 0
        self.records_written = 0
        self.dropped_total = 0  # records lost to write errors since start
        self._dropped_pending = 0  # dropped since the last successful write
        self._dropped_since: float | None = None
        self._failing_errno: int | None = None

    # -- naming -----------------------------------------------------------------------------------
    def path_for(self, key: _FileKey) -> Path:
        suffix = f"-{key.n}" if key.n else ""
        return self.directory / f"thermal-{self.node}-{key.day}{suffix}.jsonl"

    def files(self) -> list[Path]:
        """This node's files, oldest first."""
        found: list[tuple[str, int, Path]] = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            m = self._pattern.fullmatch(name)
            if m:
                found.append((m.group(1), int(m.group(2) or 0), self.directory / name))
        return [p for _, _, p in sorted(found)]

    @property
    def current_path(self) -> Path | None:
        return self.path_for(self._key) if self._key else None

    # -- open / rotate ----------------------------------------------------------------------------
    def _open(self, key: _FileKey) -> None:
        # Shared with every JSON-lines file: a torn last line is ended, a new file's directory
        # entry fsynced. World-readable: `thermal fetch` and node operators read these files.
        fd, size = open_append(self.path_for(key), mode=0o644)
        self._fd, self._key, self._size = fd, key, size

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None

    def _target(self, day: str, nbytes: int) -> _FileKey:
        """The file this record goes to: the current one, or the next by day or by size."""
        if self._key is None:
            same_day = [p for p in self.files() if self._pattern.fullmatch(p.name).group(1) == day]  # type: ignore[union-attr]
            n = 0
            if same_day:
                m = self._pattern.fullmatch(same_day[-1].name)
                n = int(m.group(2) or 0) if m else 0
            key = _FileKey(day, n)
            path = self.path_for(key)
            if path.exists() and path.stat().st_size + nbytes > self.max_file_bytes:
                key = _FileKey(day, n + 1)
            return key
        if self._key.day != day:
            return _FileKey(day, 0)
        if self._size and self._size + nbytes > self.max_file_bytes:
            return _FileKey(day, self._key.n + 1)
        return self._key

    def enforce_budget(self) -> list[Path]:
        """Delete the oldest files (never the open one) so that the others plus a full-grown
        current file fit the budget: the total never exceeds it."""
        files = self.files()
        sizes = {p: p.stat().st_size for p in files if p.exists()}
        current = self.current_path
        total = sum(v for p, v in sizes.items() if p != current)
        total += max(sizes.get(current, 0), self.max_file_bytes) if current else 0
        removed: list[Path] = []
        for p in files:
            if total <= self.max_total_bytes:
                break
            if p == current:
                continue
            os.unlink(p)
            total -= sizes.get(p, 0)
            removed.append(p)
            log.info("thermal budget: removed %s", p.name)
        return removed

    # -- writing ------------------------------------------------------------------------------------
    def write(self, record: JSONObject) -> bool:
        """Append one record durably. Returns False when it was dropped (disk full, I/O error)."""
        ts = float(record.get("ts", 0.0))
        if self._dropped_pending:
            record = {
                **record,
                "dropped_records": self._dropped_pending,
                "dropped_since": self._dropped_since,
            }
        # Its own encoding, kept byte-for-byte: compact (the files are budgeted by bytes) and
        # strict standard JSON (no NaN), unlike `durable.json_line`'s readable default.
        line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            key = self._target(_day_of(ts), len(line))
            if key != self._key:
                self._close_fd()
                self._open(key)
                self.enforce_budget()
            self._append(line)
        except OSError as exc:
            self._drop(exc, ts)
            return False
        if self._failing_errno is not None:
            log.warning(
                "thermal log writable again: %d record(s) dropped since %s",
                self._dropped_pending,
                self._dropped_since,
            )
        self._failing_errno = None
        self._dropped_pending = 0
        self._dropped_since = None
        self.records_written += 1
        return True

    def _append(self, line: bytes) -> None:
        # Not `durable.JsonlLog.append`: this writer is the file's only writer, so it can retry a
        # short write and, on an error, cut the file back to its last whole line (JsonlLog's
        # files have several writers, where a truncate could cut another's record), and its
        # OS calls are injectable to test ENOSPC and EIO.
        assert self._fd is not None
        start = self._size
        try:
            view = memoryview(line)
            while view:
                n = self._os_write(self._fd, view.tobytes())
                view = view[n:]
                self._size += n
            self._fsync(self._fd)
        except OSError:
            # Take back a partial line so the file holds only whole records.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            self._size = start
            raise

    def _drop(self, exc: OSError, ts: float) -> None:
        self.dropped_total += 1
        if not self._dropped_pending:
            self._dropped_since = ts
        self._dropped_pending += 1
        if exc.errno != self._failing_errno:  # log once per failure kind, not per record
            what = "disk full" if exc.errno in _FULL_ERRNOS else "write failed"
            log.error("thermal log %s (%s): dropping records until it can write again", what, exc)
            self._failing_errno = exc.errno
        if exc.errno not in _FULL_ERRNOS:
            self._close_fd()  # reopen next time (EIO, a removed directory...)
            self._key = None

    def close(self) -> None:
        self._close_fd()
        self._key = None


# -- reader ---------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ReadStats:
    lines: int = 0
    records: int = 0
    bad_lines: int = 0  # unparseable lines (a crash's partial line, a torn write)
    truncated_tail: int = 0  # of those, files whose last line had no newline


def iter_records(
    path: str | os.PathLike[str], stats: ReadStats | None = None
) -> Iterator[JSONObject]:
    """Records of one file. A truncated last line (kill -9 mid-write) and any other unparseable
    line are skipped and counted in ``stats``, never raised."""
    stats = stats if stats is not None else ReadStats()
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    for raw in lines:
        if not raw.strip():
            continue
        stats.lines += 1
        rec = _parse(raw)
        if rec is None:
            stats.bad_lines += 1
        else:
            stats.records += 1
            yield rec
    if tail.strip():
        stats.lines += 1
        rec = _parse(tail)
        if rec is None:
            stats.bad_lines += 1
            stats.truncated_tail += 1
        else:
            stats.records += 1
            yield rec


def _parse(raw: bytes) -> JSONObject | None:
    try:
        rec = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def read_records(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[JSONObject], ReadStats]:
    stats = ReadStats()
    out: list[JSONObject] = []
    for p in paths:
        out.extend(iter_records(p, stats))
    return out, stats
