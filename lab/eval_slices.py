"""Small local slices of the field suite's datasets, for a lab that cannot reach the Hub.

On a real cluster `tpwarden eval datasets fetch` downloads each task's datasets on a machine with
Hub access. The lab has none, so it writes the same Hugging Face cache itself: for every dataset
(and config) a suite's tasks load, with the splits their lm-eval 0.4.13 YAMLs name, a few rows
with the fields the tasks read, written by `datasets`' own JSON builder into the layout
`load_dataset(<hub name>, <config>)` finds offline (`datasets/<ns>___<name>/<config>/...`). The
rows are synthetic (no benchmark content is shipped); their fields and types are the datasets'
own, as lm-eval's task files use them.

HumanEval's metric is a Hub script too (`evaluate.load("code_eval")`, at import of lm-eval's
humaneval task). The lab's cache gets a stand-in for it: the same interface (predictions,
references, k), the same refusal without HF_ALLOW_CODE_EVAL=1, each program run in a child
Python with a timeout, and the unbiased pass@k estimator.

    plan = plan_slices(EVAL_VENV, suite_tasks("field"))
    build_cache(plan, hf_home, EVAL_VENV)       # runs the lm-eval venv's python
    write_archive(suite_tasks("field"), out, EVAL_VENV, created_at)   # what `eval datasets
                                                # load` takes, as `eval datasets fetch` packs it
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import LabError
from tpwarden.cluster.eval.datasets import fetch_plan, manifest, pack
from tpwarden.cluster.eval.taskdefs import index_tasks, resolve, tasks_dir

FORMAT = "tpwarden-lab-slices/1"
ROWS = 6  # per split and config (or MMLU-Pro category): `--limit 5` and one more
SPLIT_KEYS = ("test_split", "validation_split", "training_split", "fewshot_split")
_LETTERS = "ABCDEFGHIJ"
_SUBJECT = re.compile(r'^(process_\w+)\s*=\s*partial\(process_docs,\s*subject="([^"]+)"\)', re.M)

Row = dict[str, JSONValue]


def _mmlu(config: str | None, subject: str | None, split: str, i: int) -> Row:
    return {
        "question": f"{config} {split} question {i}: which option is marked {_LETTERS[i % 4]}?",
        "subject": config,
        "choices": [f"marked {c}" for c in _LETTERS[:4]],
        "answer": i % 4,
    }


def _mmlu_pro(config: str | None, subject: str | None, split: str, i: int) -> Row:
    letter = _LETTERS[i % 10]
    return {
        "question_id": i,
        "question": f"{subject} {split} question {i}: which option is marked {letter}?",
        "options": [f"marked {c}" for c in _LETTERS],
        "answer": letter,
        "answer_index": i % 10,
        "cot_content": f"A: Let's think step by step. Option {letter} is marked {letter}. "
        f"The answer is ({letter}).",
        "category": subject,
        "src": f"tpwarden-lab-{subject}",
    }


def _kmmlu(config: str | None, subject: str | None, split: str, i: int) -> Row:
    return {
        "question": f"{config} {split} 문제 {i}: {_LETTERS[i % 4]}라고 표시된 것은?",
        **{c: f"{c} 표시" for c in _LETTERS[:4]},
        "answer": i % 4 + 1,  # 1-based, as lm-eval's `answer-1` reads it
        "Category": config,
        "Human Accuracy": 0.5,
    }


def _kormedmcqa(config: str | None, subject: str | None, split: str, i: int) -> Row:
    return {
        "subject": config,
        "year": 2024,
        "period": 1,
        "q_number": i + 1,
        "question": f"{config} {split} 문제 {i}: {_LETTERS[i % 5]}라고 표시된 것은?",
        **{c: f"{c} 표시" for c in _LETTERS[:5]},
        "answer": i % 5 + 1,
        "cot": "",
        "exam_type": config,
    }


def _medqa(config: str | None, subject: str | None, split: str, i: int) -> Row:
    return {
        "id": f"{split}-{i}",
        "sent1": f"{split} case {i}: which option is marked {_LETTERS[i % 4]}?",
        "sent2": "",
        **{f"ending{n}": f"marked {_LETTERS[n]}" for n in range(4)},
        "label": i % 4,
    }


def _medmcqa(config: str | None, subject: str | None, split: str, i: int) -> Row:
    return {
        "id": f"{split}-{i}",
        "question": f"{split} question {i}: which option is marked {_LETTERS[i % 4]}?",
        **{f"op{c.lower()}": f"marked {c}" for c in _LETTERS[:4]},
        "cop": i % 4,
        "choice_type": "single",
        "exp": "",
        "subject_name": "Medicine",
        "topic_name": "lab",
    }


def _gsm8k(config: str | None, subject: str | None, split: str, i: int) -> Row:
    a, b = 3 + i, 4 + 2 * i
    return {
        "question": f"Tom has {a} apples and buys {b} more. How many apples does he have now?",
        "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
    }


def _humaneval(config: str | None, subject: str | None, split: str, i: int) -> Row:
    name = f"add_{i}"
    return {
        "task_id": f"HumanEval/{i}",
        "prompt": f'def {name}(a, b):\n    """Return a + b + {i}."""\n',
        "canonical_solution": f"    return a + b + {i}\n",
        "test": f"def check(candidate):\n    assert candidate(2, 3) == {5 + i}\n",
        "entry_point": name,
    }


ROW_MAKERS: dict[str, Callable[[str | None, str | None, str, int], Row]] = {
    "cais/mmlu": _mmlu,
    "TIGER-Lab/MMLU-Pro": _mmlu_pro,
    "HAERAE-HUB/KMMLU": _kmmlu,
    "sean0042/KorMedMCQA": _kormedmcqa,
    "GBaker/MedQA-USMLE-4-options-hf": _medqa,
    "openlifescienceai/medmcqa": _medmcqa,
    "openai/gsm8k": _gsm8k,
    "openai/openai_humaneval": _humaneval,
}


def _subject(cfg: JSONObject, yaml_dir: Path) -> str | None:
    """The category a task keeps (MMLU-Pro's `process_docs: !function utils.process_math`
    filters on `category == "math"`), read from the utils.py beside its YAML; None when the task
    keeps every row."""
    fn = cfg.get("process_docs")
    if not isinstance(fn, str) or not fn.startswith("!function "):
        return None
    module, _, name = fn.removeprefix("!function ").rpartition(".")
    source = yaml_dir / f"{module}.py"
    subjects = (
        dict(_SUBJECT.findall(source.read_text(encoding="utf-8"))) if source.is_file() else {}
    )
    if name not in subjects:
        raise LabError(f"process_docs {fn}: no category for it in {source}")
    return subjects[name]


def _tasks_root(venv: Path) -> Path:
    root = tasks_dir(venv)
    if root is None:
        raise LabError(f"no lm_eval in {venv}: run tools/lm_eval/install.sh")
    return root


def plan_slices(venv: Path, tasks: Sequence[str], rows: int = ROWS) -> JSONObject:
    """Which datasets, configs and splits the tasks load, with their rows."""
    root = _tasks_root(venv)
    index = index_tasks(root)
    wanted: dict[tuple[str, str | None], dict[str, set[str | None]]] = {}
    for task in tasks:
        for cfg in resolve(index, task):
            path, config = cfg.get("dataset_path"), cfg.get("dataset_name")
            if not isinstance(path, str) or path not in ROW_MAKERS:
                raise LabError(f"{task}: no lab slice for dataset {path!r}")
            subject = _subject(cfg, index.tasks[str(cfg["task"])].parent)
            splits = wanted.setdefault((path, config if isinstance(config, str) else None), {})
            for key in SPLIT_KEYS:
                if isinstance(cfg.get(key), str):
                    splits.setdefault(str(cfg[key]), set()).add(subject)
    datasets: list[JSONValue] = []
    for (path, config), splits in sorted(wanted.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        make = ROW_MAKERS[path]
        datasets.append(
            {
                "path": path,
                "name": config,
                "splits": {
                    split: [
                        make(config, subject, split, n * rows + i)
                        for n, subject in enumerate(sorted(subjects, key=lambda s: s or ""))
                        for i in range(rows)
                    ]
                    for split, subjects in sorted(splits.items())
                },
            }
        )
    return {"format": FORMAT, "tasks": list(tasks), "datasets": datasets}


# Run by the lm-eval venv's python: argv = plan file, HF_HOME to write.
BUILD_SCRIPT = r"""
import json, os, shutil, sys, tempfile
from datasets.naming import camelcase_to_snakecase
from datasets.packaged_modules.json.json import Json

plan, home = json.load(open(sys.argv[1])), sys.argv[2]
cache = os.path.join(home, "datasets")
for ds in plan["datasets"]:
    namespace, _, name = ds["path"].rpartition("/")
    config = ds["name"] or "default"
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for split, rows in ds["splits"].items():
            files[split] = os.path.join(tmp, split + ".jsonl")
            with open(files[split], "w", encoding="utf-8") as out:
                for row in rows:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
        stage = os.path.join(tmp, "stage")
        Json(dataset_name=name, config_name=config, config_id=config, cache_dir=stage,
             hash="tpwarden-lab", data_files=files).download_and_prepare()
        target = os.path.join(cache, namespace + "___" + camelcase_to_snakecase(name), config)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(os.path.join(stage, camelcase_to_snakecase(name), config), target)
    print("slice", ds["path"], config, {s: len(r) for s, r in ds["splits"].items()}, flush=True)
metric = os.path.join(home, "modules", "evaluate_modules", "metrics",
                      "evaluate-metric--code_eval", "0" * 64)
os.makedirs(metric, exist_ok=True)
with open(os.path.join(metric, "code_eval.py"), "w", encoding="utf-8") as out:
    out.write(plan["code_eval"])
"""

# The lab's stand-in for the Hub's `evaluate-metric/code_eval` script (see the module doc).
CODE_EVAL_STANDIN = r'''"""tpwarden lab stand-in for the Hub's code_eval metric: runs each program in a child Python."""
import os
import subprocess
import sys

import datasets
import evaluate
import numpy as np


def _pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


class CodeEval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="pass@k of programs run against their tests (tpwarden lab stand-in)",
            citation="",
            inputs_description="predictions: list of candidate lists; references: test code",
            features=datasets.Features({
                "predictions": datasets.Sequence(datasets.Value("string")),
                "references": datasets.Value("string"),
            }),
        )

    def _compute(self, predictions, references, k=[1, 10, 100], num_workers=4, timeout=3.0):
        if os.getenv("HF_ALLOW_CODE_EVAL", "0") != "1":
            raise ValueError("code_eval runs untrusted model-generated code: set "
                             "HF_ALLOW_CODE_EVAL=1 to allow it")
        results, totals, correct = {}, [], []
        for task_id, (candidates, test) in enumerate(zip(predictions, references)):
            passed = []
            for completion_id, candidate in enumerate(candidates):
                try:
                    ok = subprocess.run([sys.executable, "-c", candidate + "\n" + test],
                                        capture_output=True, timeout=timeout).returncode == 0
                    result = "passed" if ok else "failed"
                except subprocess.TimeoutExpired:
                    ok, result = False, "timed out"
                passed.append(ok)
                results.setdefault(task_id, []).append((completion_id, {
                    "task_id": task_id, "passed": ok, "result": result,
                    "completion_id": completion_id}))
            totals.append(len(passed))
            correct.append(sum(passed))
        ks = [k] if isinstance(k, int) else k
        pass_at_k = {f"pass@{n}": float(np.mean([_pass_at_k(t, c, n)
                                                 for t, c in zip(totals, correct)]))
                     for n in ks if all(t >= n for t in totals)}
        return pass_at_k, results
'''


def build_cache(plan: JSONObject, hf_home: Path, venv: Path, timeout_s: float = 600) -> str:
    """Write the slices (and the code_eval stand-in) into `hf_home`; the builder's output."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise LabError(f"no python in {venv}: run tools/lm_eval/install.sh")
    hf_home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = Path(tmp) / "plan.json"
        plan_file.write_text(json.dumps({**plan, "code_eval": CODE_EVAL_STANDIN}))
        done = subprocess.run(
            [str(python), "-c", BUILD_SCRIPT, str(plan_file), str(hf_home)],
            capture_output=True, text=True, timeout=timeout_s,
            env={"PATH": "/usr/bin:/bin", "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
                 "HF_DATASETS_OFFLINE": "1"},
        )  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"building the dataset slices failed: {done.stderr[-2000:]}")
    return done.stdout


def write_archive(
    tasks: Sequence[str], out: Path, venv: Path, created_at: str, rows: int = ROWS
) -> JSONObject:
    """The slices as a `tpwarden-eval-datasets/1` archive: the manifest `eval datasets fetch`
    writes for these tasks, packed by the same code, so `eval datasets load` takes it as is."""
    root = _tasks_root(venv)
    doc = manifest(fetch_plan(tasks, root), created_at)
    with tempfile.TemporaryDirectory(prefix="tpwarden-slices-") as tmp:
        build_cache(plan_slices(venv, tasks, rows), Path(tmp) / "hf", venv)
        pack(Path(tmp) / "hf", doc, out)
    return doc
