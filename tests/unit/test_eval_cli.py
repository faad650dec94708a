"""`tpwarden eval` commands without a cluster: `eval presets` (human and --json against the
envelope schema), and the refusals of `eval run` that must come before any connection (exit 2):
--suite with --tasks, an unknown suite or task."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from tpwarden.cluster.cli import app
from typer.testing import CliRunner

GOOD = str(Path(__file__).parent / "inventories" / "good.yml")
SCHEMA = json.loads(
    resources.files("tpwarden.cluster").joinpath("data/cli-envelope.schema.json").read_text()
)


@pytest.fixture
def no_cluster(monkeypatch):
    """Any attempt to reach the cluster fails the test."""

    def refuse(*a, **k):
        raise AssertionError("the command tried to reach the cluster")

    monkeypatch.setattr("tpwarden.cluster.cli.eval.Controller", refuse)


def _doc(result) -> dict:
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_presets_json_lists_the_eight_benchmarks_with_the_reports_scores():
    result = CliRunner().invoke(app, ["eval", "presets", "--json"])
    assert result.exit_code == 0, result.output
    doc = _doc(result)
    rows = {r["task"]: r for r in doc["presets"]}
    assert doc["suites"]["field"][0] == "mmlu" and len(doc["suites"]["field"]) == 9
    assert rows["mmlu_pro"]["report"]["score"] == 77.6
    assert rows["kormedmcqa"]["stops_sent"] == ["Q:", "</s>", "<|im_end|>", "."]
    assert rows["humaneval"]["stops_sent"] == ["\nclass", "\ndef", "\nif", "\nprint"]


def test_presets_with_an_inventory_use_its_serving_env(tmp_path):
    result = CliRunner().invoke(app, ["eval", "presets", "-i", GOOD, "--json"])
    rows = {r["task"]: r for r in _doc(result)["presets"]}
    assert len(rows["kormedmcqa"]["stops_sent"]) == 4  # vLLM 0.33.0's default limit
    inv = tmp_path / "inv.yml"
    text = Path(GOOD).read_text()
    needle = "        NCCL_SOCKET_IFNAME: enp1s0f1np1\n"
    assert needle in text
    inv.write_text(text.replace(needle, needle + '        VLLM_MAX_STOP_STRINGS: "8"\n'))
    result = CliRunner().invoke(app, ["eval", "presets", "-i", str(inv), "--json"])
    rows = {r["task"]: r for r in _doc(result)["presets"]}
    assert len(rows["kormedmcqa"]["stops_sent"]) == 5  # the server accepts them all
    result = CliRunner().invoke(app, ["eval", "presets", "-i", "/nonexistent/inv.yml", "--json"])
    assert result.exit_code == 2 and _doc(result)["error"]["kind"] == "config"


def test_presets_table_shows_paths_shots_and_scores():
    result = CliRunner().invoke(app, ["eval", "presets"], terminal_width=200)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "kormedmcqa" in x)
    assert "generate/chat" in line and "4 of 5" in line and "85.4" in line
    assert "suite field: mmlu, mmlu_pro, kmmlu, kmmlu_direct" in result.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--suite", "field", "--tasks", "mmlu"], "not both"),
        (["--suite", "nightly"], "no suite 'nightly'"),
        (["--tasks", "mmlu,nope"], "nope: no preset"),
        (["--suite", "field", "--num-fewshot", "-1"], "--num-fewshot"),
        (["--chat-template-kwargs", "enable_thinking=true"], "is not JSON"),
        (["--chat-template-kwargs", "[true]"], "is not a JSON object"),
    ],
)
def test_run_refuses_bad_input_before_any_connection(no_cluster, argv, message):
    result = CliRunner().invoke(app, ["eval", "run", "-i", GOOD, *argv, "--json"])
    assert result.exit_code == 2, result.output
    doc = _doc(result)
    assert message in doc["error"]["message"], doc
