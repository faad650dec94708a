"""Durable writer: kill -9 safety, rotation by size and day, disk budget, full disk, reader."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tpwarden.node.thermal.writer import DurableWriter, ReadStats, iter_records, read_records

REPO = Path(__file__).resolve().parents[2]
DAY = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def rec(i: int, ts: float = DAY, pad: int = 0) -> dict:
    return {"node": "node1", "ts": ts + i, "seq": i, "pad": "x" * pad}


def test_kill_9_loses_at_most_the_in_flight_record(tmp_path: Path) -> None:
    child = textwrap.dedent(
        f"""
        import sys
        from tpwarden.node.thermal.writer import DurableWriter
        w = DurableWriter({str(tmp_path)!r}, "node1", max_file_bytes=1 << 30, max_total_bytes=1 << 31)
        i = 0
        while True:
            w.write({{"node": "node1", "ts": {DAY} + i, "seq": i, "pad": "y" * 300}})
            sys.stdout.write(f"{{i}}\\n"); sys.stdout.flush()   # ack after write() returned
            i += 1
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child], cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    acked = -1
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while acked < 150 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked = int(line)
    proc.send_signal(signal.SIGKILL)
    for line in proc.stdout:  # acks already in the pipe when it died
        acked = int(line)
    proc.wait()
    assert acked >= 150, "child never got going"
    files = list(tmp_path.glob("thermal-node1-*.jsonl"))
    assert len(files) == 1
    raw = files[0].read_bytes().split(b"\n")
    complete, tail = raw[:-1], raw[-1]
    seqs = [json.loads(x)["seq"] for x in complete]  # every complete line parses
    assert seqs == list(range(len(seqs)))
    assert len(seqs) >= acked + 1  # every acknowledged record is on disk
    assert len(seqs) <= acked + 2  # plus at most the in-flight one
    stats = ReadStats()
    assert [r["seq"] for r in iter_records(files[0], stats)] == seqs
    assert stats.truncated_tail == (1 if tail else 0)


def test_reader_skips_truncated_last_line_and_writer_repairs_it(tmp_path: Path) -> None:
    w = DurableWriter(tmp_path, "node1")
    for i in range(3):
        w.write(rec(i))
    path = w.current_path
    w.close()
    with open(path, "ab") as f:
        f.write(b'{"node": "node1", "ts": 17000')  # what a kill mid-write leaves
    stats = ReadStats()
    assert [r["seq"] for r in iter_records(path, stats)] == [0, 1, 2]
    assert (stats.bad_lines, stats.truncated_tail) == (1, 1)
    w2 = DurableWriter(tmp_path, "node1")  # a restarted agent appends after the torn line
    w2.write(rec(3))
    w2.close()
    stats = ReadStats()
    assert [r["seq"] for r in iter_records(path, stats)] == [0, 1, 2, 3]
    assert (stats.bad_lines, stats.truncated_tail) == (1, 0)


def test_rotation_by_size_and_day_and_budget(tmp_path: Path) -> None:
    w = DurableWriter(tmp_path, "node-a", max_file_bytes=1000, max_total_bytes=3000)
    for i in range(12):  # ~230 bytes each: 4 per file
        assert w.write(rec(i, pad=160))
    names = sorted(p.name for p in w.files())
    assert names == [
        "thermal-node-a-20231114-1.jsonl",
        "thermal-node-a-20231114-2.jsonl",
        "thermal-node-a-20231114.jsonl",
    ]
    assert all(p.stat().st_size <= 1000 for p in w.files())
    w.write(rec(0, ts=DAY + 86400))  # next UTC day
    assert w.current_path.name == "thermal-node-a-20231115.jsonl"
    for i in range(1, 12):
        w.write(rec(i, ts=DAY + 86400, pad=160))
    files = w.files()
    assert sum(p.stat().st_size for p in files) <= 3000
    assert files[0].name.startswith("thermal-node-a-20231115")  # the oldest day went first
    assert w.current_path in files
    records, _ = read_records(files)
    assert records[-1]["seq"] == 11  # newest data kept


def test_restart_continues_todays_latest_file(tmp_path: Path) -> None:
    w = DurableWriter(tmp_path, "n1", max_file_bytes=1000, max_total_bytes=10_000)
    for i in range(6):
        w.write(rec(i, pad=160))
    last = w.current_path
    w.close()
    w2 = DurableWriter(tmp_path, "n1", max_file_bytes=1000, max_total_bytes=10_000)
    w2.write(rec(6))
    assert w2.current_path == last


class FlakyDisk:
    """os.write that fails with an errno while ``full`` (writing part of the line first)."""

    def __init__(self, err: int = errno.ENOSPC) -> None:
        self.full = False
        self.err = err

    def write(self, fd: int, data: bytes) -> int:
        if self.full:
            os.write(fd, data[: len(data) // 2])  # a partial write before the error
            raise OSError(self.err, os.strerror(self.err))
        return os.write(fd, data)


def test_enospc_injected_drops_counts_logs_once_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = FlakyDisk()
    w = DurableWriter(tmp_path, "n1", os_write=disk.write)
    assert w.write(rec(0))
    disk.full = True
    assert [w.write(rec(i)) for i in range(1, 6)] == [False] * 5
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "disk full" in errors[0].getMessage()
    disk.full = False
    assert w.write(rec(6))
    assert w.dropped_total == 5
    records, stats = read_records(w.files())
    assert stats.bad_lines == 0  # partial writes were taken back
    assert [r["seq"] for r in records] == [0, 6]
    assert records[1]["dropped_records"] == 5 and records[1]["dropped_since"] == DAY + 1


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_enospc_on_a_real_full_tmpfs(tiny_tmpfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    logdir = tiny_tmpfs / "thermal"
    w = DurableWriter(logdir, "n1")
    assert w.write(rec(0, pad=500))
    filler = tiny_tmpfs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 1024)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    results = [w.write(rec(i, pad=5000)) for i in range(1, 5)]  # > a tmpfs page
    assert results == [False] * 4 and w.dropped_total == 4
    assert sum("disk full" in r.getMessage() for r in caplog.records) == 1
    filler.unlink()  # space returns
    assert w.write(rec(5))
    records, stats = read_records(w.files())
    assert [r["seq"] for r in records] == [0, 5] and stats.bad_lines == 0
    assert records[1]["dropped_records"] == 4
