"""Issue 33: `tune drafter`'s recommendation equals the best k found by sweeping every k.

The simulator runs a scripted acceptance curve and step costs (VLLM_SIM_ACCEPT_*, VLLM_SIM_STEP_*).
One measured run at the current k goes through the toolkit's own pipeline (the /metrics pages
before and after each level -> `measure.window` counter deltas -> `model.fit` / `predict` /
`recommend`); then a server is started at EVERY k in 0..K_MAX (k=0: no drafter) and the same
levels are measured. For three load profiles the recommendation must be the argmax of the
sweep's measured weighted throughput, and that argmax must be clear of the runner-up by
MIN_MARGIN in the measured numbers (else the scripted curve cannot decide it on a loaded machine:
the test fails and prints the table rather than passing by luck). The server's ranks and the
load client each run in a session of their own (conftest.py, loadclient.py): on this machine's
autogroup scheduler, inside the CI session at the pure lane's nice 10, both were starved behind the
lab lanes' Ansible forks, and CI measured k=0 and k=1 at 32 streams 0.5 % apart (192 and 191
tok/s, where the load model gives 227 and 202).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from tpwarden.cluster.tune.measure import window
from tpwarden.cluster.tune.model import LevelMeasure, fit, parse_profile, predict, recommend

from .loadclient import level_in_own_session

K_MAX = 3
K_NOW = 2
LEVELS = (1, 8, 32)
# 128 tokens a stream at a step scale of 0.15: the single stream's throughput is a mean over ~55
# sampled-acceptance steps (at 64 tokens and 0.05 the mean over ~27 steps wandered by ~9 %, and
# one scheduling stall of a nice-10 process beside both lab lanes was a large share of a 1-s run;
# CI saw the mixed profile's 10 % margin measured at 1.5 %). The runs wait, they do not compute:
# ~20 CPU-s in all, ~8 minutes of wall time in the pure lane, beside the lab lanes.
TOKENS = 128
MIN_MARGIN = 0.03
REPEATS = 2  # each level run twice, the faster kept: a loaded machine only ever slows a run
# T(B, k) = 0.3 + 0.02*B*(1+k) s: a draft token costs what a stream token costs, the step
# model's own assumption when one k was measured (steptime.py; a dearer draft token is not
# identifiable from one k). Acceptance of position i = 0.5 * 0.95**i, sampled per step (the
# simulator's "expected" mode keeps the mean but not the per-position curve). By the load
# model's formula: single-stream best k=3 by 16 %, mixed best k=3 by 10 %, high-concurrency
# best k=0 by 10 %: clear of what a loaded machine blurs.
SIM_ENV = {
    "VLLM_SIM_STEP_SCALE": "0.15",
    "VLLM_SIM_STEP_T0": "0.3",
    "VLLM_SIM_STEP_T1": "0.02",
    "VLLM_SIM_STEP_V0": "0",
    "VLLM_SIM_STEP_V1": "0.02",
    "VLLM_SIM_ACCEPT_Q1": "0.5",
    "VLLM_SIM_ACCEPT_DECAY": "0.95",
}
PROFILES = {
    "single-stream": "c1:1",
    "mixed": "c1:0.6,c8:0.3,c32:0.1",
    "high-concurrency": "c1:0.05,c32:0.95",
}


def _measure(url: str) -> list[tuple[int, str, str, float, float]]:
    """(level, /metrics before, /metrics after, aggregate tok/s, ITL ms) per level; the pages
    span all REPEATS runs of the level, the throughput and ITL are the best run's."""
    out = []
    for c in LEVELS:
        before = httpx.get(url + "/metrics").text
        runs = [level_in_own_session(url, c, TOKENS) for _ in range(REPEATS)]
        agg, itl = max(runs)
        out.append((c, before, httpx.get(url + "/metrics").text, agg, itl))
    return out


def _serve(sim_factory, k: int) -> list[tuple[int, str, str, float, float]]:
    c = sim_factory(nnodes=1, k=k or None, env=SIM_ENV).start()
    try:
        c.wait_ready()
        return _measure(c.url)
    finally:
        c.stop()


@pytest.mark.timeout(1200)  # ~9 minutes of waiting on a loaded machine (see TOKENS)
def test_recommendation_matches_the_sweep(sim_factory):
    t_start = time.monotonic()
    levels = [
        LevelMeasure(c, window(before, after), itl, agg)
        for c, before, after, agg, itl in _serve(sim_factory, K_NOW)
    ]
    assert all(lv.counts.k == K_NOW and lv.counts.drafts > 0 for lv in levels)
    preds = predict(levels, fit(levels), k_max=K_MAX)
    sweep = {k: {c: agg for c, _, _, agg, _ in _serve(sim_factory, k)} for k in range(K_MAX + 1)}

    rows, best_ks = [], set()
    for name, text in PROFILES.items():
        profile = parse_profile(text)
        rec = recommend(preds, profile, K_NOW)
        measured = {
            k: sum(w * sweep[k][c] / sweep[K_NOW][c] for c, w in profile.items()) for k in sweep
        }
        order = sorted(measured, key=lambda k: measured[k], reverse=True)
        margin = measured[order[0]] / measured[order[1]] - 1.0
        rows.append((name, rec.k, order[0], margin, measured, rec))
        best_ks.add(order[0])
    table = json.dumps(
        {
            "sweep_tok_s": sweep,
            "profiles": [
                {
                    "profile": name,
                    "recommended": rk,
                    "sweep_best": bk,
                    "margin": round(m, 4),
                    "measured_gain": {k: round(v, 4) for k, v in meas.items()},
                    "predicted_gain": {k: round(v[0], 4) for k, v in rec.scores.items()},
                }
                for name, rk, bk, m, meas, rec in rows
            ],
            "runtime_s": round(time.monotonic() - t_start, 1),
        },
        indent=1,
    )
    print(table)
    for name, _, best, margin, _, _ in rows:
        assert margin >= MIN_MARGIN, f"{name}: best k={best} only {margin:.1%} clear:\n{table}"
    assert len(best_ks) >= 2, f"every profile has the same best k:\n{table}"
    for name, rk, best, _, _, _ in rows:
        assert rk == best, f"{name}: recommended k={rk}, sweep best k={best}:\n{table}"
