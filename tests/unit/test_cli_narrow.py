"""80 columns (issue 52): the incident dossier and the watchdog's event table fit the terminal,
long values shortened on the screen and whole in --json and in the files. On the real dossiers
of the lab's real engine (tests/fixtures/dossier) and the shipped sample night's event log."""

from __future__ import annotations

import json
import tarfile
from importlib import resources
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli.common import console
from tpwarden.cluster.cli.narrow import (
    ELLIPSIS,
    first_fitting,
    pairs,
    short_frames,
    shorten,
    table_lines,
)
from tpwarden.cluster.reports.incident_verdict import verdict
from tpwarden.watchdog.incidents import IncidentStore
from typer.testing import CliRunner

DOSSIERS = Path(__file__).resolve().parents[1] / "fixtures" / "dossier"
REAL = sorted(p.name for p in DOSSIERS.glob("*.json"))


@pytest.fixture(autouse=True)
def width_from_columns(monkeypatch):
    """The console follows COLUMNS (rich fixes its width when COLUMNS is set as it is built)."""
    monkeypatch.setattr(console, "_width", None)


def run(width: int, *argv: str):
    out = CliRunner().invoke(app, list(argv), env={"COLUMNS": str(width)})
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, dict]]]:
    """The real dossiers with their verdicts, as the watchdog stores them: file name -> (id,
    dossier)."""
    saved = {}
    for name in REAL:
        doc = json.loads((DOSSIERS / name).read_text())
        doc["verdict"] = verdict(doc).to_json()
        saved[name] = (IncidentStore(tmp_path).save(json.loads(json.dumps(doc))), doc)
    return tmp_path, saved


def test_the_real_dossiers_are_there():
    assert len(REAL) == 4


@pytest.mark.parametrize("name", REAL)
def test_incident_show_fits_80_columns(store, name):
    sd, saved = store
    ident, doc = saved[name]
    lines = run(80, "incident", "show", ident, "--state-dir", str(sd)).splitlines()
    assert max(len(line) for line in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    v = doc["verdict"]
    summary = lines[: lines.index("")]
    # the summary: when and why, the suspect, one line per fact, nothing wrapped
    assert len(summary) == 3 + len(v["facts"])
    assert summary[2] == f"suspect: {v['suspect']} (rank {v['rank']})"
    for line, fact in zip(summary[3:], v["facts"], strict=True):
        whole = (f"  - {fact}", f"  - {short_frames(fact)}")  # a frame's path cut first
        assert line in whole or (line.endswith(ELLIPSIS) and len(line) == 80), line
    # every process of every node is there, on one line or two, none wrapped mid-word
    pids = [
        p for n in doc["nodes"].values() for p in (n.get("collected") or {}).get("processes") or []
    ]
    assert sum(line.lstrip().startswith("pid ") for line in lines) == len(pids)


def test_a_shortened_fact_is_whole_in_json_and_in_the_dossier_file(store):
    sd, saved = store
    ident, _ = saved["vllm-watchdog-paused-node3.json"]
    screen = run(80, "incident", "show", ident, "--state-dir", str(sd))
    fact = "process 18 in the container (VLLM::Worker_TP) frozen by the cgroup freezer (D at "
    fact += "__refrigerator)"
    assert fact not in screen and f"  - {fact[:75]}{ELLIPSIS}" in screen
    shown = json.loads(run(80, "incident", "show", ident, "--state-dir", str(sd), "--json"))
    assert fact in shown["incident"]["verdict"]["facts"]
    assert fact in json.loads((sd / "incidents" / f"{ident}.json").read_text())["verdict"]["facts"]
    wide = run(200, "incident", "show", ident, "--state-dir", str(sd))
    assert f"  - {fact}\n" in wide  # a terminal wide enough gets it whole


def test_incident_list_is_one_line_per_dossier_at_80_columns(store):
    sd, saved = store
    lines = run(80, "incident", "list", "--state-dir", str(sd)).splitlines()
    assert len(lines) == 1 + len(saved)
    assert lines[0].split() == ["id", "taken", "suspect", "verdict"]
    assert all(len(line) <= 80 for line in lines)
    for ident, _ in saved.values():
        [row] = [line for line in lines if line.startswith(ident)]
        assert " node3 " in row and "container" in row


def _sample_events(tmp_path: Path) -> list[dict]:
    sample = resources.files("tpwarden.cluster").joinpath("data/sample-night.tar.gz")
    with resources.as_file(sample) as tar, tarfile.open(tar) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/events.jsonl")
                      or m.name == "events.jsonl" or m.name == "./events.jsonl")  # fmt: skip
        text = tf.extractfile(member).read().decode()  # type: ignore[union-attr]
    (tmp_path / "events.jsonl").write_text(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_watchdog_history_is_one_line_per_event_at_80_columns(tmp_path):
    events = [e for e in _sample_events(tmp_path) if e["kind"] != "probe"]
    out = run(80, "watchdog", "history", "--state-dir", str(tmp_path), "--limit", "1000")
    lines = out.splitlines()
    assert len(lines) == 1 + len(events)
    assert all(len(line) <= 80 for line in lines), [ln for ln in lines if len(ln) > 80]
    assert "{" not in out  # key=value pairs, not JSON
    [begin] = [line for line in lines if " restart_begin " in line]
    assert begin.startswith("2026-12-02 13:10:00Z  restart_begin  restart_id=r1-1796217000 ")
    assert begin.endswith(ELLIPSIS)
    doc = json.loads(
        run(80, "watchdog", "history", "--state-dir", str(tmp_path), "--limit", "1000", "--json")
    )
    [whole] = [e for e in doc["events"] if e["kind"] == "restart_begin"]
    assert whole["reason"].endswith("no engine progress for 120s (running=None, waiting=None)")
    assert "evidence" in whole


# -- the pure helpers ----------------------------------------------------------------------------
def test_shorten_keeps_the_indent_and_cuts_frame_paths_first():
    assert shorten("  short", 80) == "  short"
    assert shorten("a\nb", 80) == "a b"
    frame = "    waits in all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert shorten(frame, 80) == frame
    assert shorten(frame, 52) == f"    waits in all_reduce ({ELLIPSIS}/distributed_c10d.py:3252)"
    assert shorten(frame, 20) == "    waits in all_re" + ELLIPSIS
    assert len(shorten("x" * 100, 80)) == 80


def test_first_fitting_and_table_lines():
    assert first_fitting(["a long one", "short"], 6) == "short"
    assert first_fitting(["a long one", "still long"], 6) == "still" + ELLIPSIS
    lines = table_lines(("a", "bb", "c"), [("xxx", "y", "z" * 50)], 20)
    assert lines == ["a    bb  c", "xxx  y   " + "z" * 10 + ELLIPSIS]


def test_pairs_are_flat_and_short():
    doc = {"ok": True, "error": None, "n": 3, "why": "w" * 100, "more": {"a": [1, 2]}}
    assert pairs(doc, 10) == f"ok=true n=3 why={'w' * 9}{ELLIPSIS} more={{a: [1, 2{ELLIPSIS}"
