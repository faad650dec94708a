#!/usr/bin/env python3
"""Latency of one generation-free decision (max_tokens=1 + top_logprobs), idle and while other
users generate: the field report measured p50 417 ms idle and 858 ms with one other user.

Asks `--samples` multiple-choice items one after another through the real `decide` client, first
on an idle server, then while N background streams generate long answers (one continuous-batching
step is shared, so a decision waits for the step in flight and shares the next). Figures are
given as ratios to the idle baseline measured in the same run, because absolute numbers belong
to the machine (and, against the simulator, to its load model).

Against the simulator (started here, 1 rank, drafter k=3, unscaled step time):
    .venv/bin/python bench/decide_latency.py --samples 40 --loads 0,1,8
Against a real server:
    .venv/bin/python bench/decide_latency.py --url http://head:8000 --model glm-5.3-flash
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.sim: the simulator harness

from tpwarden.cluster.decide.client import LogprobClient  # noqa: E402
from tpwarden.cluster.decide.core import Decider, Item  # noqa: E402
from tpwarden.cluster.decide.stats import latency_summary  # noqa: E402


def load_stream(url: str, model: str, stop: threading.Event, n: int) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Write a long story, number {n}."}],
        "max_tokens": 512,
        "ignore_eos": True,
        "temperature": 0.7,
    }
    with httpx.Client(base_url=url, timeout=600) as c:
        while not stop.is_set():
            try:
                c.post("/v1/chat/completions", json=body)
            except httpx.HTTPError:
                time.sleep(0.2)


def wait_load(url: str, n: int, timeout: float = 60.0) -> None:
    """Poll the server's own count of requests in flight until the background load is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/load", timeout=5).json().get("server_load", 0) >= n:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"background load of {n} streams did not start in {timeout}s")


def measure(decider: Decider, samples: int, tag: str) -> list[float]:
    out = []
    for i in range(samples):
        item = Item(
            f"{tag}{i}",
            f"Question {tag}-{i}: which organ pumps blood?",
            choices={"A": "Liver", "B": "Heart", "C": "Lung", "D": "Kidney", "E": "Skin"},
        )
        out.append(decider.decide(item).latency_ms)
    return out


def run(url: str, model: str, samples: int, loads: list[int], path: str) -> list[dict]:
    decider = Decider(LogprobClient(url, model, path=path))  # type: ignore[arg-type]
    measure(decider, 3, "warm")
    rows = []
    for n in loads:
        stop = threading.Event()
        threads = [
            threading.Thread(target=load_stream, args=(url, model, stop, i), daemon=True)
            for i in range(n)
        ]
        for t in threads:
            t.start()
        if n:
            wait_load(url, n)
        lat = measure(decider, samples, f"c{n}-")
        stop.set()
        rows.append({"other_streams": n, **latency_summary(lat)})
        for t in threads:
            t.join(timeout=120)
    base = rows[0]
    for r in rows:
        r["p50_ratio"] = r["p50"] / base["p50"]
        r["p95_ratio"] = r["p95"] / base["p95"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="server base URL (default: start the simulator)")
    ap.add_argument("--model", default="glm-sim")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--loads", default="0,1,8", help="background streams per level; first = base")
    ap.add_argument("--path", default="completions", choices=["completions", "chat"])
    ap.add_argument("--step-scale", default="1.0", help="simulator step-time factor")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    loads = [int(x) for x in a.loads.split(",")]
    sim = None
    if not a.url:
        from tests.sim.conftest import SimCluster

        tmp = Path(tempfile.mkdtemp(prefix="decide-bench-"))
        sim = SimCluster(tmp, nnodes=1, k=3, env={"VLLM_SIM_STEP_SCALE": a.step_scale}).start()
        sim.wait_ready()
        a.url = sim.url
    try:
        rows = run(a.url, a.model, a.samples, loads, a.path)
    finally:
        if sim:
            sim.stop()
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"decide latency ({a.path}, {a.samples} sequential decisions per level, {a.url})")
    print(f"{'other streams':>13} {'p50 ms':>8} {'p95 ms':>8} {'p50/idle':>9} {'p95/idle':>9}")
    for r in rows:
        print(
            f"{r['other_streams']:>13} {r['p50']:>8.0f} {r['p95']:>8.0f} "
            f"{r['p50_ratio']:>9.2f} {r['p95_ratio']:>9.2f}"
        )


if __name__ == "__main__":
    main()
