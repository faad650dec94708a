"""Load model: batch size and draft length move throughput the way the field report's table does."""

from __future__ import annotations

import asyncio
import time

import httpx

TOKENS = 48
LOAD_ENV = {"VLLM_SIM_STEP_SCALE": "0.15", "VLLM_SIM_SPEC_ACCEPTANCE": "expected"}


async def _run(url: str, streams: int) -> tuple[float, float]:
    """(aggregate tok/s, mean per-stream tok/s) for ``streams`` concurrent requests."""
    body = {
        "model": "glm-sim",
        "prompt": "Korean prose, please.",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }
    async with httpx.AsyncClient(timeout=60) as client:

        async def one() -> float:
            t0 = time.monotonic()
            r = await client.post(url + "/v1/completions", json=body)
            assert r.json()["usage"]["completion_tokens"] == TOKENS
            return TOKENS / (time.monotonic() - t0)

        t0 = time.monotonic()
        rates = await asyncio.gather(*(one() for _ in range(streams)))
        return streams * TOKENS / (time.monotonic() - t0), sum(rates) / len(rates)


def test_concurrency_and_draft_length(sim_factory):
    results = {}
    for k in (7, 3):
        c = sim_factory(nnodes=1, k=k, env=LOAD_ENV).start()
        c.wait_ready()
        # the better of two runs: a busy machine only ever slows a run down (a CI run lost
        # k=3's +18 % at 32 users once, with both figures far below the load model's)
        results[k] = {n: max(asyncio.run(_run(c.url, n)) for _ in range(2)) for n in (1, 32)}
        c.stop()
    for k in (7, 3):
        agg1, per1 = results[k][1]
        agg32, per32 = results[k][32]
        assert agg32 > 3 * agg1, results
        assert per32 < per1, results
    assert results[3][1][1] < results[7][1][1], results  # one user loses with k=3
    assert results[3][32][0] > results[7][32][0], results  # many users gain with k=3
