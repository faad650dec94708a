"""The ledger store: records and their diffs in one query, canaries, refusals that leave the file
as it was, migrations, and durability under kill -9 with a reader in another process."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tpwarden.cluster.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from tpwarden.cluster.ledger.store import Ledger, LedgerError, LedgerRefused, ledger_path
from tpwarden.cluster.ledger.tables import (
    Evidence,
    KeyValue,
    LevelRow,
    NewCanary,
    NewRecord,
    RepeatRow,
)


def _record(ts: float, rows: dict[tuple[str, str], str | None], cfg: str = "cfg:1") -> NewRecord:
    return NewRecord(
        ts=ts, cluster="c", cfg=cfg, spec_hash="h", action="up", reason="test", who="t",
        run_dir=None, rows=tuple(KeyValue(n, k, v) for (n, k), v in sorted(rows.items())),
    )  # fmt: skip


BASE = {
    ("*", "engine.kv.num_gpu_blocks"): "4520",
    ("node1", "gpu.clock_cap_mhz"): "2000",
    ("node2", "gpu.clock_cap_mhz"): "2000",
    ("node1", "flag.--kv-cache-memory-bytes"): "17179869184",
}


def test_a_new_ledger_is_created_with_its_schema_and_a_diff_is_one_query(tmp_path: Path) -> None:
    path = ledger_path("lab", tmp_path)
    with Ledger.open(path) as led:
        assert led.schema_version == SCHEMA_VERSION
        a = led.add_record(_record(1.0, BASE))
        changed = {**BASE, ("node2", "gpu.clock_cap_mhz"): "1500", ("node3", "new.key"): "x"}
        del changed[("*", "engine.kv.num_gpu_blocks")]
        b = led.add_record(_record(2.0, changed, cfg="cfg:2"))
        diff = {(d.node, d.key): (d.before, d.after) for d in led.diff(a.id, b.id)}
        assert diff == {
            ("*", "engine.kv.num_gpu_blocks"): ("4520", None),
            ("node2", "gpu.clock_cap_mhz"): ("2000", "1500"),
            ("node3", "new.key"): (None, "x"),
        }
        # the changes against the previous record are stored with the record
        assert a.changed == 0 and b.changed == 3
        assert {(c.node, c.key) for c in led.changes(b.id)} == set(diff)
        assert [r.id for r in led.records("c")] == [b.id, a.id]
        assert led.check() == "ok"
    assert path.stat().st_mode & 0o777  # a file, really written


def test_a_null_value_differs_from_a_value_and_equals_null(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as led:
        a = led.add_record(_record(1.0, {("*", "x"): None, ("*", "y"): None}))
        b = led.add_record(_record(2.0, {("*", "x"): "1", ("*", "y"): None}))
        assert [(d.key, d.before, d.after) for d in led.diff(a.id, b.id)] == [("x", None, "1")]


def _canary(record_id: int, tok_s: list[float], state: dict[tuple[str, str], str]) -> NewCanary:
    reps = tuple(
        RepeatRow(level=1, repeat=i, warmup=False, output_tok_s=v, per_stream_tok_s=v,
                  ttft_p50_ms=400.0, itl_p50_ms=180.0, duration_s=10.0, completed=8)
        for i, v in enumerate(tok_s)
    )  # fmt: skip
    level = LevelRow(
        level=1, output_tok_s=sorted(tok_s)[len(tok_s) // 2], per_stream_tok_s=None,
        ttft_p50_ms=400.0, itl_p50_ms=180.0, acceptance_pct=20.0, tokens_per_step=2.4,
        preemptions=0.0, kv_usage_max=0.01, repeats=len(tok_s),
    )  # fmt: skip
    return NewCanary(
        record_id=record_id, cluster="c", cfg="cfg:1", definition="def1", started=10.0,
        finished=20.0, status="ok", reason=None, trigger="manual", server_s=50.0, run_dir=None,
        doc={"levels": [1]}, levels=(level,), repeats=reps,
        state=tuple(KeyValue(n, k, v) for (n, k), v in state.items()),
    )  # fmt: skip


def test_canaries_keep_every_repeat_and_their_state_sample(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as led:
        rec = led.add_record(_record(1.0, BASE))
        c1 = led.add_canary(_canary(rec.id, [12.0, 12.5, 12.2], {("node2", "cotenant.x"): "1"}))
        c2 = led.add_canary(_canary(rec.id, [9.0, 9.1, 9.2], {("node2", "cotenant.x"): "55"}))
        rows = led.canaries("c", definition="def1", status="ok")
        assert [r.id for r in rows] == [c1, c2]  # oldest first
        assert rows[0].levels[1].output_tok_s == 12.2 and rows[0].throughput(1) == 12.2
        assert [r.output_tok_s for r in led.repeats(c2, 1)] == [9.0, 9.1, 9.2]
        assert [(d.key, d.before, d.after) for d in led.state_diff(c1, c2)] == [
            ("cotenant.x", "1", "55")
        ]
        got = led.canary(c1)
        assert got is not None and got.doc == {"levels": [1]}
        led.add_evidence(
            Evidence(
                id=None, ts=3.0, cluster="c", source="pair", subject="KV cache", before="16",
                after="12", definition="def1", level=1, ratio=0.97, lo=0.95, hi=0.99,
                canary_a=c1, canary_b=c2, note=None,
            )
        )  # fmt: skip
        assert [e.subject for e in led.evidence("c", ["KV cache", "clock"])] == ["KV cache"]
        assert led.has_evidence(c1, c2) and not led.has_evidence(c2, c1)


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_a_newer_schema_is_refused_with_the_path_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = _bytes(path)
    with pytest.raises(LedgerRefused) as err:
        Ledger.open(path)
    assert str(path) in str(err.value) and "newer tpwarden" in str(err.value)
    assert "upgrade tpwarden" in str(err.value) and err.value.exit_code == 2
    assert _bytes(path) == before


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all, it is text\n" * 20, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["not-sqlite", "torn-header"],
)
def test_a_damaged_file_is_refused_and_never_overwritten(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "l.sqlite"
    path.write_bytes(content)
    for readonly in (False, True):
        with pytest.raises(LedgerRefused) as err:
            Ledger.open(path, readonly=readonly)
        assert str(path) in str(err.value) and "damaged" in str(err.value)
        assert f"mv {path} {path}.damaged" in str(err.value)
    assert path.read_bytes() == content


def test_another_programs_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (x)")
    before = _bytes(path)
    with pytest.raises(LedgerRefused, match="no ledger schema"):
        Ledger.open(path)
    assert _bytes(path) == before
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA user_version = 1")
    with pytest.raises(LedgerRefused, match="not a tpwarden ledger"):
        Ledger.open(path)


def test_reading_a_missing_ledger_says_how_one_starts(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="starts with the first record"):
        Ledger.open(tmp_path / "none.sqlite", readonly=True)
    assert not (tmp_path / "none.sqlite").exists()


def test_an_older_schema_is_migrated_forward_in_place(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as led:
        rec = led.add_record(_record(1.0, BASE))
    v2 = {**MIGRATIONS, SCHEMA_VERSION + 1: ["ALTER TABLE records ADD COLUMN note TEXT"]}
    with pytest.raises(LedgerError, match="older than this tpwarden"):
        Ledger.open(path, readonly=True, migrations=v2)
    with Ledger.open(path, migrations=v2) as led:
        assert led.schema_version == SCHEMA_VERSION + 1
        assert [k.key for k in led.fingerprint(rec.id)] == sorted(k for _, k in BASE)
    with sqlite3.connect(path) as c:
        assert "note" in [r[1] for r in c.execute("PRAGMA table_info(records)")]


WRITER = textwrap.dedent(
    """
    import sys, time
    from tpwarden.cluster.ledger.store import Ledger
    from tpwarden.cluster.ledger.tables import KeyValue, NewRecord
    led = Ledger.open(sys.argv[1])
    n = int(sys.argv[2])
    i = 0
    while True:
        rows = tuple(KeyValue(f"node{j % 4}", f"key{j:04d}", str(i)) for j in range(n))
        led.add_record(NewRecord(ts=time.time(), cluster="c", cfg=f"cfg:{i}", spec_hash=None,
            action="up", reason="kill test", who=None, run_dir=None, rows=rows))
        i += 1
        print(i, flush=True)
    """
)

READER = textwrap.dedent(
    """
    import sys, time
    from tpwarden.cluster.ledger.store import Ledger
    led = Ledger.open(sys.argv[1], readonly=True)
    n, seen, end = int(sys.argv[2]), 0, time.time() + float(sys.argv[3])
    while time.time() < end:
        for rec in led.records("c", limit=5):
            rows = led.fingerprint(rec.id)
            assert rec.rows == n and len(rows) == n, (rec.id, rec.rows, len(rows))
            assert len({r.value for r in rows}) == 1  # one record's rows, never a mix
            seen += 1
    print(seen, flush=True)
    """
)


def test_a_writer_killed_with_9_leaves_whole_records_and_a_reader_never_sees_half_of_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()  # created by this process; the writer and reader share it
    n = 400  # rows per record: a transaction of several pages, killed mid-way sometimes
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), str(n), "4"], stdout=subprocess.PIPE, env=env,
        text=True,
    )  # fmt: skip
    kills = 0
    for delay in (0.6, 0.9, 0.45):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(n)], stdout=subprocess.PIPE, env=env,
            text=True,
        )  # fmt: skip
        assert writer.stdout is not None
        writer.stdout.readline()  # at least one record written: it is writing now
        time.sleep(delay)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        kills += 1
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0, "the reader saw a half-written record or an error"
    assert int(out.strip()) > 0
    with Ledger.open(path) as led:
        assert led.check() == "ok"
        records = led.records("c")
        assert len(records) >= kills
        for rec in records:
            assert rec.rows == n and len(led.fingerprint(rec.id)) == n
        # the ledger goes on after the kills: the next record is whole too
        led.add_record(_record(time.time(), BASE))
