"""The morning report lists `tune drafter` runs (issue 33 item 4): what was measured and
recommended, whether it was applied, and the rollout's measurement against the prediction, from
the run directories' tune.json as `tune drafter` writes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tpwarden.cluster.bench.runner import write_json
from tpwarden.cluster.cli import app
from tpwarden.cluster.reports.morning import build_morning, morning_to_json
from tpwarden.cluster.reports.morning_io import load_runs, load_tunes
from tpwarden.cluster.reports.morning_tune import tune_line, tune_summary
from tpwarden.cluster.tune.apply import applied_doc
from tpwarden.cluster.tune.runner import level_json, save
from typer.testing import CliRunner

from tests.unit.test_tune_apply import SHARED, _field_prediction, _record
from tests.unit.test_tune_model import _field_levels

T0 = datetime(2026, 12, 2, 13, 0, tzinfo=UTC).timestamp()


def _tune_run(runs: Path, name: str, at: float, applied: bool) -> Path:
    d = runs / name
    preds, rec = _field_prediction()
    started = datetime.fromtimestamp(at, tz=UTC).isoformat()
    write_json(d / "manifest.json", {"run_id": name, "kind": "sweep", "started_at": started,
                                     "server_defaults": {"drafter_k": 7}})  # fmt: skip
    write_json(d / "table.json", {"kind": "sweep", "rows": []})
    doc = {
        "measured_k": 7,
        "profile": {f"c{c}": w for c, w in SHARED.items()},
        "levels": [level_json(lv) for lv in _field_levels()],
        "recommendation": rec.to_json(),
    }
    if applied:
        doc["applied"] = applied_doc(_record(), preds, rec, SHARED)
    save(d, doc)
    return d


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    runs = tmp_path / "night" / "runs"
    _tune_run(runs, "20261202T131000Z-sweep", T0 + 600, applied=True)
    _tune_run(runs, "20261202T130500Z-sweep", T0 + 300, applied=False)
    _tune_run(runs, "20261201T130000Z-sweep", T0 - 86400, applied=True)  # the day before
    half = runs / "20261202T132000Z-sweep"  # still being written
    write_json(
        half / "manifest.json", {"run_id": half.name, "started_at": "2026-12-02T13:20:00+00:00"}
    )
    (half / "tune.json").write_text('{"levels": [')
    return runs


def test_tune_runs_in_the_window_with_prediction_and_measurement(runs: Path) -> None:
    rep = build_morning([], [], load_runs(runs), since=T0, until=T0 + 3600,
                        tune_runs=load_tunes(runs))  # fmt: skip
    assert [t.run_id for t in rep.tunes] == ["20261202T130500Z-sweep", "20261202T131000Z-sweep"]
    plain, applied = rep.tunes
    _, rec = _field_prediction()
    assert plain.applied is None and tune_line(plain).endswith("; not applied")
    assert (applied.measured_k, applied.recommended_k, applied.to_k) == (7, 3, 3)
    assert applied.applied == "done" and applied.kept is True
    assert applied.predicted_gain == pytest.approx(rec.score)
    c32 = next(lv for lv in applied.levels if lv["concurrency"] == 32)
    line = tune_line(applied)
    assert line.startswith(f"k=7 measured, k=3 recommended ({rec.score:.3f}x predicted")
    assert "applied: kept" in line
    assert f"{applied.measured_gain:.3f}x measured" in line
    assert (
        f"c=32 predicted {c32['predicted_tok_s']:,.1f}, measured 171.0 ({c32['ratio']:.2f})" in line
    )
    assert "c=4 predicted" in line and "not measured" in line
    doc = morning_to_json(rep)
    assert [t["run_id"] for t in doc["tune"]] == [t.run_id for t in rep.tunes]
    assert json.loads(json.dumps(doc))["tune"][1]["kept"] is True


def test_a_rolled_back_tune_says_so() -> None:
    preds, rec = _field_prediction()
    doc = {"measured_k": 7, "recommendation": rec.to_json(),
           "applied": applied_doc(_record("rolled_back"), preds, rec, SHARED)}  # fmt: skip
    t = tune_summary("r", T0, doc)
    assert t.kept is False and "applied: rolled_back" in tune_line(t)
    assert tune_summary("r", T0, {}).recommended_k is None  # an older document: no crash


def test_cli_report_lists_the_tune_runs(runs: Path, tmp_path: Path) -> None:
    night = runs.parent
    (night / "events.jsonl").write_text("")
    html = tmp_path / "night.html"
    args = ["report", "--from-dir", str(night), "--since", str(T0), "--until", str(T0 + 3600)]
    result = CliRunner().invoke(app, [*args, "--html", str(html)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "tune " in out and "20261202T131000Z-sweep: k=7 measured, k=3 recommended" in out
    assert "20261201T130000Z-sweep" not in out
    page = html.read_text()
    assert "Draft-length tuning in the window" in page and "applied: kept" in page
    js = CliRunner().invoke(app, [*args, "--json"])
    assert [t["run_id"] for t in json.loads(js.stdout)["tune"]] == [
        "20261202T130500Z-sweep", "20261202T131000Z-sweep",
    ]  # fmt: skip
