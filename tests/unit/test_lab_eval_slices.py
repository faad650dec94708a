"""The lab's dataset slices (tpwarden.lab.eval_slices): every dataset, config and split the field
suite's tasks load, as lm-eval 0.4.13's own task files name them, written into a Hugging Face
cache from which the real lm-eval loads all 169 leaf tasks offline (no Hub), HumanEval's
code_eval metric included (the lab's stand-in, executing programs as the Hub script does)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tpwarden.cluster.errors import LabError
from tpwarden.cluster.eval.catalog import suite_tasks
from tpwarden.cluster.eval.datasets import unpack
from tpwarden.cluster.eval.presets import EVAL_VENV
from tpwarden.cluster.eval.taskdefs import tasks_dir
from tpwarden.lab.eval_slices import ROWS, build_cache, plan_slices, write_archive

MMLU_PRO_CATEGORIES = 14

# Run by the lm-eval venv's python, offline: every leaf task's docs, and the metric.
LOAD = r"""
import json, os, sys
from lm_eval.tasks import TaskManager, get_task_dict
import evaluate

def leaves(tree):
    for name, node in tree.items():
        yield from (leaves(node) if isinstance(node, dict) else [(name, node)])

out = {}
for name, task in leaves(get_task_dict(sys.argv[1:], TaskManager())):
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    shots = list(task.fewshot_docs() or [])
    out[getattr(task, "task_name", str(name))] = {
        "docs": len(docs), "shots": len(shots), "text": task.doc_to_text(docs[0]),
        "target": task.doc_to_target(docs[0])}
code_eval = evaluate.load("code_eval")
ok = code_eval.compute(references=["assert add(2, 3) == 5"],
                       predictions=[["def add(a, b):\n    return a + b"]], k=[1])
bad = code_eval.compute(references=["assert add(2, 3) == 5"],
                        predictions=[["def add(a, b):\n    return a * b"]], k=[1])
print(json.dumps({"tasks": out, "ok": ok[0], "bad": bad[0]}, default=str))
"""


@pytest.fixture(scope="module")
def venv():
    if tasks_dir(EVAL_VENV) is None:
        pytest.skip(f"lm-eval venv {EVAL_VENV} absent (README setup: tools/lm_eval/install.sh)")
    return EVAL_VENV


@pytest.fixture(scope="module")
def plan(venv):
    return plan_slices(venv, suite_tasks("field"))


def test_the_plan_has_every_config_and_split_the_tasks_name(plan):
    by_path: dict[str, list] = {}
    for ds in plan["datasets"]:
        by_path.setdefault(ds["path"], []).append(ds)
    assert len(by_path["cais/mmlu"]) == 57 and len(by_path["HAERAE-HUB/KMMLU"]) == 45
    assert {d["name"] for d in by_path["sean0042/KorMedMCQA"]} == {
        "doctor", "nurse", "pharm", "dentist"}  # fmt: skip
    mmlu = by_path["cais/mmlu"][0]
    assert sorted(mmlu["splits"]) == ["dev", "test"]  # test_split, fewshot_split
    assert sorted(by_path["openai/gsm8k"][0]["splits"]) == ["test", "train"]
    assert by_path["openai/gsm8k"][0]["name"] == "main"
    # medmcqa scores on validation (test_split: validation); MedQA uses all three
    assert sorted(by_path["openlifescienceai/medmcqa"][0]["splits"]) == ["train", "validation"]
    assert sorted(by_path["GBaker/MedQA-USMLE-4-options-hf"][0]["splits"]) == [
        "test", "train", "validation"]  # fmt: skip
    (pro,) = by_path["TIGER-Lab/MMLU-Pro"]
    categories = {r["category"] for r in pro["splits"]["test"]}
    assert len(categories) == MMLU_PRO_CATEGORIES and "computer science" in categories
    assert len(pro["splits"]["test"]) == MMLU_PRO_CATEGORIES * ROWS
    assert all(len(rows) == ROWS for rows in mmlu["splits"].values())


def test_a_dataset_without_a_slice_is_refused(venv):
    with pytest.raises(LabError, match="no lab slice for dataset 'allenai/ai2_arc'"):
        plan_slices(venv, ["arc_easy"])


@pytest.mark.timeout(600)
def test_the_real_lm_eval_loads_every_field_task_offline(venv, tmp_path):
    """Through the archive `eval datasets load` takes: packed as `fetch` packs, unpacked as
    the product unpacks into a cache, then read by lm-eval from there."""
    archive = tmp_path / "field.tar.gz"
    doc = write_archive(suite_tasks("field"), archive, venv, "2026-12-05T00:00:00Z")
    assert sorted(doc["tasks"]) == sorted(suite_tasks("field"))
    home = tmp_path / "hf"
    index = unpack(archive, home, "2026-12-05T00:00:01Z")
    assert sorted(index["tasks"]) == sorted(suite_tasks("field"))
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "HF_ALLOW_CODE_EVAL": "1"}  # fmt: skip
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", LOAD, *suite_tasks("field")],
        capture_output=True, text=True, timeout=540, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.splitlines()[-1])
    tasks = doc["tasks"]
    assert len(tasks) == 57 + 14 + 45 + 45 + 4 + 1 + 1 + 1 + 1, sorted(tasks)
    assert all(t["docs"] == ROWS for t in tasks.values()), {
        n: t["docs"] for n, t in tasks.items() if t["docs"] != ROWS}  # fmt: skip
    # MMLU-Pro's per-category filter kept its own rows; the few-shot splits are there
    assert tasks["mmlu_pro_law"]["text"].startswith("Question:\nlaw test question")
    assert tasks["mmlu_abstract_algebra"]["shots"] == ROWS
    assert tasks["gsm8k"]["target"].endswith("#### 7")
    assert tasks["kmmlu_direct_accounting"]["target"] == "A"
    assert doc["ok"] == {"pass@1": 1.0} and doc["bad"] == {"pass@1": 0.0}


def test_the_code_eval_stand_in_refuses_without_the_opt_in(venv, plan, tmp_path):
    home = tmp_path / "hf"
    build_cache({**plan, "datasets": []}, home, venv)
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "HF_EVALUATE_OFFLINE": "1"}  # fmt: skip
    script = (
        "import evaluate; evaluate.load('code_eval').compute("
        "references=['assert 1'], predictions=[['pass']], k=[1])"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "HF_ALLOW_CODE_EVAL=1" in done.stderr
    assert os.path.isdir(home / "modules" / "evaluate_modules")
