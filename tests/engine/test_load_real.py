"""Busy is not dead, on real vLLM: 32 concurrent streams against the lab's small
--max-num-seqs plus one prompt near max_model_len make the 1-token probe time out (it queues),
while the real token counters advance. The watchdog counts 0 failures and judges those
probes busy from the real /metrics."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import pytest
from tpwarden.watchdog.policy_state import WatchdogPhase

from tests.lab.test_watchdog_scenarios import (
    FAILURES,
    INTERVAL_S,
    TIMEOUT_S,
    control_restarts,
    events,
    kinds,
    make_watchdog,
    phase_is,
    tick_until,
)

pytestmark = pytest.mark.engine

STREAMS = 32


def _stream(base: str, model: str, stop: threading.Event, done: list[int]) -> None:
    body = {"model": model, "prompt": "tell me a story", "max_tokens": 96, "stream": True,
            "ignore_eos": True}  # fmt: skip
    with httpx.Client(base_url=base, timeout=300) as c:
        while not stop.is_set():
            with (
                contextlib.suppress(httpx.HTTPError),
                c.stream("POST", "/v1/completions", json=body) as r,
            ):
                for _ in r.iter_lines():
                    if stop.is_set():
                        break
                done.append(r.status_code)


def _long_prompt(base: str, model: str, max_len: int, stop: threading.Event, done: list[int]):
    with httpx.Client(base_url=base, timeout=300) as c:
        ids = c.post("/tokenize", json={"model": model, "prompt": "hello " * max_len}).json()
        n = max_len - 16  # near max length: a real, long prefill
        body = {"model": model, "prompt": ids["tokens"][:n], "max_tokens": 8}
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                done.append(c.post("/v1/completions", json=body).status_code)


def test_real_load_times_probes_out_but_counts_no_failure(engine_server, tmp_path):
    spec = engine_server.spec
    assert "--max-num-seqs" in spec.serving.extra_args  # the lab's small batch: probes queue
    wd = make_watchdog(spec, tmp_path, boot_deadline_s=600)
    base, model = engine_server.api_base, engine_server.served_name
    stop, streams, longs = threading.Event(), [], []
    threads = [
        threading.Thread(target=_stream, args=(base, model, stop, streams), daemon=True)
        for _ in range(STREAMS)
    ]
    threads.append(
        threading.Thread(
            target=_long_prompt,
            args=(base, model, spec.serving.max_model_len, stop, longs),
            daemon=True,
        )
    )
    try:
        tick_until(wd, phase_is(wd, WatchdogPhase.READY), 60, "ready")
        for t in threads:
            t.start()
        t0 = time.time()
        end = time.monotonic() + 4 * FAILURES * (INTERVAL_S + TIMEOUT_S)
        while time.monotonic() < end:
            started = time.monotonic()
            wd.tick()
            time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - started)))
        evs = [e for e in events(wd) if e["ts"] >= t0]
        probes = kinds(evs, "probe")
        verdicts = {v: sum(1 for p in probes if p["verdict"] == v) for v in {p["verdict"] for p in probes}}  # fmt: skip
        print(f"real load: {len(probes)} probes {verdicts}; {len(streams)} streams, "
              f"long prompts {longs}")  # fmt: skip
        assert not [e for e in evs if e.get("decision") == "count_failure"], verdicts
        assert not kinds(evs, "restart_begin") and not control_restarts(tmp_path)
        assert verdicts.get("busy", 0) >= 1, verdicts  # timed out, judged busy from counters
        # the load ran: streams finished (a batch of --max-num-seqs at a time) and the
        # near-max-length prompt was served
        assert len(streams) >= 8 and 200 in longs, (len(streams), longs)
    finally:
        stop.set()
        for t in threads:
            if t.is_alive():
                t.join(timeout=60)
        wd.close()
        engine_server.ensure_healthy()
