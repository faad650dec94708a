"""The load model: how long engine steps take and how many tokens they yield.

Fitted to the field report (brief.md), TP=4 GB10 nodes, GLM-5.3-Flash NVFP4 + DFlash:
* decode/verify step: ``T(B, k) = T0 + T1*B + k*(V0 + V1*B)`` seconds for batch B, k drafts:
  185 ms at B=1,k=7; 477 ms at B=32,k=7; 354 ms at B=32,k=3 (report: 185/477/356 ms ITL).
* drafts: unconditional acceptance of position i is ``Q1 * D**(i-1)`` -> mean tokens per step
  1 + sum = 2.40 at k=7 (20 % acceptance), 2.10 at k=3 (37 %); with T this gives the report's
  shape: k=3 vs k=7 single stream -10 %, 8 streams ~equal, 32 streams +18 %.
* prefill: ``t(n) = 0.00629 * n**0.778`` seconds for n prompt tokens (32k -> 20.5 s,
  128k -> 60.3 s, a 200-token prompt -> 0.39 s); charged chunk by chunk.

Scriptable for tests (read once at import; unset = the fitted defaults above):
``VLLM_SIM_STEP_T0``, ``VLLM_SIM_STEP_T1``, ``VLLM_SIM_STEP_V0``, ``VLLM_SIM_STEP_V1`` (seconds)
and ``VLLM_SIM_ACCEPT_Q1``, ``VLLM_SIM_ACCEPT_DECAY`` (the acceptance curve's Q1 and D).
"""

from __future__ import annotations

import os
import random


def _env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw is None or not raw.strip() else float(raw)


T0, T1 = _env("VLLM_SIM_STEP_T0", 0.1735), _env("VLLM_SIM_STEP_T1", 0.00275)
V0, V1 = _env("VLLM_SIM_STEP_V0", 0.0003), _env("VLLM_SIM_STEP_V1", 0.000953)
# k=7 -> 2.40 tokens/step (acc 20 %), k=3 -> 2.10 (acc 37 %)
Q1, D = _env("VLLM_SIM_ACCEPT_Q1", 0.5464), _env("VLLM_SIM_ACCEPT_DECAY", 0.624)
PREFILL_C, PREFILL_P = 0.00629, 0.778


def step_time(batch: int, k: int) -> float:
    """Seconds for one decode (or draft-verify) step of ``batch`` running sequences."""
    if batch <= 0:
        return 0.0
    return T0 + T1 * batch + k * (V0 + V1 * batch)


def prefill_time(done: int, chunk: int) -> float:
    """Seconds to prefill tokens ``done .. done+chunk`` of one prompt."""
    return PREFILL_C * ((done + chunk) ** PREFILL_P - done**PREFILL_P)


def position_acceptance(k: int) -> list[float]:
    """Unconditional acceptance probability of draft position 1..k."""
    return [Q1 * D**i for i in range(k)]


def mean_tokens_per_step(k: int) -> float:
    return 1.0 + sum(position_acceptance(k))


def sample_accepted(rng: random.Random, k: int) -> int:
    """Draft tokens accepted in one verify step (stops at the first rejection)."""
    acc = position_acceptance(k)
    prev = 1.0
    n = 0
    for q in acc:
        if rng.random() >= q / prev:
            break
        n += 1
        prev = q
    return n
