"""Boot and status on real vLLM: the boot reader on real log lines, status before and after a
real rank is paused (the field incident: /health 200, generation hung)."""

from __future__ import annotations

import httpx
import pytest
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.control.status_model import Verdict
from tpwarden.lab import faults

pytestmark = pytest.mark.engine

WORKER = "node3"


def test_boot_followed_from_real_logs_reaches_ready(engine_server):
    boot = engine_server.boot
    progress = boot.progress
    assert boot.ready and boot.reason is None, (boot.reason, boot.last_lines)
    assert progress.phase is BootPhase.READY and not progress.failed, progress
    # the real model is one safetensors file: the real shard bar says 1/1 (no drafter model:
    # n-gram speculation loads nothing)
    assert (progress.shards_loaded, progress.shards_total) == (1, 1), progress
    assert progress.drafter_shards_total is None
    assert progress.version and progress.version.startswith("0.32.0"), progress.version
    assert progress.max_model_len == engine_server.spec.serving.max_model_len
    assert progress.kv_cache_tokens and progress.kv_cache_tokens > 0, progress


def test_the_probe_was_the_first_request_and_every_rank_survived_it(engine_server):
    """Issue 49: on a CPU with AMX, vLLM 0.32's CPU attention ran its first tile instruction
    without the kernel's permission when a <= 4-token prompt was the server's first request
    (no bf16 GEMM of more rows had asked for it by accident), and every rank died with SIGILL.
    The fixture's `up` followed the boot until the watchdog's 1-token probe answered: by then
    the server had served that probe and nothing else, and it serves on."""
    first = engine_server.metrics_after_boot
    answered = first.get("vllm:request_success_total", 0.0)
    assert answered >= 1, first
    # nothing but probes: one token out each, at most 4 prompt tokens in each
    assert first.get("vllm:generation_tokens_total") == answered, first
    assert 0 < first.get("vllm:prompt_tokens_total", 0.0) <= 4 * answered, first
    with engine_server.controller(node_timeout_s=10) as ctl:
        st = ctl.status(timeout_s=15)
    assert st.verdict is Verdict.HEALTHY, st.notes
    assert [n.state for n in st.nodes] == ["running"] * 4


def test_real_completion_has_logprobs(engine_server):
    body = {
        "model": engine_server.served_name,
        "prompt": "안녕하세요",
        "max_tokens": 1,
        "logprobs": 5,
    }
    r = httpx.post(engine_server.api_base + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    top = lp["top_logprobs"][0]
    # real vLLM: the 5 most likely tokens, plus the sampled one when it is not among them
    assert len(top) in (5, 6) and lp["tokens"][0] in top, lp


def test_status_healthy_then_names_the_paused_rank(engine_server):
    with engine_server.controller(node_timeout_s=10) as ctl:
        st = ctl.status(timeout_s=15)
        assert st.verdict is Verdict.HEALTHY, st.notes
        assert [n.state for n in st.nodes] == ["running"] * 4
        faults.container_action(engine_server.paths, WORKER, "pause")
        try:
            health = httpx.get(engine_server.api_base + "/health", timeout=5)
            assert health.status_code == 200  # real vLLM: /health does not see a lost rank
            with pytest.raises(httpx.TimeoutException):
                httpx.post(
                    engine_server.api_base + "/v1/completions",
                    json={"model": engine_server.served_name, "prompt": "hi", "max_tokens": 1},
                    timeout=3,
                )
            st = ctl.status(timeout_s=15)
            # /health 200 + failing probe = hung; the notes say which rank is why
            assert st.verdict is Verdict.HUNG, (st.verdict, st.notes)
            assert st.server.health_status == 200 and not st.server.probe_ok
            assert f"not running: {WORKER}=paused" in st.notes, st.notes
            # the real engine's gauges: nothing admitted, so counters cannot tell load
            assert st.server.requests_running == 0.0, st.server
        finally:
            faults.container_action(engine_server.paths, WORKER, "unpause")
    engine_server.ensure_healthy()
