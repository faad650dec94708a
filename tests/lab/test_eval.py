"""`tpwarden eval` on the lab: the real lm_eval 0.4.13 (eval client image = the bench client
image + an lm-eval venv) against the simulated 4-node server, with local task definitions:
multiple choice by log-likelihood, a generate_until task whose YAML asks for five stops (the
server 400s on five; the run sends four and says so), a HumanEval-style task scored by running
the code. Then a run interrupted by a watchdog restart (the head's API hung mid-run) resumes from
lm-eval's request cache and scores the same number of items."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import docker
import httpx
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.eval.plan import EvalOptions
from tpwarden.cluster.eval.presets import EVAL_VENV
from tpwarden.cluster.eval.runner import EvalRunner
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab.client_image import CLIENT_LATEST
from tpwarden.lab.eval_image import ensure_eval_image
from tpwarden.lab.paths import HEAD

from tests.lab.test_watchdog_scenarios import (
    control_restarts,
    ready_watchdog,
    restart_then_healthy,
)

pytestmark = pytest.mark.lab
TASKS = Path(__file__).parent / "eval_tasks"


@pytest.fixture(scope="module")
def eval_image():
    if not docker.from_env().images.list(name=CLIENT_LATEST):
        pytest.fail(f"{CLIENT_LATEST} not built: scripts/setup.sh and `tpwarden lab up` build it")
    if not (EVAL_VENV / "lib").is_dir():
        pytest.fail(f"{EVAL_VENV} missing: scripts/setup.sh runs tools/lm_eval/install.sh")
    return ensure_eval_image(CLIENT_LATEST)


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


def _big_mc(dst: Path, n: int) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tpwarden_mc.yaml").write_text((TASKS / "tpwarden_mc.yaml").read_text())
    rows = [
        {
            "question": f"Item {i}: which is {i % 4}?",
            "choices": ["0", "1", "2", "3"],
            "answer": i % 4,
        }
        for i in range(n)
    ]
    (dst / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _served(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


@pytest.mark.timeout(1500)
def test_a_watchdog_restart_mid_run_resumes_from_the_cache(
    ctl, lab, eval_image, tmp_path, monkeypatch
):
    # The watchdog (its daemon's tick, the real actuator) watches the server; the head's API
    # hangs in the middle of the eval (container paused); the watchdog restarts the server after
    # its three failures; the eval waits for the server and resumes from lm-eval's cache.
    control = tmp_path / "control"
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(control))  # the restart job's default too
    tasks = _big_mc(tmp_path / "tasks", 150)
    runner = EvalRunner(ctl, tmp_path / "runs", restart_wait_s=600)
    pre = runner.preflight()
    # few retries and little concurrency: the restart must fail the client, mid-task
    opts = EvalOptions(
        tasks=("tpwarden_mc",),
        include_path=str(tasks),
        client_image=eval_image,
        num_concurrent=2,
        max_retries=1,
    )
    wd = ready_watchdog(ctl, tmp_path)
    try:
        out: dict = {}
        th = threading.Thread(target=lambda: out.update(r=runner.run(opts, pre)), daemon=True)
        start = _served(ctl.spec.api_base)
        th.start()
        deadline = time.monotonic() + 300
        while _served(ctl.spec.api_base) - start < 60 and time.monotonic() < deadline:
            wd.tick()
            time.sleep(0.5)
        assert _served(ctl.spec.api_base) - start >= 60, "the eval never got going"
        t_fault = time.time()
        faults.container_action(lab.paths, HEAD, "pause")
        restart_then_healthy(wd, tmp_path, t_fault)  # exactly one restart, by the watchdog
    finally:
        wd.close()
        with contextlib.suppress(Exception):
            faults.container_action(lab.paths, HEAD, "unpause")
    (rec,) = control_restarts(tmp_path)
    assert rec["why"].startswith("watchdog: ")
    th.join(timeout=900)
    run_dir, manifest, rows = out["r"]
    assert rows[0]["n"] == 150  # the same items as an uninterrupted run
    assert manifest["restarts"] and manifest["restarts"][0]["resume"] is True
    attempts = [a for a in manifest["attempts"] if a["task"] == "tpwarden_mc"]
    assert attempts[0]["rc"] != 0 and attempts[-1]["rc"] == 0
    last_log = (run_dir / "client" / f"tpwarden_mc.{len(attempts)}.log").read_text()
    cached = [x for x in last_log.splitlines() if "Cached requests:" in x]
    assert cached and not cached[0].split("Cached requests:")[1].strip().startswith("0,")
