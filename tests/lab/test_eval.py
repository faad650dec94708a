"""`tpwarden eval` on the lab: the real lm_eval 0.4.13 (in the client image `tpwarden eval image
build` makes on the lab's head: the bench client image plus lm-eval's wheels) against the
simulated 4-node server, with local task definitions: multiple choice by log-likelihood, a
generate_until task whose YAML asks for five stops (the server 400s on five; the run sends four
and says so), a HumanEval-style task scored by running the code. A run interrupted by a watchdog
restart is tests/lab/test_eval_field.py (the field suite, through the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.eval.plan import EvalOptions
from tpwarden.cluster.eval.runner import EvalRunner
from tpwarden.cluster.inventory.load import load_inventory

pytestmark = pytest.mark.lab
TASKS = Path(__file__).parent / "eval_tasks"


@pytest.fixture(scope="module")
def eval_image(eval_image_build):
    return eval_image_build["tag"]


@pytest.fixture
def ctl(lab, tmp_path):
    spec = load_inventory(lab.inventory)
    # the state dir the watchdog's actuator (and its restart job) uses too: one applied plan
    with Controller(spec, state_dir=tmp_path / "control", node_timeout_s=5) as c:
        result = c.up(timeout_s=300, replace=True)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        try:
            yield c
        finally:
            c.down()


def _eval_containers() -> list:
    return docker.from_env().containers.list(
        all=True, filters={"label": "io.tpwarden.component=eval"}
    )


@pytest.mark.timeout(900)
def test_three_local_tasks_with_the_real_lm_eval(ctl, eval_image, tmp_path):
    runner = EvalRunner(ctl, tmp_path / "runs")
    pre = runner.preflight()
    assert pre["ok"] and pre["server"]["max_model_len"]
    opts = EvalOptions(
        tasks=("tpwarden_mc", "tpwarden_gen5", "tpwarden_code"),
        include_path=str(TASKS),
        client_image=eval_image,
    )
    run_dir, manifest, rows = runner.run(opts, pre)
    by_task = {r["task"]: r for r in rows}
    assert by_task["tpwarden_mc"]["path"] == "loglikelihood/completions"
    assert by_task["tpwarden_gen5"]["path"] == "generate/completions"
    assert {t: r["n"] for t, r in by_task.items()} == {
        "tpwarden_mc": 6,
        "tpwarden_gen5": 5,
        "tpwarden_code": 4,
    }
    assert by_task["tpwarden_mc"]["metric"] == "acc,none"
    assert by_task["tpwarden_code"]["metric"] == "pass@1,none"
    assert all(isinstance(r["score"], float) for r in rows)
    plans = {p["task"]: p for p in manifest["plans"]}
    assert len(plans["tpwarden_gen5"]["stops_requested"]) == 5
    assert plans["tpwarden_gen5"]["stops_sent"] == ["Q:", "</s>", "<|im_end|>", "."]
    assert "capped from 5" in by_task["tpwarden_gen5"]["stops"]
    # what lm-eval actually sent: the per-sample record carries the gen_kwargs
    samples = (run_dir / "samples").glob("samples_tpwarden_gen5_*.jsonl")
    first = json.loads(next(samples).read_text().splitlines()[0])
    assert len(first["arguments"]["gen_args_0"]["arg_1"]["until"]) == 4
    # code ran: every HumanEval-style item has a pass@1 of 0 or 1
    code = next((run_dir / "samples").glob("samples_tpwarden_code_*.jsonl")).read_text()
    assert all(json.loads(x)["pass@1"] in (0, 1) for x in code.splitlines())
    assert manifest["server_defaults"]["thinking"] is False
    assert manifest["cluster"]["config_hash"] and manifest["server"]["version"] == "0.33.0"
    assert not manifest["restarts"] and not _eval_containers()
    facts = json.loads((run_dir / "client" / "tpwarden_mc.1.container.json").read_text())
    assert facts["network_mode"] == "host" and not facts["device_requests"]
