"""The morning report's canaries: each against its configuration's own history, `why` when it
was slower, deferred ones with their reason; read from the ledger named in the sources."""

from __future__ import annotations

from pathlib import Path

from tpwarden.cluster.ledger.tables import NewCanary
from tpwarden.cluster.reports.morning import morning_to_json
from tpwarden.cluster.reports.morning_io import Sources, morning_from_files
from tpwarden.cluster.reports.morning_ledger import canary_lines, load_canaries

from .test_ledger_why import Lab, _regression


def _ledger(tmp_path: Path) -> tuple[Path, float]:
    lab = Lab(tmp_path / "ledger.sqlite")
    _regression(lab)
    lab.led.add_canary(NewCanary(
        record_id=lab.record_id, cluster="lab", cfg=lab.cfg, definition="def-ko",
        started=lab.t + 60, finished=lab.t + 61, status="deferred",
        reason="user load: 1 running and 0 waiting beyond the canary's own 0; no request sent",
        trigger="schedule", server_s=0.0, run_dir=None, doc={},
    ))  # fmt: skip
    lab.led.close()
    return tmp_path / "ledger.sqlite", lab.t


def test_the_nights_canaries_against_their_history_with_why(tmp_path: Path) -> None:
    path, end = _ledger(tmp_path)
    got = load_canaries(path, end - 2 * 3600 - 10, end + 120)
    assert [c.status for c in got] == ["ok", "ok", "deferred"]
    slow = got[1]
    assert slow.verdict == "slower" and slow.causes == (
        "KV cache",
        "GPU clock cap",
        "co-tenant stress-ng",
    )
    assert slow.levels[0]["history_n"] == 1 and 0.9 < slow.levels[0]["ratio"] < 1.1
    lines = canary_lines(got, lambda ts: "03:30")
    assert "SLOWER than the best earlier" in lines[1] and "why: KV cache, GPU clock cap" in lines[1]
    assert "deferred: user load" in lines[2]
    assert load_canaries(tmp_path / "none.sqlite", 0, end) == []


def test_the_report_reads_the_ledger_of_its_sources(tmp_path: Path) -> None:
    path, end = _ledger(tmp_path)
    src = Sources(tmp_path / "events.jsonl", tmp_path, ledger=path)
    rep, _ = morning_from_files(src, since=end - 2 * 3600 - 10, until=end + 3600)
    doc = morning_to_json(rep)
    assert [c["status"] for c in doc["canaries"]] == ["ok", "ok", "deferred"]
