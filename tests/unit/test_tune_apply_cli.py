"""`tpwarden tune drafter --apply` end to end without a cluster: the sweep, the restart and the
after-measurement are faked at their seams (the controller, the rollout's ports), everything
between them is the real code: the recommendation, the rollout sequence writing the inventory,
its guards, the tune.json record and the predicted-vs-measured lines. Also what --apply refuses
before contacting anything, its --dry-run plan, and --plot."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from tpwarden.cluster.bench.runner import BenchRun
from tpwarden.cluster.cli import app, tune_apply
from tpwarden.cluster.cli import tune as tune_cli
from tpwarden.cluster.rollout.sequence import Measurement, RolloutPorts
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.tune.model import LevelMeasure
from tpwarden.cluster.tune.runner import level_json, save
from typer.testing import CliRunner

from tests.unit.test_rollout import FakeCluster, FakeHolder
from tests.unit.test_tune_model import _field_levels

ROOT = Path(__file__).parents[2]
SHARED = "c1:0.2,c8:0.5,c32:0.3"
K7_ROWS = {1: {"aggregate": 12.6}, 8: {"aggregate": 72.2}, 32: {"aggregate": 144.8}}
K3_ROWS = {1: {"aggregate": 11.1}, 8: {"aggregate": 72.0}, 32: {"aggregate": 171.0}}


class Untouchable:
    """Any contact with the cluster fails the test."""

    def __init__(self, *a, **k):
        raise AssertionError("the cluster was contacted")


@pytest.fixture
def inv(tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "inventory.yml"
    text = (ROOT / "inventory.example.yml").read_text()
    path.write_text(text.replace("num_speculative_tokens: 3", "num_speculative_tokens: 7"))
    return path


@pytest.fixture
def lab(inv, tmp_path, monkeypatch):
    """The seams: a sweep that returns the field report's k=7 levels, a cluster that restarts
    (FakeCluster), and an after-sweep that returns `lab['after']` rows."""
    state = {"after": K3_ROWS, "cluster": FakeCluster(), "locks": []}
    run_dir = tmp_path / "runs" / "20261204T090000Z-sweep"

    def fake_measure(runner, opts, pre):
        run_dir.mkdir(parents=True)
        return BenchRun(run_dir.name, run_dir, "sweep", {}), state.get("levels") or _field_levels()

    def ports_for(inventory, measurer, via, as_json):
        def measure(spec, label):
            assert label == "after", "the tune sweep is the rollout's before"
            measurer.levels = None
            return Measurement(state["after"], run_dir="runs/after", config_hash="x")

        return RolloutPorts(state["cluster"], FakeHolder(), measure, clock=lambda: 1.8e9)

    @contextlib.contextmanager
    def locks(inventory, what, via="direct"):
        state["locks"].append(what)
        yield

    monkeypatch.setattr(tune_cli, "Controller", lambda spec: contextlib.nullcontext())
    monkeypatch.setattr(tune_cli, "RecordingRunner", lambda *a, **k: type("R", (), {
        "preflight": lambda self: {}})())  # fmt: skip
    monkeypatch.setattr(tune_cli, "measure", fake_measure)
    monkeypatch.setattr(tune_apply, "ports_for", ports_for)
    monkeypatch.setattr(tune_apply, "rollout_locks", locks)
    monkeypatch.setattr(
        tune_apply, "as_measurement", lambda run, spec: Measurement(K7_ROWS, str(run.dir))
    )
    state["run_dir"] = run_dir
    return state


def _apply(inv, *extra):
    args = ["tune", "drafter", "-i", str(inv), "--profile", SHARED, "--apply", "--yes", *extra]
    return CliRunner().invoke(app, args)


def test_apply_rolls_out_the_recommendation_and_records_predicted_vs_measured(inv, lab):
    result = _apply(inv)
    assert result.exit_code == 0, result.output
    assert "num_speculative_tokens: 3" in inv.read_text()  # the rollout wrote and kept it
    assert [k for k, _ in lab["cluster"].restarts] == [3]  # one restart, at the new k
    assert lab["locks"] == ["tpwarden tune drafter --apply"]
    doc = json.loads((lab["run_dir"] / "tune.json").read_text())
    ap = doc["applied"]
    assert ap["kept"] is True and ap["step"] == "done" and (ap["from_k"], ap["to_k"]) == (7, 3)
    c32 = next(lv for lv in ap["levels"] if lv["concurrency"] == 32)
    assert c32["measured_tok_s"] == 171.0 and c32["before_tok_s"] == 144.8
    pred = next(
        p for p in doc["predictions"] if p["k"] == 3 and p["concurrency"] == 32
    )["aggregate_tok_s"]  # fmt: skip
    assert c32["predicted_tok_s"] == pred and c32["ratio"] == pytest.approx(171.0 / pred)
    assert len(ap["guards"]) == 3 and all(v["ok"] for v in ap["verdicts"])
    out = " ".join(result.output.split())
    assert "recommended k = 3" in out and "this run: k=7 -> k=3" in out
    assert f"c=32: predicted {pred:,.1f} tok/s, measured 171.0" in out
    assert "the sweep at k=3: runs/after (as --history" in out


def test_a_failed_guard_rolls_back_exits_1_and_is_recorded(inv, lab):
    lab["after"] = {**K3_ROWS, 32: {"aggregate": 120.0}}  # c=32 lost: the prediction was wrong
    result = _apply(inv, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)  # one document, progress on stderr
    assert doc["command"] == "tune drafter" and doc["ok"] is False
    assert doc["applied"]["step"] == "rolled_back" and doc["applied"]["kept"] is False
    assert "guard failed" in doc["applied"]["reason"]
    assert "num_speculative_tokens: 7" in inv.read_text()
    assert [k for k, _ in lab["cluster"].restarts] == [3, 7]
    saved = json.loads((lab["run_dir"] / "tune.json").read_text())
    assert saved["applied"]["step"] == "rolled_back"


def test_no_rollout_when_the_recommendation_is_the_current_k(inv, lab):
    # every position accepted 95 % of the time and a step that barely grows with load: the
    # longest draft, the current k=7, is best at every level
    counts = DraftCounts(4000, tuple(round(4000 * 0.95 ** (j + 1)) for j in range(7)))
    lab["levels"] = [LevelMeasure(c, counts, 100.0 + c / 32, 10.0 * c) for c in (1, 8, 32)]
    result = _apply(inv, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["recommendation"]["k"] == 7
    assert doc["applied"]["step"] == "not_needed" and doc["applied"]["rollout_id"] is None
    assert lab["cluster"].restarts == [] and "num_speculative_tokens: 7" in inv.read_text()


def test_explicit_guards_replace_the_defaults(inv, lab):
    result = _apply(inv, "--guard", "c=1 aggregate >= -1%", "--json")
    assert result.exit_code == 1, result.output  # c=1 lost 12 %: rolled back
    doc = json.loads(result.stdout)
    assert doc["applied"]["guards"] == ["c=1 aggregate >= -1%"]


def test_a_later_run_prints_the_last_applied_prediction(inv, lab, tmp_path):
    assert _apply(inv).exit_code == 0
    other = tmp_path / "runs" / "20261205T090000Z-sweep"
    save(other, {"levels": [level_json(lv) for lv in _field_levels()]})
    result = CliRunner().invoke(app, ["tune", "drafter", "--from-run", str(other)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "last applied (20261204T090000Z-sweep): k=7 -> k=3" in out
    assert "c=32: predicted" in out and "measured 171.0" in out
    js = CliRunner().invoke(app, ["tune", "drafter", "--from-run", str(other), "--json"])
    last = json.loads(js.stdout)["last_applied"]
    assert last["run_id"] == "20261204T090000Z-sweep" and last["applied"]["kept"] is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--apply", "--from-run", "/nonexistent/run"], "--from-run"),
        (["--apply"], "asks nothing"),  # --json without --yes
        (["--guard", "c=32 aggregate >= -5%"], "go with --apply"),
    ],
)
def test_apply_refusals_exit_2_before_anything_is_contacted(inv, monkeypatch, argv, message):
    monkeypatch.setattr(tune_cli, "Controller", Untouchable)
    monkeypatch.setattr(tune_apply, "rollout_locks", Untouchable)
    result = CliRunner().invoke(app, ["tune", "drafter", "-i", str(inv), *argv, "--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["kind"] == "config"
    assert message in doc["error"]["message"]
    assert "num_speculative_tokens: 7" in inv.read_text()


def test_apply_refuses_an_interrupted_rollout_before_the_sweep(inv, lab, monkeypatch):
    monkeypatch.setattr(tune_cli, "measure", Untouchable)
    store = tune_apply.rollout_store(inv)
    store.root.mkdir(parents=True)
    (store.root / "current.json").write_text(json.dumps({
        "id": "r1", "inventory": str(inv), "step": "restarting", "changes": [],
        "old_revision": "a", "new_revision": "b", "old_hash": "a", "new_hash": "b",
        "started_at": 0.0,
    }))  # fmt: skip
    result = _apply(inv)
    assert result.exit_code == 2 and "interrupted" in result.output


def test_apply_dry_run_prints_the_rollout_plan(inv, monkeypatch):
    monkeypatch.setattr(tune_cli, "Controller", Untouchable)
    monkeypatch.setattr(tune_apply, "rollout_locks", Untouchable)
    base = ["tune", "drafter", "-i", str(inv), "--apply", "--dry-run", "--levels", "1,32"]
    result = CliRunner().invoke(app, [*base, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["apply"]
    assert plan["current_k"] == 7 and plan["candidates"] == list(range(8))
    assert plan["levels"] == [1, 32] and "aggregate" in plan["guards"][0]
    assert any("roll back" in s for s in plan["steps"])
    text = CliRunner().invoke(app, [*base, "--guard", "c=32 aggregate >= -5%"])
    assert text.exit_code == 0, text.output
    assert "then --apply: from k=7" in text.output and "c=32 aggregate >= -5%" in text.output
    plain = CliRunner().invoke(app, ["tune", "drafter", "-i", str(inv), "--dry-run", "--json"])
    assert json.loads(plain.stdout)["apply"] is None


def test_k_max_below_the_measured_k_is_refused(inv, lab, tmp_path, monkeypatch):
    """k' is scored against the measured k, so that k is always predicted: a --k-max below it
    is refused (exit 2, the envelope), before the sweep when the inventory names the k."""
    monkeypatch.setattr(tune_cli, "measure", Untouchable)
    result = _apply(inv, "--k-max", "6", "--json")
    assert result.exit_code == 2, result.output
    assert "below the measured k=7" in json.loads(result.stdout)["error"]["message"]
    run = tmp_path / "saved"
    save(run, {"levels": [level_json(lv) for lv in _field_levels()]})
    saved = CliRunner().invoke(app, ["tune", "drafter", "--from-run", str(run), "--k-max", "3"])
    assert saved.exit_code == 2 and "below the measured k=7" in saved.output


def test_from_run_of_the_applied_run_does_not_list_it_as_the_last_applied(
    inv, lab, tmp_path, monkeypatch
):
    assert _apply(inv).exit_code == 0
    monkeypatch.chdir(tmp_path)  # the run named by a relative path, the runs dir absolute
    rel = Path("runs") / lab["run_dir"].name
    result = CliRunner().invoke(app, ["tune", "drafter", "--from-run", str(rel), "--json"])
    doc = json.loads(result.stdout)
    assert doc["applied"]["kept"] is True and doc["last_applied"] is None


def test_apply_asks_before_the_restart_and_a_no_restarts_nothing(inv, lab):
    args = ["tune", "drafter", "-i", str(inv), "--profile", SHARED, "--apply"]
    result = CliRunner().invoke(app, args, input="n\n")
    assert result.exit_code == 1, result.output
    assert "restart the whole server at k=3?" in result.output
    assert "change: drafter: dflash k=7 -> dflash k=3" in result.output  # shown before asking
    assert lab["cluster"].restarts == [] and "num_speculative_tokens: 7" in inv.read_text()
    saved = json.loads((lab["run_dir"] / "tune.json").read_text())
    assert saved["applied"]["step"] == "declined" and saved["applied"]["rollout_id"] is None


def test_sweep_measurer_measures_the_new_config_like_the_tune_sweep(tmp_path, monkeypatch):
    """The rollout's 'after' port: the tune sweep's own options on the spec it is given, as the
    rollout's rows, with the new k's per-position counts kept (none where no counter exists)."""
    from tpwarden.cluster.bench.plan import BenchOptions
    from tpwarden.cluster.inventory.load import load_inventory
    from tpwarden.cluster.tune import runner as tune_runner

    from tests.unit.test_tune_cli import FIX, _outcome

    before = (FIX / "tune" / "v1-layout_k3_ngram_before.prom.txt").read_text()
    after = (FIX / "tune" / "v1-layout_k3_ngram_after.prom.txt").read_text()
    seen = {}

    class Runner:
        def __init__(self, ctl, runs_dir, on_progress=None):
            seen["runs_dir"] = runs_dir
            self.pages = []

        def preflight(self):
            return {"ok": True}

        def run(self, opts, pre):
            seen["opts"] = opts
            self.pages = seen["pages"]
            return BenchRun("r", tmp_path / "after", "sweep", {}, [_outcome(1)])

    monkeypatch.setattr(tune_runner, "Controller", lambda spec: contextlib.nullcontext())
    monkeypatch.setattr(tune_runner, "RecordingRunner", Runner)
    opts = BenchOptions(kind="sweep", levels=(1,), num_prompts=3, output_len=16)
    spec = load_inventory(ROOT / "inventory.example.yml")
    m = tune_runner.SweepMeasurer(opts, tmp_path / "runs")
    seen["pages"] = [before, after]
    got = m(spec, "after")
    assert seen["opts"] is opts and seen["runs_dir"] == tmp_path / "runs"
    assert got.config_hash == spec.config_hash() and got.run_dir == str(tmp_path / "after")
    assert set(got.rows) == {1} and got.rows[1]["aggregate"] > 0
    assert m.levels is not None and m.levels[0].counts.accepted_per_pos == (2600, 1500, 800)
    idle = ROOT / "tests/fixtures/real/metrics/v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt"
    seen["pages"] = [idle.read_text()] * 2  # k'=0: the server has no drafter, no counters
    assert m(spec, "after").rows[1]["aggregate"] > 0 and m.levels is None
