"""Boot phases, rendezvous, CLI errors, API key and the lost-rank failure modes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import NUM_SHARDS, REPO

PHASES = [
    r"version 0\.33\.0",
    r"non-default args: ",
    r"Using max model len 32000",
    r"Initializing a V1 LLM engine \(v0\.33\.0\) with config: ",
    r"Starting to load model ",
    rf"Loading safetensors checkpoint shards: 100% Completed \| "
    rf"{NUM_SHARDS}/{NUM_SHARDS}",
    r"Loading weights took [\d.]+ seconds",
    r"Loading drafter model\.\.\.",
    r"Model loading took [\d.]+ GiB memory and",
    r"Available KV cache memory: [\d.]+ GiB",
    r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency for 32,000 tokens per "
    r"request: [\d.]+x",
    r"init engine \(profile, create kv cache, warmup model\) took",
    r"Supported tasks: ",
    r"Starting vLLM server on http://127\.0\.0\.1:\d+",
    r"Available routes are:",
    r"INFO:     Started server process \[\d+\]",
    r"INFO:     Waiting for application startup\.",
    r"INFO:     Application startup complete\.",
]


def _refused(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=0.5)
    except httpx.ConnectError:
        return True
    return False


def test_boot_log_and_late_rank(sim_factory):
    c = sim_factory().start(ranks=[0, 1, 2])  # rank 3 is missing
    # wait for the condition (with a deadline for a loaded 2-core machine), not a fixed time
    deadline = time.monotonic() + 60
    while "Waiting for 1 remote node(s)" not in c.log(0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "Waiting for 1 remote node(s)" in c.log(0)
    assert _refused(c.url) and c.procs[0].poll() is None
    c.start_rank(3)
    c.wait_ready()
    log = c.log(0)
    pos = 0
    for pat in PHASES:
        m = re.compile(pat).search(log, pos)
        assert m, f"{pat!r} missing after position {pos}:\n{log[pos : pos + 2000]}"
        pos = m.end()
    shard_lines = re.findall(
        r"Loading safetensors checkpoint shards:\s+\d+% Completed \| (\d+)/" + str(NUM_SHARDS), log
    )
    assert [int(n) for n in shard_lines[: NUM_SHARDS + 1]] == list(range(NUM_SHARDS + 1))
    assert re.match(r"\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[", log)
    assert "headless multiproc executor, with head node address 127.0.0.1" in c.log(1)


def test_unknown_flag_exits_2():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpwarden.lab.vllm_sim",
            "serve",
            "m",
            "--no-such-flag",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --no-such-flag" in proc.stderr


def test_api_key(sim_factory):
    c = sim_factory(nnodes=1, k=None, extra=["--api-key", "s3cret"]).start()
    c.wait_ready()
    body = {"model": "glm-sim", "prompt": "hi", "max_tokens": 1}
    r = httpx.post(c.url + "/v1/completions", json=body, timeout=5)
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    ok = httpx.post(
        c.url + "/v1/completions", json=body, timeout=5, headers={"Authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200
    assert httpx.get(c.url + "/health").status_code == 200  # health needs no key
    assert "s3cret" not in c.log(0)


def _gauges(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=2).text.splitlines():
        for name in ("num_requests_running", "num_requests_waiting", "generation_tokens_total"):
            if line.startswith(f"vllm:{name}{{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_lost_worker_hangs_generation_but_health_stays_200(sim_factory, sig):
    c = sim_factory(env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "300"}).start()
    c.wait_ready()
    body = {"model": "glm-sim", "prompt": "ping", "max_tokens": 1}
    assert httpx.post(c.url + "/v1/completions", json=body, timeout=5).status_code == 200
    c.procs[2].send_signal(sig)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(c.url + "/v1/completions", json=body, timeout=2.0)
    assert httpx.get(c.url + "/health", timeout=2).status_code == 200
    assert httpx.get(c.url + "/v1/models", timeout=2).status_code == 200
    before = _gauges(c.url)
    time.sleep(0.5)
    after = _gauges(c.url)
    assert before["num_requests_running"] + before["num_requests_waiting"] > 0
    assert after["generation_tokens_total"] == before["generation_tokens_total"]


def test_execute_model_timeout_kills_engine(sim_factory):
    c = sim_factory(
        env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1.0", "VLLM_SIM_EXIT_DELAY_S": "1.5"}
    ).start()
    c.wait_ready()
    c.write_faults({"node_rank": {"3": {"hang": True}}})
    time.sleep(0.4)
    r = httpx.post(
        c.url + "/v1/completions",
        json={"model": "glm-sim", "prompt": "x", "max_tokens": 1},
        timeout=5,
    )
    assert r.status_code == 500
    assert httpx.get(c.url + "/health", timeout=2).status_code == 503
    assert c.procs[0].wait(timeout=10) != 0
    log = c.log(0)
    assert "TimeoutError: RPC call to execute_model timed out." in log
    assert "EngineDeadError" in log
    assert c.procs[1].poll() is None  # headless workers outlive the head (vllm#32136)


def test_boot_faults_and_http_5xx(sim_factory):
    c = sim_factory(nnodes=1, k=None)
    c.write_faults({"all": {"boot_crash_at": "load_weights"}})
    c.start()
    assert c.procs[0].wait(timeout=20) == 1
    assert "EngineCore failed to start." in c.log(0)
    assert "Starting to load model" not in c.log(0)
    c2 = sim_factory(nnodes=1, k=None)
    c2.write_faults({"all": {"http_5xx": True}})
    c2.start()
    c2.wait_ready()
    r = httpx.post(c2.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
    assert r.status_code == 500
    c2.write_faults({})
    time.sleep(0.4)
    r = httpx.post(c2.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
    assert r.status_code == 200
