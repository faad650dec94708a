#!/usr/bin/env python3
"""Watchdog detection bench against any OpenAI-compatible server (the lab simulator, or real vLLM).

Runs the real probe + pure policy with a wall clock and a *recording* actuator (it never restarts
anything), while N load threads send long completions. Two figures:

* false restarts: Restart decisions while the server is only loaded (should be 0);
* detection time: after `--fault` (an argv run without a shell, e.g. the lab's hang fault) the time
  until the policy decides Restart, next to the policy's window (failures x timeout .. slowest).

Example (lab, time-scaled):
    python bench/watchdog_detection.py http://127.0.0.1:8000 --timeout 5 --interval 1 \
        --load 8 --load-s 60 --fault servectl lab fault hang --fault-wait 120
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import httpx
from servectl.watchdog.config import WatchdogConfig
from servectl.watchdog.policy import (
    Observation,
    Phase,
    Policy,
    PolicyConfig,
    PolicyState,
    Restart,
    detection_window_s,
)
from servectl.watchdog.probe import Outcome, Prober


def load_worker(cfg: WatchdogConfig, model: str, prompt_words: int, stop: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    body = {
        "model": model,
        "prompt": "hello " * prompt_words,
        "max_tokens": 256,
        "temperature": 0,
        "ignore_eos": True,
    }
    with httpx.Client(base_url=cfg.probe_url, headers=headers, timeout=600) as c:
        while not stop.is_set():
            try:
                c.post("/v1/completions", json=body)
            except httpx.HTTPError:
                time.sleep(0.5)


def watch(
    cfg: WatchdogConfig,
    seconds: float,
    stop_on_restart: bool,
    verdicts: dict[str, int] | None = None,
) -> tuple[int, float | None]:
    """Probe for `seconds`; returns (restart decisions, time of the first one)."""
    prober, policy = Prober(cfg), Policy(PolicyConfig.from_config(cfg))
    verdicts = {} if verdicts is None else verdicts
    state, restarts, first = PolicyState(phase=Phase.READY), 0, None
    end = time.time() + seconds
    while time.time() < end:
        t0 = time.monotonic()
        probe = prober.probe()
        metrics = None if probe.outcome is Outcome.REFUSED else prober.scrape_metrics()
        state, decisions = policy.decide(state, Observation(probe, metrics), time.time())
        verdicts[state.last_verdict or "?"] = verdicts.get(state.last_verdict or "?", 0) + 1
        print(
            f"{time.strftime('%H:%M:%S')} {probe.outcome.value:9} {probe.latency_s:7.2f}s "
            f"{state.last_verdict:9} failures={state.consecutive_failures}"
        )
        for d in decisions:
            if isinstance(d, Restart):
                restarts += 1
                first = first or time.time()
                print(f"  RESTART decided: {d.reason}")
                state = PolicyState(phase=Phase.READY)  # nothing restarted: keep judging
                if stop_on_restart:
                    return restarts, first
        time.sleep(max(0.0, cfg.interval_s - (time.monotonic() - t0)))
    return restarts, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base_url")
    ap.add_argument("--model")
    ap.add_argument("--api-key")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--interval", type=float, default=30)
    ap.add_argument("--failures", type=int, default=3)
    ap.add_argument("--load", type=int, default=8, help="concurrent load threads")
    ap.add_argument("--prompt-words", type=int, default=4000)
    ap.add_argument("--load-s", type=float, default=600, help="seconds of load-only watching")
    ap.add_argument(
        "--long-prefill-words",
        type=int,
        default=0,
        help="also keep one request with a prompt this long in flight the whole time",
    )
    ap.add_argument("--fault", nargs=argparse.REMAINDER, help="argv that hangs the server")
    ap.add_argument("--fault-wait", type=float, default=1800)
    a = ap.parse_args()
    cfg = WatchdogConfig(
        probe_url=a.base_url.rstrip("/"),
        state_dir=tempfile.mkdtemp(),
        model=a.model,
        api_key=a.api_key,
        timeout_s=a.timeout,
        interval_s=a.interval,
        failures=a.failures,
    )
    model = a.model or Prober(cfg)._http.get("/v1/models").json()["data"][0]["id"]
    stop = threading.Event()
    threads = [
        threading.Thread(target=load_worker, args=(cfg, model, a.prompt_words, stop), daemon=True)
        for _ in range(a.load)
    ]
    if a.long_prefill_words:
        threads.append(
            threading.Thread(
                target=load_worker, args=(cfg, model, a.long_prefill_words, stop), daemon=True
            )
        )
    for t in threads:
        t.start()
    verdicts: dict[str, int] = {}
    false_restarts, _ = watch(cfg, a.load_s, stop_on_restart=False, verdicts=verdicts)
    print(
        f"\nfalse restarts under load ({a.load} streams"
        f"{f' + a {a.long_prefill_words}-word prefill' if a.long_prefill_words else ''}, "
        f"{a.load_s:g}s): {false_restarts}; probe verdicts {verdicts}"
    )
    if a.fault:
        import subprocess

        t_fault = time.time()
        subprocess.run(a.fault, check=True)
        _, first = watch(cfg, a.fault_wait, stop_on_restart=True)
        lo, hi = detection_window_s(cfg)
        got = f"{first - t_fault:.1f}s" if first else "not detected"
        print(
            f"hang detection: {got}; policy window {lo:g}s .. {hi:g}s "
            f"(ratio to fastest: {((first - t_fault) / lo) if first else float('nan'):.2f})"
        )
    stop.set()


if __name__ == "__main__":
    main()
