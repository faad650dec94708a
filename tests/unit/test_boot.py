"""The boot parser and tracker on a real vLLM 0.25.1 boot log (GB10, 49 NVFP4 shards, DFlash)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.boot.history import BootHistory, estimate_eta, phase_durations
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootTracker
from tpwarden.cluster.boot.rules import parse_line

SAMPLE = Path("/work/shared/reference/samples/v0.25.1_gb10_dgx-spark_nvfp4_dflash_success.log")
if not SAMPLE.exists():  # the repo may carry its own copy
    SAMPLE = Path(__file__).parent / "fixtures" / SAMPLE.name


def _lines() -> list[str]:
    if not SAMPLE.exists():
        pytest.skip("sample boot log not available")
    return [ln for ln in SAMPLE.read_text().splitlines() if not ln.startswith("#")]


def _replay(tracker: BootTracker) -> list[BootPhase]:
    seen: list[BootPhase] = []
    for i, line in enumerate(_lines()):
        p = tracker.feed(line, now=float(i))
        if not seen or seen[-1] is not p.phase:
            seen.append(p.phase)
    return seen


def test_phases_in_order_and_ready():
    tracker = BootTracker()
    seen = _replay(tracker)
    assert seen == [
        BootPhase.STARTING,
        BootPhase.ENGINE_INIT,
        BootPhase.RENDEZVOUS,
        BootPhase.LOADING_WEIGHTS,
        BootPhase.LOADING_DRAFTER,
        BootPhase.PROFILING,
        BootPhase.KV_CACHE,
        BootPhase.WARMUP,
        BootPhase.API_STARTING,
        BootPhase.READY,
    ]
    p = tracker.progress
    assert p.ready and not p.failed and p.fraction == 1.0
    assert (p.shards_loaded, p.shards_total) == (49, 49)
    assert (p.drafter_shards_loaded, p.drafter_shards_total) == (1, 1)
    assert p.version == "0.25.1"
    assert p.max_model_len == 65536
    assert p.kv_cache_gib == pytest.approx(6.97)
    assert p.kv_cache_tokens == 94_135
    assert p.max_concurrency == pytest.approx(1.44)
    assert p.api_url == "http://0.0.0.0:8000"


def test_shard_progress_is_monotonic_and_fraction_grows():
    tracker = BootTracker()
    fractions, shards = [], []
    for i, line in enumerate(_lines()):
        p = tracker.feed(line, now=float(i))
        fractions.append(p.fraction)
        if p.phase is BootPhase.LOADING_WEIGHTS:
            shards.append(p.shards_loaded)
    assert shards == sorted(shards) and shards[-1] == 49
    assert all(b >= a for a, b in zip(fractions, fractions[1:], strict=False))


def test_parse_line_examples():
    (ev,) = parse_line(
        "(EngineCore pid=1) Loading safetensors checkpoint shards:  47% Completed "
        "| 23/49 [06:08<03:37,  8.36s/it]"
    )
    assert ev.kind == "shards" and (ev.data["n"], ev.data["total"], ev.data["pct"]) == (23, 49, 47)
    (ev,) = parse_line(
        "(EngineCore_DP0 pid=9) INFO 12-02 10:38:00 [kv_cache_utils.py:1149] GPU KV "
        "cache size: 643,232 tokens, Maximum concurrency for 40,960 tokens per "
        "request: 15.70x"
    )
    assert ev.kind == "kv_tokens" and ev.data["tokens"] == 643_232
    evs = parse_line(
        "(EngineCore pid=1) Capturing CUDA graphs (decode, FULL):   0%|  | 0/32 "
        "[00:00<?, ?it/s]\rCapturing CUDA graphs (decode, FULL):  50%| | 16/32"
    )
    assert [e.data["pct"] for e in evs] == [0, 50]
    (ev,) = parse_line(
        "(Worker_TP1 pid=7) INFO 12-02 10:38:00 [serve.py:1] Launching vLLM "
        "(v0.33.0) headless multiproc executor, with head node address "
        "10.0.0.11:29501 for torch.distributed process group."
    )
    assert ev.kind == "headless" and ev.phase is BootPhase.RENDEZVOUS
    (ev,) = parse_line(
        "(APIServer pid=1) INFO 12-02 10:38:00 [entry.py:139] Starting vLLM API "
        "server 0 on http://0.0.0.0:8000"
    )
    assert ev.data["url"] == "http://0.0.0.0:8000"
    assert parse_line("(APIServer pid=1) INFO 08-01 20:59:09 [api_utils.py:339] ") == []


def test_traceback_fails_with_the_exception_line():
    tracker = BootTracker()
    for i, line in enumerate(_lines()[:60]):
        tracker.feed(line, now=float(i))
    assert tracker.progress.phase is BootPhase.LOADING_WEIGHTS
    tracker.feed("(EngineCore pid=1) Traceback (most recent call last):", 100.0)
    tracker.feed('(EngineCore pid=1)   File "x.py", line 3, in f', 100.0)
    p = tracker.feed("(EngineCore pid=1) torch.OutOfMemoryError: CUDA out of memory.", 100.0)
    assert p.failed and p.phase is BootPhase.FAILED and p.eta_s is None
    # a later progress line does not resurrect it
    p = tracker.feed(
        "(EngineCore pid=1) Loading safetensors checkpoint shards:  50% Completed | 25/49 [..]",
        101.0,
    )
    assert p.failed and p.phase is BootPhase.FAILED


def test_eta_comes_from_recorded_boots(tmp_path):
    history = BootHistory(tmp_path / "boots.jsonl")
    base = {
        "starting": 5,
        "engine_init": 10,
        "rendezvous": 5,
        "loading_weights": 500,
        "loading_drafter": 20,
        "profiling": 600,
        "kv_cache": 1,
        "warmup": 100,
        "api_starting": 4,
    }
    for scale in (0.9, 1.0, 1.5):
        history.record("c", "h", {k: v * scale for k, v in base.items()}, 0.0)
    with open(history.path, "a") as f:
        f.write('{"torn": ')  # a killed writer's last line is skipped
    medians = history.medians("c")
    assert medians[BootPhase.LOADING_WEIGHTS] == 500
    tracker = BootTracker(medians)
    for i, line in enumerate(_lines()):
        p = tracker.feed(line, now=float(i))
        if p.phase is BootPhase.LOADING_WEIGHTS and p.shards_loaded == 24:
            break
    # half the shards left of a 500 s phase plus every later phase's median
    expected = 500 * (1 - 24 / 49) + 20 + 600 + 1 + 100 + 4
    assert p.eta_s == pytest.approx(expected)
    assert estimate_eta(BootPhase.READY, 0, medians) == 0.0
    assert estimate_eta(BootPhase.LOADING_WEIGHTS, 0.5, {}) is None


def test_eta_without_fine_progress_uses_elapsed_time():
    d = {
        BootPhase.PROFILING: 600.0,
        BootPhase.KV_CACHE: 1.0,
        BootPhase.WARMUP: 100.0,
        BootPhase.API_STARTING: 4.0,
    }
    assert estimate_eta(BootPhase.PROFILING, 0.0, d, phase_started_at=0.0, now=200.0) == 505.0
    assert estimate_eta(BootPhase.PROFILING, 0.0, d, phase_started_at=0.0, now=900.0) == 105.0


def test_phase_durations_for_the_history():
    tracker = BootTracker(started_at=0.0)
    for i, line in enumerate(_lines()):
        tracker.feed(line, now=float(i + 1))
    d = phase_durations(tracker.phase_times, ended_at=float(len(_lines())))
    assert set(d) >= {"loading_weights", "warmup"}
    assert d["loading_weights"] > 40  # about 55 lines of shard bars, one "second" each
    assert all(v >= 0 for v in d.values())
