"""`decide` against the vLLM simulator over real HTTP, with label logprobs scripted through the
simulator's oracle file (VLLM_SIM_LOGPROB_ORACLE): sums, the gate, missing labels, the
--max-logprobs 400, injected flips, position bias with reordered choices, calibration via the CLI.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.decide.client import LogprobClient
from tpwarden.cluster.decide.core import Decider, Item
from tpwarden.cluster.decide.labels import LabelMissing
from tpwarden.cluster.decide.runner import RunOptions, run_batch, summarize
from typer.testing import CliRunner

from tests.sim.conftest import SimCluster

GOOD_INV = Path(__file__).resolve().parents[1] / "unit" / "inventories" / "good.yml"


class Oracle:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, doc: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.path)  # a new inode: the simulator re-reads it on the next request


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decide")
    c = SimCluster(tmp, nnodes=1, k=None, env={"VLLM_SIM_LOGPROB_ORACLE": str(tmp / "oracle.json")})
    c.start()
    try:
        c.wait_ready()
        yield c, Oracle(tmp / "oracle.json")
    finally:
        c.stop()


def inventory_for(c: SimCluster, dest: Path) -> Path:
    text = GOOD_INV.read_text()
    text = text.replace("served_name: glm-5.3-flash", "served_name: glm-sim")
    text = text.replace("      port: 8000\n", f"      host: 127.0.0.1\n      port: {c.port}\n")
    assert f"port: {c.port}" in text
    dest.write_text(text)
    return dest


def decider(c: SimCluster, path: str = "completions", k: int = 20, gate: float = 0.1) -> Decider:
    return Decider(LogprobClient(c.url, "glm-sim", k=k, path=path), margin_gate=gate)


def mc(i: int, n: int = 4, answer: str | None = None) -> Item:
    labels = "ABCDE"[:n]
    return Item(
        id=f"q{i}",
        question=f"Question q{i}: pick one.",
        choices={x: f"text {x}{i}" for x in labels},
        answer=answer,
    )


@pytest.mark.parametrize("path", ["completions", "chat"])
def test_probabilities_sum_to_one_with_label_variants(sim, path):
    c, oracle = sim
    p = {"A": 0.5, "B": 0.25, "C": 0.1, "D": 0.05}
    oracle.write(
        {
            "rules": [
                {"match": "q1:", "labels": {k: math.log(v) for k, v in p.items()}},
                # the same label spelled three ways by the "tokenizer": their masses add
                {"match": "q2:", "tokens": {" B": math.log(0.3), "B": math.log(0.2),
                                            "(B": math.log(0.1), " A": math.log(0.3),
                                            " C": math.log(0.05), " D": math.log(0.05)}},
            ]
        }
    )  # fmt: skip
    d = decider(c, path).decide(mc(1))
    assert sum(d.probs.values()) == pytest.approx(1.0)
    assert d.decision == "A" and d.probs["A"] == pytest.approx(0.5 / 0.9, rel=1e-6)
    assert d.margin == pytest.approx(0.25 / 0.9, rel=1e-6)
    assert d.label_mass == pytest.approx(0.9, rel=1e-6) and d.latency_ms > 0
    d2 = decider(c, path).decide(mc(2))
    assert d2.decision == "B" and d2.probs["B"] == pytest.approx(0.6, rel=1e-6)


def test_gate_holds_exactly_the_items_under_the_threshold(sim):
    c, oracle = sim
    rng = random.Random(7)
    rules, want = [], {}
    for i in range(40):
        a = rng.uniform(0.2, 0.8)
        rules.append({"match": f"q{i}:", "labels": {"A": math.log(a), "B": math.log(0.95 - a)}})
        want[f"q{i}"] = abs(2 * a - 0.95) / 0.95
    oracle.write({"rules": rules})
    gate = 0.3
    res = run_batch(decider(c, gate=gate), [mc(i, 2) for i in range(40)],
                    RunOptions("completions", 20, 1.0, gate, "Answer:", False, concurrency=8))  # fmt: skip
    got = res.runs[0]
    for i, d in got.items():
        assert d.margin == pytest.approx(want[i], rel=1e-6)
        assert (d.verdict == "hold") == (want[i] < gate)
    held = {i for i, d in got.items() if d.verdict == "hold"}
    assert held == {i for i, m in want.items() if m < gate} and 0 < len(held) < 40


def test_missing_label_is_a_clear_error(sim):
    c, oracle = sim
    oracle.write({"rules": [{"match": "q9:", "tokens": {" A": -0.3, " B": -1.6}}]})
    with pytest.raises(LabelMissing, match=r"label\(s\) C not in the top 3"):
        decider(c, k=3).decide(mc(9, 3))


def test_top_logprobs_above_server_max_is_lowered_from_the_400(sim):
    c, oracle = sim
    oracle.write({"rules": []})  # the simulator's own letter distribution
    d = decider(c, k=50).decide(
        Item(id="x", question="Which?", choices={"A": "a", "B": "b", "C": "c"})
    )
    assert d.k == 20 and sum(d.probs.values()) == pytest.approx(1.0)


def test_flip_check_finds_injected_flips(sim):
    c, oracle = sim
    rules = []
    for i in range(12):
        if i in (2, 5, 7):  # close calls that alternate between runs
            seq = [{"labels": {"A": math.log(0.48), "B": math.log(0.45)}},
                   {"labels": {"A": math.log(0.45), "B": math.log(0.48)}}]  # fmt: skip
            rules.append({"match": f"q{i}:", "sequence": seq})
        else:
            rules.append({"match": f"q{i}:", "labels": {"A": math.log(0.9), "B": math.log(0.05)}})
    oracle.write({"rules": rules})
    opts = RunOptions("completions", 20, 1.0, 0.1, "Answer:", False, runs=2, concurrency=1)
    summary = summarize(run_batch(decider(c), [mc(i, 2) for i in range(12)], opts))
    assert summary["flips"] == 3
    assert sorted(f["id"] for f in summary["flipped"]) == ["q2", "q5", "q7"]
    small = summary["flips_by_margin"][0]
    assert small["margin_lo"] == 0.0 and small["flips"] == 3 and small["flip_rate"] == 1.0


@pytest.mark.parametrize("bias", [None, {"A": 4.0}])
def test_swapping_choice_order_shows_position_bias_only_when_present(sim, bias):
    c, oracle = sim
    rng = random.Random(11)
    rules, items = [], []
    for i in range(20):
        texts = [f"opt{i}{x}" for x in "ABCD"]
        right = rng.randrange(4)
        probs = {t: math.log(0.7 if j == right else 0.1) for j, t in enumerate(texts)}
        rules.append({"match": f"q{i}:", "by_text": probs})
        items.append(Item(id=f"q{i}", question=f"Question q{i}: pick.", choices=dict(zip("ABCD", texts, strict=True)),
                          answer="ABCD"[right]))  # fmt: skip
    doc = {"rules": rules}
    if bias:
        doc["position_bias"] = bias
    oracle.write(doc)
    opts = RunOptions("completions", 20, 1.0, 0.0, "Answer:", False, concurrency=4, permute=True)
    s = summarize(run_batch(decider(c), items, opts))
    rev = s["position"]["reversed_order"]
    predicted_a = next(r["predicted"] for r in s["position"]["table"] if r["label"] == "A")
    if bias is None:
        assert rev["consistency"] == 1.0 and s["accuracy_all"] == 1.0
    else:
        assert rev["consistency"] < 0.6
        assert rev["permuted_picks_by_position"] == {"A": 20} and predicted_a == 20


def test_cli_calibrate_then_run_applies_the_fit(sim, tmp_path):
    c, oracle = sim
    rng = random.Random(3)
    rules, lines = [], []
    for i in range(80):
        right = rng.random() < 0.7  # over-confident: ~97 % stated, ~70 % right
        top, other = ("A", "B") if right else ("B", "A")
        p_top = rng.uniform(0.93, 0.99)
        rules.append(
            {"match": f"q{i}:", "labels": {top: math.log(p_top), other: math.log(1 - p_top)}}
        )
        lines.append({"id": f"q{i}", "question": f"Question q{i}: pick.",
                      "choices": {"A": "x", "B": "y"}, "answer": "A"})  # fmt: skip
    oracle.write({"rules": rules})
    data = tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    inv = inventory_for(c, tmp_path / "inv.yml")
    cal_file = tmp_path / "cal.json"
    runner = CliRunner()
    env = {"TPWARDEN_RUNS_DIR": str(tmp_path / "runs")}
    r = runner.invoke(app, ["decide", "calibrate", "-i", str(inv), "--data", str(data),
                            "--out", str(cal_file), "--target-accuracy", "0.9", "--json"], env=env)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rep = doc["report"]
    assert rep["temperature"] > 1.5 and rep["ece_after"] < rep["ece_before"] / 2
    assert Path(doc["plots"]["reliability"]).stat().st_size > 1000
    assert Path(doc["plots"]["selective"]).stat().st_size > 1000
    assert json.loads(cal_file.read_text())["temperature"] == rep["temperature"]

    r = runner.invoke(app, ["decide", "run", "-i", str(inv), "--data", str(data), "--runs", "2",
                            "--calibration", str(cal_file), "--json"], env=env)  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    s = out["summary"]
    assert s["temperature"] == pytest.approx(rep["temperature"])
    assert s["margin_gate"] == doc["fitted"]["margin_gate"]
    assert s["flips"] == 0 and s["latency_ms"]["p50"] > 0 and s["latency_ms"]["p95"] > 0
    assert s["answered"] + s["held"] == 80 and s["coverage"] == s["answered"] / 80
    for item in out["items"]:
        assert sum(item["probs"].values()) == pytest.approx(1.0)
        assert item["verdict"] in ("answer", "hold") and len(item["runs"]) == 2
        assert (item["verdict"] == "hold") == (item["margin"] < s["margin_gate"])
    run_dir = Path(out["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["kind"] == "decide" and manifest["cluster"]["config_hash"]
    assert manifest["server"]["version"] == "0.33.0" and manifest["top_logprobs_k"] == 20
    assert manifest["server_defaults"]["thinking"] is False and manifest["thinking_sent"] is False
    assert (run_dir / "items.jsonl").exists() and (run_dir / "summary.json").exists()


def test_cli_ask_yesno_and_missing_label_exit_code(sim, tmp_path):
    c, oracle = sim
    oracle.write({"rules": [
        {"match": "blood", "labels": {"A": math.log(0.2), "B": math.log(0.7)}},
        {"match": "artery", "tokens": {" Yes": math.log(0.6), " yes": math.log(0.1), " No": math.log(0.2)}},
        {"match": "broken", "tokens": {" A": -0.1}},
    ]})  # fmt: skip
    inv = inventory_for(c, tmp_path / "inv.yml")
    runner = CliRunner()
    base = ["-i", str(inv), "--no-calibration", "--json"]
    r = runner.invoke(app, ["decide", "ask", "Which organ pumps blood?", "--choice", "A=Liver",
                            "--choice", "B=Heart", *base])  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["decision"] == "B" and d["probs"]["B"] == pytest.approx(0.7 / 0.9)
    r = runner.invoke(app, ["decide", "yesno", "Is the aorta an artery?", "-i", str(inv), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["probs"]["Yes"] == pytest.approx(0.7 / 0.9)
    r = runner.invoke(
        app, ["decide", "ask", "broken?", "--choice", "A=x", "--choice", "B=y", *base]
    )
    assert r.exit_code == 1 and "B not in the top 20" in r.output


def test_score_primitive_expected_value(sim, tmp_path):
    c, oracle = sim
    p = {s: 0.01 for s in range(10)}
    p.update({7: 0.5, 8: 0.3, 6: 0.12})
    oracle.write(
        {"rules": [{"match": "summary", "labels": {str(s): math.log(v) for s, v in p.items()}}]}
    )
    inv = inventory_for(c, tmp_path / "inv.yml")
    r = CliRunner().invoke(app, ["decide", "score", "Rate this summary.", "-i", str(inv),
                                 "--high", "9", "--cue", "Answer:", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    total = sum(p.values())
    assert d["decision"] == "7" and sum(d["probs"].values()) == pytest.approx(1.0)
    assert d["expected_score"] == pytest.approx(sum(s * v for s, v in p.items()) / total)


def test_cli_human_output_run_and_calibrate_from_run(sim, tmp_path):
    c, oracle = sim
    rules, lines = [], []
    for i in range(30):
        a = 0.55 + 0.4 * (i % 10) / 10
        rules.append({"match": f"q{i}:", "labels": {"A": math.log(a), "B": math.log(0.97 - a)}})
        lines.append({"id": f"q{i}", "question": f"Question q{i}: pick.",
                      "choices": {"A": "x", "B": "y"}, "answer": "A" if i % 4 else "B"})  # fmt: skip
    oracle.write({"rules": rules})
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    inv = inventory_for(c, tmp_path / "inv.yml")
    env = {"TPWARDEN_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "160"}
    runner = CliRunner()
    r = runner.invoke(app, ["decide", "run", "-i", str(inv), "--data", str(data), "--runs", "2",
                            "--permute", "--no-calibration"], env=env)  # fmt: skip
    assert r.exit_code == 0, r.output
    for text in (
        "accuracy (answered)",
        "position bias",
        "reversed choice order",
        "flips by margin",
    ):
        assert text in r.output
    run_dir = next((tmp_path / "runs").iterdir())
    r = runner.invoke(app, ["decide", "calibrate", "-i", str(inv), "--from-run", str(run_dir),
                            "--out", str(tmp_path / "cal.json"), "--target-accuracy", "0.8"], env=env)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "temperature" in r.output and "confidence bins" in r.output and "selective" in r.output
    assert (run_dir / "reliability.png").exists() and (run_dir / "calibration.json").exists()
