"""The one atomic writer and the one JSON-lines writer (tpwarden.cluster.durable)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tpwarden.cluster import durable
from tpwarden.cluster.durable import (
    JsonlLog,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    json_bytes,
    read_json,
    read_jsonl,
    scan_jsonl,
)
from tpwarden.cluster.event_log import EventLog, read_events


# ---- atomic writer ------------------------------------------------------------------------------
def test_two_writers_in_one_directory_at_once_use_different_temp_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    both_written = threading.Barrier(2, timeout=10)
    sources: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        sources.append(os.path.basename(src))
        both_written.wait()  # both temp files exist now: a shared name would have clashed
        real_replace(src, dst)

    monkeypatch.setattr(durable.os, "replace", replace)
    docs = [{"writer": 1, "pad": "a" * 5000}, {"writer": 2, "pad": "b" * 5000}]
    threads = [threading.Thread(target=atomic_write_json, args=(target, d)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(sources)) == 2
    assert json.loads(target.read_text()) in docs  # one whole document, never a mix
    assert os.listdir(tmp_path) == ["state.json"]


def test_an_error_between_write_and_replace_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "hold.json"
    atomic_write_json(target, {"v": 1})

    def boom(src: str, dst: str) -> None:
        raise OSError("injected")

    monkeypatch.setattr(durable.os, "replace", boom)
    with pytest.raises(OSError, match="injected"):
        atomic_write_json(target, {"v": 2})
    assert read_json(target) == {"v": 1}
    assert os.listdir(tmp_path) == ["hold.json"]


_CRASH = """
import os, signal, sys
from tpwarden.cluster import durable
def crash(src, dst):
    os.kill(os.getpid(), signal.SIGKILL)  # killed after the temp file is written and fsynced
durable.os.replace = crash
durable.atomic_write_json(sys.argv[1], {"v": 2})
"""


def test_a_crash_between_write_and_replace_leaves_the_old_file_and_nothing_a_glob_finds(
    tmp_path: Path,
) -> None:
    target = tmp_path / "thermal-n1-20260101.json"
    atomic_write_json(target, {"v": 1})
    proc = subprocess.run([sys.executable, "-c", _CRASH, str(target)], check=False)
    assert proc.returncode == -9
    assert read_json(target) == {"v": 1}
    stray = [n for n in os.listdir(tmp_path) if n != target.name]
    assert len(stray) == 1 and stray[0].startswith(".") and stray[0].endswith(".tmp")
    for pattern in ("*.json", "thermal-*", f"{target.name}*", "thermal-n1-*.json"):
        assert sorted(tmp_path.glob(pattern)) == [target], pattern


def test_the_file_then_its_directory_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[bool, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    target = tmp_path / "sub" / "current.json"
    atomic_write_text(target, "x\n")
    assert [is_dir for is_dir, _ in synced] == [False, True]
    assert synced[0][1] == target.stat().st_ino  # the renamed temp file is the target now
    assert synced[1][1] == target.parent.stat().st_ino
    synced.clear()
    atomic_write_text(tmp_path / "sysfs-temp", "41000\n", mode=0o644, sync=False)
    assert synced == []


def test_mode_is_exact_and_private_by_default(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic_write_bytes(tmp_path / "shared" / "a.csv", b"x", mode=0o644)
    finally:
        os.umask(old)
    atomic_write_json(tmp_path / "state" / "b.json", {})
    assert stat.S_IMODE((tmp_path / "shared" / "a.csv").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "state" / "b.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700  # made private


def test_json_state_encoding_is_unchanged(tmp_path: Path) -> None:
    doc = {"b": [1, 2], "a": {"z": None, "é": "ü"}}
    atomic_write_json(tmp_path / "s.json", doc)
    expected = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    assert (tmp_path / "s.json").read_bytes() == expected.encode() == json_bytes(doc)


# ---- JSON lines ---------------------------------------------------------------------------------
def test_concurrent_appends_from_two_writers_are_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    daemon, cli = JsonlLog(path), JsonlLog(path)  # two fds, as the daemon and the CLI

    def burst(log: JsonlLog, who: str) -> None:
        for i in range(100):
            log.append({"who": who, "i": i, "pad": who * 20000})  # > a pipe buffer, < a write

    threads = [
        threading.Thread(target=burst, args=(lg, w)) for lg, w in ((daemon, "d"), (cli, "c"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    daemon.close()
    cli.close()
    records, skipped = scan_jsonl(path)
    assert skipped == 0 and len(records) == 200
    assert path.read_bytes().count(b"\n") == 200
    assert [r["i"] for r in records if r["who"] == "d"] == list(range(100))


def test_line_encodings_are_byte_identical_to_before(tmp_path: Path) -> None:
    rec: dict[str, Any] = {"ts": "2026-01-01T00:00:00+00:00", "event": "restart", "why": "é"}
    append_jsonl(tmp_path / "control.jsonl", rec)
    expected = json.dumps(rec, sort_keys=True, default=str) + "\n"
    assert (tmp_path / "control.jsonl").read_bytes() == expected.encode()
    log = EventLog(str(tmp_path / "events.jsonl"), lambda: 5.0)
    log.append("hold_set", until=9.0, reason="k=3", by="me", path=tmp_path)
    log.close()
    line = (tmp_path / "events.jsonl").read_text()
    want = {"ts": 5.0, "kind": "hold_set", "until": 9.0, "reason": "k=3", "by": "me"}
    assert line == json.dumps({**want, "path": tmp_path}, default=str) + "\n"  # ts, kind first


def test_a_torn_last_line_is_skipped_and_ended_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "boots.jsonl"
    append_jsonl(path, {"n": 1})
    with open(path, "ab") as f:
        f.write(b'{"n": 2, "torn')  # a writer killed mid-line
    assert read_jsonl(path) == [{"n": 1}]
    append_jsonl(path, {"n": 3})
    assert scan_jsonl(path) == ([{"n": 1}, {"n": 3}], 1)
    assert read_events(str(path)).skipped_lines == 1


def test_a_failed_append_reopens_and_ends_the_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    log = JsonlLog(path)
    log.append({"n": 1})
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        monkeypatch.setattr(durable.os, "write", real_write)
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "write", half_then_full)
    with pytest.raises(OSError):
        log.append({"n": 2, "pad": "x" * 100})
    log.append({"n": 3})
    log.close()
    assert scan_jsonl(path) == ([{"n": 1}, {"n": 3}], 1)


def test_a_new_log_file_fsyncs_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            dirs.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    append_jsonl(tmp_path / "new" / "history.jsonl", {"n": 1})
    append_jsonl(tmp_path / "new" / "history.jsonl", {"n": 2})
    assert dirs == [(tmp_path / "new").stat().st_ino]  # once, when the file was created
