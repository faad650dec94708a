"""`decide` against the real vLLM CPU engine (a random-weight model): shapes, not accuracy.

Uses the session fixture `engine_server` from tests/engine/conftest.py (attributes `api_base`,
`inventory`, `model_path`, `served_name`). A random-weight model answers anything, so each
decision is either a proper distribution over the labels or the clear missing/split-label error;
never a silent 0. Latency is recorded either way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

if not (Path(__file__).with_name("conftest.py")).exists():  # the fixture comes with the engine
    pytest.skip("tests/engine/conftest.py (engine_server) not present", allow_module_level=True)

from tpwarden.cluster.cli import app
from tpwarden.cluster.decide.client import LogprobClient, ServerRejected, max_logprobs_from_args
from tpwarden.cluster.decide.core import Decider, Item
from tpwarden.cluster.decide.labels import LabelMissing, SplitLabel
from tpwarden.cluster.inventory.load import load_inventory
from typer.testing import CliRunner

pytestmark = pytest.mark.engine

ITEM = Item(
    id="organ",
    question="Which organ pumps blood through the body?",
    choices={"A": "Liver", "B": "Heart", "C": "Lung", "D": "Kidney"},
    answer="B",
)


def _k(engine_server) -> int:
    return max_logprobs_from_args(load_inventory(Path(engine_server.inventory)).serving.extra_args)


def _check(decider: Decider, item: Item) -> None:
    try:
        d = decider.decide(item)
    except (LabelMissing, SplitLabel) as e:
        assert "not in the top" in str(e) or "splits" in str(e)
        assert e.latency_ms > 0  # the request was made and timed
        return
    assert set(d.probs) == set(item.choices)
    assert sum(d.probs.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(0.0 <= p <= 1.0 for p in d.probs.values())
    assert 0.0 <= d.margin <= 1.0 and d.verdict in ("answer", "hold")
    assert 0.0 < d.label_mass <= 1.0 + 1e-6 and d.latency_ms > 0
    assert all(math.isfinite(v) for v in d.label_logprobs.values())


def test_completions_path_gives_a_distribution_or_the_clear_error(engine_server):
    client = LogprobClient(engine_server.api_base, engine_server.served_name, k=_k(engine_server))
    with client:
        _check(Decider(client), ITEM)


def test_chat_path_gives_a_distribution_or_the_clear_error(engine_server):
    client = LogprobClient(
        engine_server.api_base, engine_server.served_name, k=_k(engine_server), path="chat"
    )
    with client:
        try:
            _check(Decider(client), ITEM)
        except ServerRejected as e:  # a bare random-weight checkpoint may carry no chat template
            if "template" not in e.message.lower():
                raise
            pytest.skip(f"model has no chat template: {e.message[:120]}")


def test_top_logprobs_above_the_server_max_is_lowered_from_its_400(engine_server):
    client = LogprobClient(engine_server.api_base, engine_server.served_name, k=10_000)
    with client:
        try:
            Decider(client).decide(ITEM)
        except (LabelMissing, SplitLabel):
            pass
    assert client.k < 10_000  # the server named its --max-logprobs and the client used it


def test_cli_run_json_shapes_and_latency(engine_server, tmp_path):
    data = tmp_path / "items.jsonl"
    rows = [
        {"id": f"i{n}", "question": f"Question {n}: which is a colour?",
         "choices": {"A": "red", "B": "stone", "C": "seven"}, "answer": "A"}
        for n in range(4)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = CliRunner().invoke(
        app,
        ["decide", "run", "-i", str(engine_server.inventory), "--data", str(data), "--runs", "2",
         "--no-calibration", "--json"],
        env={"TPWARDEN_RUNS_DIR": str(tmp_path / "runs")},
    )  # fmt: skip
    out = json.loads(r.stdout)
    s = out["summary"]
    assert r.exit_code == (0 if s["decided"] else 1), r.output
    assert s["items"] == 4 and s["decided"] + s["errors"] == 4
    assert s["latency_ms"]["n"] > 0 and s["latency_ms"]["p50"] > 0
    for item in out["items"]:
        if item["verdict"] == "error":
            assert item["error_kind"] in ("LabelMissing", "SplitLabel"), item
            continue
        assert sum(item["probs"].values()) == pytest.approx(1.0, abs=1e-9)
        assert item["verdict"] in ("answer", "hold") and len(item["runs"]) == 2
    manifest = json.loads((Path(out["run_dir"]) / "manifest.json").read_text())
    assert manifest["kind"] == "decide" and manifest["server"]["health_status"] == 200
    assert manifest["server"]["model_id"] == engine_server.served_name
