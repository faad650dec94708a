"""`tune drafter --dataset FILE` (issue 52): the draft-length advice from the operator's own
prompts, read from the formats `vllm bench serve` reads (cluster/bench/dataset.py), refused before
any connection when the file is not one, and recorded with the run (tune.json, manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.bench.dataset import (
    MAX_PROMPT_TOKENS,
    parse_prompts,
    read_prompts,
    sharegpt_json,
)
from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli import tune as tune_cli
from tpwarden.cluster.errors import ConfigError
from typer.testing import CliRunner

from tests.unit.test_tune_apply_cli import SHARED, Untouchable, inv, lab  # noqa: F401 (fixtures)

DATASETS = Path(__file__).parent / "fixtures" / "bench" / "datasets"
DOS = 'Why does `dir` command in DOS see the "<.<" argument as "\\*.\\*"?'


def test_vllms_custom_jsonl():
    got = read_prompts(DATASETS / "vllm-custom-docstring.jsonl")
    assert got.format == "jsonl"
    assert got.prompts == tuple(f"What is the capital of {c}?" for c in ("India", "Iran", "China"))


def test_a_batch_file_of_chat_requests_gives_each_first_user_turn():
    got = read_prompts(DATASETS / "vllm-run-batch-example.jsonl")
    assert got.prompts == ("Hello world!", "Hello world!")  # not the system prompts


def test_sharegpt_takes_the_first_turn_as_vllms_loader_does():
    got = read_prompts(DATASETS / "sharegpt-dsOTKpn_0.json")
    assert (got.format, got.prompts) == ("sharegpt", (DOS,))
    # what the client container gets: the same first turns, a second turn as its loader wants
    convs = json.loads(sharegpt_json((DATASETS / "sharegpt-dsOTKpn_0.json").read_text()))
    assert [c["conversations"][0]["value"] for c in convs] == [DOS]
    assert all(len(c["conversations"]) == 2 for c in convs)


def test_the_built_in_prompt_set():
    got = read_prompts(DEFAULT_PROMPTS)
    assert (got.format, len(got.prompts)) == ("jsonl", 20)
    assert got.maybe_skipped(512) == 0  # short Korean prose: all within the loader's bounds


def test_content_parts_and_a_sharegpt_entry_a_line():
    text = "\n".join(json.dumps(x) for x in (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]}]},
        {"conversations": [{"from": "human", "value": "c"}]},
    ))  # fmt: skip
    assert parse_prompts(text, "x.jsonl").prompts == ("a\nb", "c")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('{"prompt": "ok"}\n{"prompt": "ok"\n', 2, "not JSON"),
        ('{"prompt": "ok"}\n\n{"text": "no prompt key"}\n', 3, 'no "prompt" string'),
        ('{"messages": [{"role": "system", "content": "only a system turn"}]}\n', 1, "no "),
        ("\n\n", None, "no prompts in the file"),
        ('[{"conversations": []}]', None, "entry 0"),
        ('{"prompt": 3}\n', 1, 'no "prompt" string'),
    ],
)
def test_a_file_that_is_not_a_prompt_set_names_the_line(text, line, words):
    with pytest.raises(ConfigError) as err:
        parse_prompts(text, "mine.jsonl")
    assert (err.value.file, err.value.line) == ("mine.jsonl", line)
    assert words in err.value.message


def test_prompts_that_may_be_over_the_sharegpt_loaders_bounds_are_counted():
    short, long_ = "x" * 100, "가" * (MAX_PROMPT_TOKENS // 3 + 1)  # 3 UTF-8 bytes a syllable
    got = parse_prompts("\n".join(json.dumps({"prompt": p}) for p in (short, long_)), "p")
    assert got.maybe_skipped(512) == 1
    assert got.maybe_skipped(2000) == 2  # 101 + 2000 > 2048
    assert got.to_json(512)["maybe_skipped"] == 1 and got.to_json()["prompts"] == 2


# -- tune drafter --dataset -----------------------------------------------------------------------
def _tune(*argv: str):
    return CliRunner().invoke(app, ["tune", "drafter", *argv])


def test_a_bad_dataset_is_refused_before_any_connection(inv, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setattr(tune_cli, "Controller", Untouchable)
    monkeypatch.setattr(tune_cli, "load", Untouchable)  # not even the inventory is read
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"question": "no prompt"}\n')
    result = _tune("-i", str(inv), "--dataset", str(bad))
    assert result.exit_code == 2, result.output
    assert f"{bad}:2:" in " ".join(result.output.split())
    missing = _tune("-i", str(inv), "--dataset", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_dataset_and_from_run_are_refused_together(tmp_path):
    result = _tune("--from-run", str(tmp_path), "--dataset", str(DEFAULT_PROMPTS))
    assert result.exit_code == 2 and "--dataset" in result.output


def test_dry_run_sends_the_operators_prompts(inv, monkeypatch):  # noqa: F811
    monkeypatch.setattr(tune_cli, "Controller", Untouchable)
    sharegpt = DATASETS / "sharegpt-dsOTKpn_0.json"
    result = _tune("-i", str(inv), "--dataset", str(sharegpt), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["dataset"]["path"] == str(sharegpt)
    assert (doc["dataset"]["format"], doc["dataset"]["prompts"]) == ("sharegpt", 1)
    argv = doc["containers"][0]["command"]
    assert argv[argv.index("--dataset-name") + 1] == "sharegpt"
    default = json.loads(_tune("-i", str(inv), "--dry-run", "--json").output)
    assert default["dataset"]["path"] == str(DEFAULT_PROMPTS)


def test_a_sweep_on_the_operators_prompts_is_recorded_with_the_advice(inv, lab, monkeypatch):  # noqa: F811
    seen = []
    fake = tune_cli.measure
    monkeypatch.setattr(tune_cli, "measure", lambda r, opts, pre: seen.append(opts) or
                        fake(r, opts, pre))  # fmt: skip
    batch = DATASETS / "vllm-run-batch-example.jsonl"
    result = _tune("-i", str(inv), "--profile", SHARED, "--dataset", str(batch))
    assert result.exit_code == 0, result.output
    assert [o.prompts for o in seen] == [batch]  # the sweep sends these prompts
    out = " ".join(result.output.split())
    assert f"prompts: {batch} (jsonl, 2 prompts; 20 a level" in out
    assert "recommended k = 3" in out
    doc = json.loads((lab["run_dir"] / "tune.json").read_text())
    assert doc["dataset"] == {
        "path": str(batch), "format": "jsonl", "prompts": 2,
        "sha256": read_prompts(batch).sha256[:16], "maybe_skipped": 0,
    }  # fmt: skip
    again = _tune("--from-run", str(lab["run_dir"]), "--profile", SHARED)
    assert f"prompts: {batch} (jsonl, 2 prompts)" in " ".join(again.output.split())
