"""The field report's whole evaluation on the lab (issue 34), with the operator's own commands in
docs/eval.md's order, on the lab's inventory plus the two eval settings an operator adds:

1. `tpwarden eval image build -i INV` builds the lm-eval client on the head (the session's
   `eval_image_build`); its tag goes into the inventory (`tpwarden.eval.client_image`);
2. `eval run --suite field` refuses up front (exit 2) while the head's cache lacks the data,
   naming the command that fixes it;
3. `eval datasets load FILE -i INV` puts the field suite's datasets into the head's cache, from
   the archive `eval datasets fetch` would write (here: lab/eval_slices.py, six synthetic rows per
   split in each dataset's own fields, since the lab has no Hub);
4. `eval run --suite field --limit 5` runs all eight benchmarks (nine lm-eval runs: KMMLU twice)
   while the watchdog watches; the head's API hangs during MMLU, the watchdog restarts the
   server, and the suite resumes MMLU from lm-eval's request cache and goes on to the end.

The simulated boot is scaled to ~33 s here (the lab's usual ~6 s would let lm-eval's five
request retries, 15 s of backoff, ride over the restart): the order of events is the field's,
where an 18-minute boot always outlasts the client's retries."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

import docker
import httpx
import pytest
import yaml
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.eval.catalog import suite_tasks
from tpwarden.cluster.eval.presets import EVAL_VENV
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab.eval_slices import write_archive
from tpwarden.lab.paths import HEAD

from tests.lab.conftest import CLI, tpwarden
from tests.lab.test_watchdog_scenarios import control_restarts, ready_watchdog, restart_then_healthy

pytestmark = pytest.mark.lab
BOOT_TIME_SCALE = "0.03"  # the simulated GLM boot (18.5 min) in ~33 s
# each simulated engine step at 1% of the GB10's modelled time (the lab's usual 5%): the nine
# runs send ~2,700 requests, most of them 5-shot prompts; the order of events stays the same
STEP_SCALE = "0.01"
# --limit 5 per leaf task: lm-eval 0.4.13's groups hold 57 MMLU subjects, 14 MMLU-Pro
# categories, 45 KMMLU subjects (direct too) and 4 KorMedMCQA subjects
FIELD_N = {
    "mmlu": 285, "mmlu_pro": 70, "kmmlu": 225, "kmmlu_direct": 225, "kormedmcqa": 20,
    "medqa_4options": 5, "medmcqa": 5, "gsm8k": 5, "humaneval": 5,
}  # fmt: skip


def _served(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def _operator_inventory(lab, dst: Path, hf_cache: Path, client_image: str) -> Path:
    """The lab's inventory with what an operator adds for evals (and the sim's time scales)."""
    doc = yaml.safe_load(lab.inventory.read_text())
    settings = doc["all"]["vars"]["tpwarden"]
    settings["eval"] = {"hf_cache": str(hf_cache), "client_image": client_image}
    settings["env"] = {
        **settings["env"], "VLLM_SIM_TIME_SCALE": BOOT_TIME_SCALE, "VLLM_SIM_STEP_SCALE": STEP_SCALE,
    }  # fmt: skip
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dst


def test_the_image_is_built_for_the_heads_platform_by_the_products_command(eval_image_build):
    doc = eval_image_build
    assert doc["ok"] and doc["command"] == "eval image build" and not doc["dry_run"]
    # the head's facts, read from the base image itself: the lab's head is this machine
    assert doc["target"]["machine"] == platform.machine() and doc["target"]["python"] == "3.11"
    wheels = doc["wheels"]
    assert wheels["lm-eval"] == "0.4.13" and "datasets" in wheels and "torch" not in wheels
    assert "pytz" in wheels  # pytablewriter -> typepy[datetime]: pip needs it offline
    image = docker.from_env().images.get(doc["tag"])
    assert image.labels["io.tpwarden.eval.inputs"] == doc["tag"].split(":")[1]


@pytest.mark.timeout(1800)
def test_the_field_suite_survives_a_watchdog_restart(lab, eval_image_build, tmp_path):
    hf_cache = lab.paths.models / ".hf-cache-field"  # the same path on the nodes and the host
    shutil.rmtree(hf_cache, ignore_errors=True)
    inv = _operator_inventory(lab, tmp_path / "inventory.yml", hf_cache, eval_image_build["tag"])
    control = tmp_path / "control"
    env = {"TPWARDEN_STATE_DIR": str(control)}  # the watchdog's restarts are recorded there
    run = ("eval", "run", "-i", str(inv), "--suite", "field", "--limit", "5", "--json",
           "--runs-dir", str(tmp_path / "runs"))  # fmt: skip
    try:
        refused = tpwarden(*run, env=env, timeout_s=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        error = json.loads(refused.stdout)["error"]
        assert "eval datasets load FILE -i " + str(inv) in error["message"]

        archive = write_archive(
            suite_tasks("field"), tmp_path / "field.tar", EVAL_VENV, "2026-12-05T00:00:00Z"
        )
        assert sorted(archive["tasks"]) == sorted(FIELD_N)
        loaded = tpwarden("eval", "datasets", "load", str(tmp_path / "field.tar"), "-i", str(inv),
                          "--json", env=env, timeout_s=300)  # fmt: skip
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        assert sorted(json.loads(loaded.stdout)["tasks_held"]) == sorted(FIELD_N)

        spec = load_inventory(inv)
        with Controller(spec, state_dir=control, node_timeout_s=10) as ctl:
            up = ctl.up(timeout_s=300, replace=True)
            assert up.ok, (up.outcomes, up.boot and up.boot.reason)
            try:
                proc = _run_through_a_restart(ctl, lab, tmp_path, run, env)
            finally:
                ctl.down()
    finally:
        shutil.rmtree(hf_cache, ignore_errors=True)
    _check_the_suite(proc, tmp_path, eval_image_build["tag"])


def _run_through_a_restart(ctl, lab, tmp_path: Path, run: tuple[str, ...], env: dict):
    """Start the suite, hang the head's API once MMLU is under way, let the watchdog restart
    the server (exactly once, after its three failures), then wait for the suite's end."""
    out, err = (tmp_path / "run.out").open("w"), (tmp_path / "run.err").open("w")
    proc = subprocess.Popen([*CLI, *run], stdout=out, stderr=err, env={**os.environ, **env})
    try:
        _hang_the_head_mid_mmlu(ctl, lab, tmp_path)
        proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
        err.close()
    (rec,) = control_restarts(tmp_path)
    assert rec["why"].startswith("watchdog: ")
    return proc


def _hang_the_head_mid_mmlu(ctl, lab, tmp_path: Path) -> None:
    wd = ready_watchdog(ctl, tmp_path)
    try:
        start, deadline = _served(ctl.spec.api_base), time.monotonic() + 300
        while _served(ctl.spec.api_base) - start < 150 and time.monotonic() < deadline:
            wd.tick()  # no false restart while the suite loads the server
            time.sleep(0.5)
        assert _served(ctl.spec.api_base) - start >= 150, (tmp_path / "run.err").read_text()
        t_fault = time.time()
        faults.container_action(lab.paths, HEAD, "pause")
        restart_then_healthy(wd, tmp_path, t_fault)  # exactly one restart, the watchdog's
    finally:
        wd.close()
        with contextlib.suppress(Exception):
            faults.container_action(lab.paths, HEAD, "unpause")


def _check_the_suite(proc: subprocess.Popen, tmp_path: Path, tag: str) -> None:
    stderr = (tmp_path / "run.err").read_text()
    assert proc.returncode == 0, stderr[-4000:]
    doc = json.loads((tmp_path / "run.out").read_text())
    assert doc["ok"] and doc["suite"] == "field"
    rows = {r["task"]: r for r in doc["rows"]}
    assert list(rows) == list(FIELD_N)  # all eight benchmarks, in the suite's order
    assert {t: r["n"] for t, r in rows.items()} == FIELD_N
    assert all(isinstance(r["score"], float) and not r.get("error") for r in rows.values())
    how = {s["task"]: s["how"] for s in doc["summary"]}
    assert how == {t: "resumed" if t == "mmlu" else "ran" for t in FIELD_N}, doc["summary"]
    run_dir = Path(doc["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (restart,) = manifest["restarts"]
    assert restart["task"] == "mmlu" and restart["resume"] and restart["server_down_seen"]
    assert manifest["client"]["image"] == tag
    # the restart failed MMLU's first attempt; the second finished it
    assert [a["rc"] == 0 for a in manifest["attempts"] if a["task"] == "mmlu"] == [False, True]
    # the resumed attempt asked only for what the first had not received
    log = (run_dir / "client" / "mmlu.2.log").read_text()
    cached = re.search(r"Cached requests: (\d+), Requests remaining: (\d+)", log)
    assert cached and int(cached[1]) > 0 and int(cached[2]) < 1140, log[-2000:]
    # progress per task while it ran (the request counts need lm-eval's bar in the log, which
    # docker writes per line or per 16 KiB: a minute-long lab task may show none)
    for position, task in enumerate(FIELD_N, 1):
        assert re.search(rf"^{task} \[{position}/9\]: ", stderr, re.M), stderr[-3000:]
    assert re.search(r"^mmlu \[1/9\] attempt 2: ", stderr, re.M)
