"""Durable files: the one atomic writer and the one JSON-lines writer of tpwarden.

* `atomic_write_bytes` / `atomic_write_text` / `atomic_write_json`: readers see the old file or
  the new one, never a torn one, and the new one survives a power cut once the call returns.
  The data goes to a unique temp name in the same directory (two writers never clash), is
  fsynced, renamed over the target, and the directory is fsynced (the rename itself is durable).
  The temp name is hidden and ends in `.tmp`: a crash between write and rename leaves the old
  file intact and nothing that a reader globbing the final name (`*.json`, `thermal-*`) picks up.
* `JsonlLog` / `append_jsonl`: one record per line, each line one `write()` on an O_APPEND file
  descriptor, fsynced: lines of concurrent writers (the watchdog daemon and the CLI share
  `events.jsonl`) never interleave, and a process killed with -9 loses at most the line it was
  writing. Readers (`read_jsonl`, `scan_jsonl`) skip a torn line; the next writer first ends it
  with a newline (`open_append`) so the torn bytes never glue onto a good record.

Standard library only: the thermal agent's zipapp (`cluster/node_zipapp.py`) ships this
module to the nodes, so it also holds the defaults the nodes and the control side share (where the
thermal samples go, the agent's port and disk budget): defined here once, read by the settings,
the CLI and the agent (tests/unit/test_one_source.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any  # JSONValue's definition only

log = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

# JSON data as parsed or about to be written: documents, events, evidence payloads. Data, not a
# collaborator: the one place the strict core spells `Any` (mypy's `disallow_any_explicit` holds
# everywhere else, so a collaborator typed `Any` fails the type check; pyproject.toml).
JSONValue = Any  # type: ignore[explicit-any]
JSONObject = dict[str, JSONValue]


# ---- defaults shared with the nodes (tpwarden.thermal's) ------------------------------------
THERMAL_DIR = "/var/log/tpwarden/thermal"  # where each node's agent writes its samples
THERMAL_METRICS_PORT = 9411  # the agent's /metrics
THERMAL_METRICS_HOST = "127.0.0.1"  # loopback unless the inventory opens it to a scraper
THERMAL_BUDGET_MB = 512  # the most disk the samples may use per node


def default_state_dir() -> Path:
    """$TPWARDEN_STATE_DIR, else $XDG_STATE_HOME/tpwarden, else ~/.local/state/tpwarden."""
    base = os.environ.get("TPWARDEN_STATE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(xdg) / "tpwarden"


# ---- atomic whole-file writes -----------------------------------------------------------------
def fsync_dir(directory: StrPath) -> None:
    """Make a rename or a new entry in `directory` durable."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _make_parent(directory: str, mode: int) -> None:
    # A private file (no group/other bits) gets a private directory; else the umask decides.
    os.makedirs(directory, mode=0o700 if not mode & 0o077 else 0o777, exist_ok=True)


def atomic_write_bytes(path: StrPath, data: bytes, *, mode: int = 0o600, sync: bool = True) -> None:
    """Replace `path` with `data` atomically (see the module doc); missing parents are created.

    `mode` is the file's mode, exactly (no umask). `sync=False` keeps the atomic rename but skips
    both fsyncs: only for files that are rewritten every second and worthless after a reboot
    (the lab's fake sysfs)."""
    target = os.path.abspath(path)
    directory, name = os.path.split(target)
    _make_parent(directory, mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(directory)


def atomic_write_text(path: StrPath, text: str, *, mode: int = 0o600, sync: bool = True) -> None:
    """`atomic_write_bytes` of `text` as UTF-8 (newlines written as given)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, sync=sync)


def json_bytes(data: JSONValue) -> bytes:
    """The encoding of tpwarden's JSON state files (`atomic_write_json`): indented by one, keys
    sorted, ASCII, newline-terminated. Also what is copied to a node for a remote state file."""
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def atomic_write_json(path: StrPath, data: JSONValue, *, mode: int = 0o600) -> None:
    """Write a JSON state file (`json_bytes`) atomically and durably; private by default."""
    atomic_write_bytes(path, json_bytes(data), mode=mode)


def read_json(path: StrPath) -> JSONValue | None:
    """The decoded file, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


# ---- JSON lines ---------------------------------------------------------------------------------
def json_line(record: Mapping[str, JSONValue], *, sort_keys: bool = True) -> bytes:
    """One record as one line of tpwarden's JSON-lines files (`default=str` for timestamps and
    paths); `sort_keys=False` keeps the caller's key order (the watchdog's `ts`, `kind` first)."""
    return (json.dumps(dict(record), sort_keys=sort_keys, default=str) + "\n").encode()


def _last_byte(path: str, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1)


def open_append(path: StrPath, mode: int = 0o600) -> tuple[int, int]:
    """Open `path` for appending whole lines: (fd, size). Creates it (and its parents) when
    missing, fsyncing the directory so the new file survives a power cut; a torn last line (a
    writer killed mid-line) is ended with a newline first, so the next line starts whole."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    _make_parent(directory, mode)
    existed = os.path.exists(target)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        size = os.fstat(fd).st_size
        if size and _last_byte(target, size) != b"\n":
            size += os.write(fd, b"\n")
        if not existed:
            fsync_dir(directory)
    except OSError:
        os.close(fd)
        raise
    return fd, size


class JsonlLog:
    """An append-only JSON-lines file (see the module doc). Opens nothing until the first
    `append`; keeps the file open between appends (the watchdog appends every probe);
    `close()` releases it. Thread-safe."""

    def __init__(self, path: StrPath, *, sort_keys: bool = True, mode: int = 0o600) -> None:
        self.path = path
        self._sort_keys = sort_keys
        self._mode = mode
        self._fd: int | None = None
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, JSONValue]) -> None:
        line = json_line(record, sort_keys=self._sort_keys)
        with self._lock:
            if self._fd is None:
                self._fd, _ = open_append(self.path, self._mode)
            try:
                # One write() on an O_APPEND fd: lines of several writers never interleave.
                # A short write (disk full) is not retried, since another writer may append
                # meanwhile; the fd is dropped so the next append reopens and ends the torn line.
                if os.write(self._fd, line) != len(line):
                    raise OSError(f"short write to {self.path}")
                os.fsync(self._fd)
            except OSError:
                self._close()
                raise

    def read(self) -> list[JSONObject]:
        return read_jsonl(self.path)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        with self._lock:
            self._close()

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_jsonl(path: StrPath, record: Mapping[str, JSONValue], *, sort_keys: bool = True) -> None:
    """Append one record to `path` (open, write, fsync, close): for occasional records."""
    with JsonlLog(path, sort_keys=sort_keys) as log:
        log.append(record)


def iter_jsonl(path: StrPath) -> Iterator[JSONObject | None]:
    """Each non-blank line of a JSON-lines file, read as it streams: its record, or None for a
    line that is skipped (torn by a writer killed mid-line, undecodable, or not an object).
    A missing file yields nothing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    yield None
                    continue
                yield rec if isinstance(rec, dict) else None
    except FileNotFoundError:
        return


def scan_jsonl(path: StrPath) -> tuple[list[JSONObject], int]:
    """(every complete record, oldest first; how many lines were skipped): `iter_jsonl`
    collected."""
    records: list[JSONObject] = []
    skipped = 0
    for rec in iter_jsonl(path):
        if rec is None:
            skipped += 1
        else:
            records.append(rec)
    return records, skipped


def read_jsonl(path: StrPath) -> list[JSONObject]:
    """Every complete record of a JSON-lines file (`scan_jsonl` without the count)."""
    return scan_jsonl(path)[0]


def move_aside(path: str, error: object) -> str | None:
    """Rename an invalid file to `<path>.invalid-<ts>` (kept for a post-mortem, never read
    again); returns where it went, or None when it could not be moved."""
    aside = f"{path}.invalid-{int(time.time())}"
    log.error("%s is invalid (%s); moving it to %s", path, error, aside)
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.error("cannot move %s aside: %s", path, exc)
        return None
    return aside
