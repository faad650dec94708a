"""`tpwarden tune drafter` without a cluster: --from-run (a saved tune.json), --dry-run, bad
input; and the pieces its measurement joins (pages per level, earlier sweeps as history)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from tpwarden.cluster.bench.parse import load_result_text, parse_result
from tpwarden.cluster.bench.plan import BenchError
from tpwarden.cluster.bench.runner import BenchRun, LevelOutcome
from tpwarden.cluster.cli import app
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.tune.history import history_points
from tpwarden.cluster.tune.model import LevelMeasure
from tpwarden.cluster.tune.runner import RecordingRunner, level_json, levels_from, save
from typer.testing import CliRunner

from tests.unit.test_tune_model import FIELD_DRAFTS, FIELD_K7, FIELD_SURVIVAL

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[2]


def _field_run(tmp_path: Path) -> Path:
    counts = DraftCounts(FIELD_DRAFTS, tuple(round(r * FIELD_DRAFTS) for r in FIELD_SURVIVAL))
    levels = [LevelMeasure(c, counts, itl, agg) for c, agg, itl in FIELD_K7]
    save(tmp_path, {"levels": [level_json(lv) for lv in levels]})
    return tmp_path


def test_from_run_json_recommends_the_field_reports_k(tmp_path):
    run = _field_run(tmp_path)
    args = ["tune", "drafter", "--from-run", str(run), "--profile", "c1:0.2,c8:0.5,c32:0.3"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["command"] == "tune drafter" and doc["schema_version"] == 1
    assert doc["measured_k"] == 7 and doc["recommendation"]["k"] == 3
    assert len(doc["predictions"]) == 8 * len(FIELD_K7)  # k' = 0..7 at every level
    k0 = [p for p in doc["predictions"] if p["k"] == 0]
    assert all(p["tokens_per_step"] == 1.0 for p in k0)
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "recommended k = 3" in table.output and "extrapolated" in table.output


@pytest.mark.parametrize("extra", [["--profile", "c2:1"], ["--profile", "c1"], ["--levels", "0,8"]])
def test_bad_profile_or_levels_exit_2(tmp_path, extra):
    run = _field_run(tmp_path)
    args = ["tune", "drafter", "--from-run", str(run), *extra]
    if extra[0] == "--levels":
        args = ["tune", "drafter", "-i", str(ROOT / "inventory.example.yml"), "--dry-run", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_dry_run_plans_one_client_per_level():
    inv = str(ROOT / "inventory.example.yml")
    result = CliRunner().invoke(
        app, ["tune", "drafter", "-i", inv, "--levels", "1,8,32", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["dry_run"] is True
    argv = [c["command"] for c in doc["containers"]]
    assert [a[a.index("--max-concurrency") + 1] for a in argv] == ["1", "8", "32"]


def _outcome(level: int) -> LevelOutcome:
    raw = load_result_text((FIX / "bench" / "vllm-0.33.0-captured-sweep-c1.json").read_text())
    return LevelOutcome(level, parse_result(raw), raw, None, {})


def test_levels_from_pairs_the_pages_of_each_level(tmp_path):
    before = (FIX / "tune" / "v1-layout_k3_ngram_before.prom.txt").read_text()
    after = (FIX / "tune" / "v1-layout_k3_ngram_after.prom.txt").read_text()
    run = BenchRun("r", tmp_path, "sweep", {}, [_outcome(1)])
    (lv,) = levels_from(run, [before, after])
    assert lv.counts == DraftCounts(4000, (2600, 1500, 800), 11000)
    assert lv.itl_ms == run.outcomes[0].result.itl_p50_ms
    with pytest.raises(BenchError, match="pages"):
        levels_from(run, [before])
    with pytest.raises(BenchError, match="unreadable"):
        levels_from(run, [before, None])
    idle = ROOT / "tests/fixtures/real/metrics/v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt"
    with pytest.raises(BenchError, match="no drafter"):
        levels_from(run, [idle.read_text()] * 2)


def test_history_points_from_an_earlier_sweep():
    manifest = json.loads((FIX / "bench" / "manifest-captured-lab.json").read_text())
    table = {
        "kind": "sweep",
        "rows": [{"level": 1, "itl_p50_ms": 12.0}, {"level": 4, "itl_p50_ms": None}],
    }
    (p,) = history_points(manifest, table)
    assert (p.k, p.concurrency, p.step_ms) == (3, 1, 12.0)  # drafter_k from the manifest
    assert history_points(manifest, {**table, "kind": "prefill"}) == []
    no_drafter = {**manifest, "server_defaults": {"drafter_k": None}}
    assert history_points(no_drafter, table) == []


def test_recording_runner_keeps_every_page_it_reads():
    page = (FIX / "tune" / "v1-layout_k3_ngram_after.prom.txt").read_text()
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=page)

    ctl = SimpleNamespace(spec=SimpleNamespace(api_base="http://127.0.0.1:8000"))
    runner = RecordingRunner(
        ctl, Path("unused"), http=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert runner._metrics() == page and runner._metrics() == page
    assert runner.pages == [page, page] and seen == ["http://127.0.0.1:8000/metrics"] * 2
