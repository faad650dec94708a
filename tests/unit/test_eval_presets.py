"""Every benchmark of the field report has a preset, and each preset restates lm-eval 0.4.13's
own task definition, read from the installed package at test time (the YAMLs under
/opt/tpwarden-lmeval-0.4.13, `include:` chains and group files followed): output type against
the API path, stop strings, few-shot count and where the shots come from, max tokens, unsafe
code, and the headline metric's filter. Then the suite, `--num-fewshot`, and the argv lm-eval
gets for the paths that changed (GSM8K through chat)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.eval.catalog import (
    PRESETS,
    REPORT,
    SUITES,
    preset_rows,
    suite_tasks,
)
from tpwarden.cluster.eval.plan import EvalOptions, ServerFacts, task_plan
from tpwarden.cluster.eval.presets import EVAL_VENV, ApiPath, EvalInputError
from tpwarden.cluster.eval.taskdefs import index_tasks, resolve, tasks_dir

FIELD = (
    "mmlu", "mmlu_pro", "kmmlu", "kmmlu_direct", "kormedmcqa", "medqa_4options", "medmcqa",
    "gsm8k", "humaneval",
)  # fmt: skip
SRV = ServerFacts(
    base_url="http://127.0.0.1:8000",
    model="glm",
    tokenizer="/models/glm",
    max_model_len=131072,
    version="0.33.0",
)
TASKS_DIR = tasks_dir(EVAL_VENV)


@pytest.fixture(scope="module")
def lm_eval_tasks():
    if TASKS_DIR is None:
        pytest.skip(f"lm-eval venv {EVAL_VENV} absent (README setup: tools/lm_eval/install.sh)")
    return index_tasks(TASKS_DIR)


def _gen(cfg: dict) -> dict:
    return cfg.get("generation_kwargs") or {}


def test_the_field_suite_is_the_reports_eight_benchmarks_in_order():
    assert SUITES["field"] == FIELD == tuple(REPORT)
    assert set(FIELD) <= set(PRESETS)
    assert suite_tasks("field") == FIELD
    with pytest.raises(EvalInputError, match="known: field"):
        suite_tasks("nightly")


@pytest.mark.parametrize("task", FIELD)
def test_preset_matches_lm_evals_own_task_definition(lm_eval_tasks, task):
    preset = PRESETS[task]
    leaves = resolve(lm_eval_tasks, task)
    assert leaves, task
    for cfg in leaves:
        where = cfg.get("task")
        assert cfg["output_type"] == preset.output_type, where
        if preset.output_type == "multiple_choice":
            assert preset.path is ApiPath.LOGLIKELIHOOD and preset.until is None, where
        else:
            assert preset.path in (ApiPath.COMPLETIONS, ApiPath.CHAT), where
            assert tuple(_gen(cfg)["until"]) == preset.until, where
            assert _gen(cfg).get("max_gen_toks") == preset.max_gen_toks, where
        assert cfg.get("num_fewshot") == preset.yaml_shots, where
        assert preset.shots_pinned == (cfg.get("num_fewshot") == 0), where
        assert bool(cfg.get("unsafe_code")) == preset.unsafe_code, where
        if preset.run_shots(None):  # shots need a split to come from
            assert cfg.get("fewshot_split") or cfg.get("training_split"), where
        metric, _, flt = (preset.metric or "").partition(",")
        names = [m["metric"] for m in cfg.get("metric_list") or []]
        assert metric in names or metric == "pass@1", (where, names)
        filters = [f["name"] for f in cfg.get("filter_list") or []] or ["none"]
        assert flt in filters, (where, filters)


def test_preset_notes_say_when_we_run_other_shots_than_the_yaml():
    for name in FIELD:
        p = PRESETS[name]
        if (p.run_shots(None) or 0) != (p.yaml_shots or 0):
            assert "report" in p.note, name


def test_stops_sent_never_exceed_the_servers_four(lm_eval_tasks):
    for name in FIELD:
        tp = task_plan(name, PRESETS[name], SRV, EvalOptions(tasks=(name,)))
        eos = json.loads(tp.argv[tp.argv.index("--model_args") + 1]).get("eos_string")
        wire = list(tp.stops.sent) + ([eos] if eos and eos not in tp.stops.sent else [])
        assert len(wire) <= 4, (name, wire)


def _flag(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_gsm8k_runs_five_shot_through_chat_as_the_report_did():
    tp = task_plan("gsm8k", PRESETS["gsm8k"], SRV, EvalOptions(tasks=("gsm8k",)))
    args = json.loads(_flag(tp.argv, "--model_args"))
    assert args["base_url"].endswith("/v1/chat/completions")
    assert _flag(tp.argv, "--model") == "local-chat-completions"
    assert "--apply_chat_template" in tp.argv and _flag(tp.argv, "--num_fewshot") == "5"
    assert _flag(tp.argv, "--fewshot_as_multiturn") == "true"
    assert json.loads(_flag(tp.argv, "--gen_kwargs"))["until"] == list(PRESETS["gsm8k"].until)


@pytest.mark.parametrize(
    ("task", "override", "sent"),
    [
        ("mmlu", None, "5"),  # the report's 5 over the YAML's 0
        ("mmlu", 0, "0"),
        ("kmmlu", 3, "3"),
        ("medqa_4options", None, None),  # the YAML's own: nothing passed
        ("medqa_4options", 5, "5"),
        ("humaneval", 5, None),  # the YAML pins 0: lm-eval ignores it, so do we
    ],
)
def test_num_fewshot_overrides_every_preset_but_a_pinned_zero(task, override, sent):
    opts = EvalOptions(tasks=(task,), num_fewshot=override)
    tp = task_plan(task, PRESETS[task], SRV, opts)
    assert _flag(tp.argv, "--num_fewshot") == sent
    assert tp.to_json()["shots"] == (
        0 if task == "humaneval" else None if sent is None else int(sent)
    )


def test_loglikelihood_shots_never_turn_on_the_chat_template():
    tp = task_plan("mmlu", PRESETS["mmlu"], SRV, EvalOptions(tasks=("mmlu",)))
    assert "--apply_chat_template" not in tp.argv and "--fewshot_as_multiturn" not in tp.argv


def test_preset_rows_carry_the_reports_score_and_the_settings():
    rows = {r["task"]: r for r in preset_rows()}
    assert rows["gsm8k"]["report"] == {"benchmark": "GSM8K", "score": 94.5, "metric": "exact_match"}
    assert rows["humaneval"]["shots"] == 0 and rows["humaneval"]["shots_pinned"]
    assert rows["humaneval"]["stops_kept"] == ["\nclass", "\ndef", "\nif", "\nprint"]
    assert rows["kormedmcqa"]["path"] == "generate/chat" and rows["kormedmcqa"]["shots"] == 5
    assert all(rows[t]["suites"] == ["field"] for t in FIELD)


def test_index_follows_groups_subgroups_and_tags(lm_eval_tasks):
    assert len(resolve(lm_eval_tasks, "mmlu")) == 57
    assert len(resolve(lm_eval_tasks, "kmmlu")) == len(resolve(lm_eval_tasks, "kmmlu_direct"))
    names = {c["task"] for c in resolve(lm_eval_tasks, "kormedmcqa")}
    assert names == {f"kormedmcqa_{s}" for s in ("doctor", "nurse", "pharm", "dentist")}


def test_index_and_includes_on_a_small_tree(tmp_path: Path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "_base_yaml").write_text(
        "dataset_path: x/y\noutput_type: generate_until\n"
        "generation_kwargs:\n  until: ['a']\nprocess_docs: !function utils.p\n"
    )
    (tmp_path / "g" / "one.yaml").write_text(
        '"include": "_base_yaml"\n"task": "t_one"\n"tag": "tg"\n'
    )
    (tmp_path / "g" / "two.yaml").write_text("include: _base_yaml\ntask: t_two\ntag:\n  - tg\n")
    (tmp_path / "g" / "_grp.yaml").write_text("group: grp\ntask:\n  - tg\n")
    idx = index_tasks(tmp_path)
    leaves = resolve(idx, "grp")
    assert [c["task"] for c in leaves] == ["t_one", "t_two"]
    assert leaves[0]["process_docs"] == "!function utils.p" and leaves[0]["dataset_path"] == "x/y"


def test_a_group_row_sums_its_leaves_and_takes_the_presets_metric():
    from tpwarden.cluster.eval.results import score_row

    doc = {
        "results": {
            "gsm8k": {
                "exact_match,flexible-extract": 0.96,
                "exact_match,strict-match": 0.94,
                "exact_match_stderr,strict-match": 0.01,
            },
            "kormedmcqa": {"exact_match,extract_answer": 0.85},
        },
        "group_subtasks": {"kormedmcqa": ["kormedmcqa_doctor", "kormedmcqa_nurse"]},
        "n-samples": {
            "gsm8k": {"original": 1319, "effective": 5},
            "kormedmcqa_doctor": {"original": 435, "effective": 5},
            "kormedmcqa_nurse": {"original": 587, "effective": 5},
        },
    }
    row = score_row("gsm8k", "generate/chat", "3 stops", doc, PRESETS["gsm8k"].metric)
    assert (row.metric, row.score, row.stderr, row.n) == ("exact_match,strict-match", 0.94, 0.01, 5)
    row = score_row("kormedmcqa", "generate/chat", "4 stops", doc, PRESETS["kormedmcqa"].metric)
    assert (row.metric, row.n) == ("exact_match,extract_answer", 10)
