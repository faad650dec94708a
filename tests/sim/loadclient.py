"""A load client run as a process of its own session, as `vllm bench serve` runs in the client
container: `python loadclient.py URL STREAMS TOKENS` prints `{"tok_s": ..., "itl_ms": ...}`.

Why a session of its own: the test runs in the pure lane (nice 10), in the CI session beside the
lab lanes' pytest processes and their Ansible forks (nice 0). This machine schedules by autogroup
(`sched_autogroup_enabled=1`: a session is one scheduling entity and a nice counts only inside it),
so a client inside that session gets a few per cent of its share and the throughput it measures is
its own lag reading the chunks, not the server's. In a session of its own it competes as one
entity among the others, like the real client container. `level` is the same measurement in
process, for callers that want it there.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

import httpx


async def level(url: str, streams: int, tokens: int) -> tuple[float, float]:
    """(aggregate tok/s, median inter-chunk gap ms) for `streams` concurrent streamed requests."""
    body = {
        "model": "glm-sim",
        "prompt": "Korean prose, please.",
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    gaps: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:

        async def one() -> None:
            last = None
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    now = time.monotonic()
                    if last is not None:
                        gaps.append((now - last) * 1000.0)
                    last = now

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(streams)))
        return streams * tokens / (time.monotonic() - t0), statistics.median(gaps)


def level_in_own_session(url: str, streams: int, tokens: int) -> tuple[float, float]:
    """`level`, measured by a process in a session of its own (module docstring)."""
    done = subprocess.run(
        [sys.executable, __file__, url, str(streams), str(tokens)],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    return got["tok_s"], got["itl_ms"]


if __name__ == "__main__":
    tok_s, itl_ms = asyncio.run(level(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps({"tok_s": tok_s, "itl_ms": itl_ms}))
