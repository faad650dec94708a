"""The boot verdict comes from what ends a boot, not from the level of a line (issue 16).

Lines are real vLLM lines (sources in tests/fixtures/real/boot and in the comments below); the
success log is the 0.25.1 reference boot.
"""

from __future__ import annotations

from pathlib import Path

from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootTracker, read_boot_log

BOOT = Path(__file__).parents[1] / "fixtures" / "real" / "boot"
SUCCESS = BOOT / "v0.25.1_single_dflash_success.log"

# vllm-project/vllm#31740 (0.15.0rc2): logged while the boot goes on
TRITON_ERROR = (
    "ERROR 01-28 06:35:44 [gpt_oss_triton_kernels_moe.py:34] Failed to import Triton kernels. "
    "Please make sure your triton version is compatible. Error: No module named "
    "'triton_kernels.routing'"
)
# a client asking for a name the server does not serve (0.20.0 fixture)
WRONG_MODEL = (
    "(APIServer pid=1) ERROR 05-01 19:41:37 [serving.py:218] Error with model error=ErrorInfo("
    "message='The model `RedHatAI/Qwen3.6-35B-A3B-NVFP4` does not exist.', type='NotFoundError',"
    " param='model', code=404)"
)


def _success_lines() -> list[str]:
    return [ln for ln in SUCCESS.read_text().splitlines() if not ln.startswith("#")]


def _until(pred) -> list[str]:
    out = []
    for ln in _success_lines():
        out.append(ln)
        if pred(ln):
            return out
    raise AssertionError("line not found")


def test_a_non_fatal_error_during_start_up_is_a_note():
    lines = _until(lambda ln: "Starting to load model" in ln)
    p = read_boot_log([*lines[:20], TRITON_ERROR, *lines[20:]])
    assert not p.failed and p.phase is BootPhase.LOADING_WEIGHTS
    assert [n.level for n in p.notes if n.level == "ERROR"] == ["ERROR"]
    p = read_boot_log([*_success_lines()[:20], TRITON_ERROR, *_success_lines()[20:]])
    assert p.ready and p.error is None


def test_an_error_after_ready_never_turns_the_boot_into_a_failure():
    # `tpwarden boot` replays the whole log of a server that is up: it must say ready
    p = read_boot_log([*_success_lines(), WRONG_MODEL])
    assert p.ready and not p.failed and p.phase is BootPhase.READY
    assert p.error is None
    (note,) = [n for n in p.notes if n.after_ready]
    assert "does not exist" in note.message and note.who == "APIServer pid=1"
    # even a dying worker after ready is the watchdog's business, not a failed boot
    p = read_boot_log(
        [
            *_success_lines(),
            "(EngineCore pid=1) ERROR 12-02 10:38:00 [multiproc_executor.py:1] Worker proc "
            "VllmWorker-1 died unexpectedly, shutting down executor.",
        ]
    )
    assert p.ready and not p.failed


def test_one_state_never_ready_and_failed():
    tracker = BootTracker()
    for i, ln in enumerate(_success_lines()):
        p = tracker.feed(ln, float(i))
        assert not (p.ready and p.failed)
    assert p.ready
    p = tracker.fail("head container exited (137)", 1e6)  # an outside fact may end it
    assert p.failed and not p.ready and p.verdict == "failed"


def test_shard_lines_after_a_failure_are_not_the_drafters():
    lines = _until(lambda ln: "Completed | 10/49" in ln)
    tracker = BootTracker()
    tracker.feed_lines(lines, 0.0)
    tracker.feed(
        "(EngineCore pid=1) ERROR 12-02 10:38:00 [core.py:1] EngineCore failed to start.", 1
    )
    p = tracker.feed(
        "(EngineCore pid=1) Loading safetensors checkpoint shards:  41% Completed | 20/49 [..]", 2
    )
    assert p.failed
    assert p.drafter_shards_total is None and p.drafter_shards_loaded == 0
    assert (p.shards_loaded, p.shards_total) == (10, 49)


# An out-of-memory crash while profiling, in the 0.9-0.11 shape: the engine's wrapper line,
# its logged traceback ending in the root exception, the process's own traceback, then the
# API server's wrapper (vllm-project/vllm#19415, #17431 show this sequence).
OOM_CRASH = [
    "(EngineCore_0 pid=7) INFO 07-10 14:49:30 [gpu_model_runner.py:1] Model loading took 14.99 "
    "GiB and 4.1 seconds",
    "(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515] EngineCore failed to start.",
    "(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515] Traceback (most recent call last):",
    '(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515]   File "/v/core.py", line 506, in '
    "run_engine_core",
    "(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515]     engine_core = EngineCoreProc(*args)",
    '(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515]   File "/v/gpu_worker.py", line 210, '
    "in determine_available_memory",
    "(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515]     self.model_runner.profile_run()",
    "(EngineCore_0 pid=7) ERROR 07-10 14:49:36 [core.py:515] torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.56 GiB of which 56.88 "
    "MiB is free.",
    "(EngineCore_0 pid=7) Process EngineCore_0:",
    "(EngineCore_0 pid=7) Traceback (most recent call last):",
    '(EngineCore_0 pid=7)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in '
    "_bootstrap",
    "(EngineCore_0 pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "(APIServer pid=1) Traceback (most recent call last):",
    '(APIServer pid=1)   File "/usr/local/bin/vllm", line 8, in <module>',
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {}",
]


def test_the_reported_cause_is_the_root_exception_with_the_wrapper_as_context():
    p = read_boot_log(OOM_CRASH)
    assert p.failed
    assert p.error_kind == "out of memory"
    assert p.error.startswith("out of memory: torch.OutOfMemoryError: CUDA out of memory.")
    assert "Engine core initialization failed" in p.error_context
    assert "Engine core initialization failed" in p.failure_text
    assert "out of memory" in p.describe()


def test_the_cause_is_known_even_when_the_wrapper_comes_first():
    # follow_boot stops at the first fatal line; what arrives after it still refines the cause
    tracker = BootTracker()
    p = tracker.feed(OOM_CRASH[1], 0.0)
    assert p.failed and p.error == "EngineCore failed to start."
    for ln in OOM_CRASH[2:]:
        p = tracker.feed(ln, 0.0)
    assert p.error_kind == "out of memory"


def test_v0_engine_wrapper_and_container_exit_keep_the_root_cause():
    # V0 (0.6/0.7): the MQLLMEngine wrapper names no cause
    lines = [
        "ERROR 11-20 11:23:41 [engine.py:366] Error in memory profiling. Initial free memory "
        "22.1 GiB, current free memory 0.3 GiB.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main',
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
    ]
    p = read_boot_log(lines)
    assert p.failed and p.error_kind == "no GPU memory left for the KV cache"
    tracker = BootTracker()
    tracker.feed_lines(lines[:1], 0.0)
    p = tracker.fail("head container exited (1)", 1.0)
    assert p.failed and p.error.startswith("Error in memory profiling")
    assert p.error_context == "head container exited (1)"
    p = BootTracker().fail("head container exited (1)", 1.0)
    assert p.error == "head container exited (1)" and p.error_context is None


def test_a_hang_stays_short_of_ready_without_a_failure():
    lines = _until(lambda ln: "Completed | 30/49" in ln)
    p = read_boot_log([*lines, TRITON_ERROR])
    assert p.verdict == "incomplete" and p.phase is BootPhase.LOADING_WEIGHTS
    assert (p.shards_loaded, p.shards_total) == (30, 49)
