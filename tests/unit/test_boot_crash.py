"""A crash by signal named (issue 49): the boot reader turns a worker's death into its rank, its
signal with what it means, and when it came; on the lab's own SIGILL logs (two ranks of one
4-node engine, tests/fixtures/real/boot) and on real logs of workers dying by a signal from
public sources (tests/fixtures/real/crash, each file's header names its source and version).
Lines written here (marked so) only fill the gaps no public log covers."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.boot.crash import Crash, CrashPhase, WorkerDeath, combine
from tpwarden.cluster.boot.crash_report import cluster_crash, read_crash, with_crash
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootTracker, read_boot_log
from tpwarden.cluster.containers.info import container_info_from_inspect
from tpwarden.cluster.signals import (
    container_exit,
    from_exit_status,
    from_exitcode,
    signal_by_number,
)

REAL = Path(__file__).parents[1] / "fixtures" / "real"
BOOT, CRASH = REAL / "boot", REAL / "crash"
HEAD_LOG = BOOT / "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node1.log"
WORKER_LOG = BOOT / "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node2.log"
SHARED_SUCCESS = BOOT / "v0.25.1_single_dflash_success.log"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# -- the lab's two SIGILL logs ----------------------------------------------------------------
def test_the_heads_log_names_its_rank_and_the_first_request_after_a_healthy_boot():
    p = read_boot_log(_lines(HEAD_LOG))
    # the boot itself came up (a dying worker after ready is the watchdog's business)...
    assert p.ready and p.phase is BootPhase.READY and p.error is None
    # ...and the crash is named beside it: rank 0, no exit code logged, on the first request
    crash = p.crash
    assert crash is not None
    (death,) = crash.deaths
    assert (death.worker, death.rank, death.exit_code, death.signal) == (
        "VllmWorker-0",
        0,
        None,
        None,
    )
    assert crash.phase is CrashPhase.FIRST_REQUEST and not crash.named
    assert crash.requests_answered == 0
    assert crash.line() == "rank 0 died (no exit code) on the first request"


def test_the_worker_nodes_log_names_sigill_and_its_rank():
    p = read_boot_log(_lines(WORKER_LOG))
    assert p.failed and p.error_kind == "SIGILL"
    crash = p.crash
    assert crash is not None and crash.named
    (death,) = crash.deaths
    assert (death.worker, death.rank, death.exit_code) == ("VllmWorker-1", 1, -4)
    assert death.signal is not None and death.signal.name == "SIGILL"
    assert death.signal.meaning == "an instruction this CPU or its container does not allow"
    # a headless rank's log cannot show the server's requests: it loaded, then died
    assert crash.phase is CrashPhase.AFTER_LOAD
    assert p.error.startswith(
        "rank 1 died by SIGILL: an instruction this CPU or its container does not allow"
    )


def test_both_logs_together_name_the_signal_the_ranks_and_the_phase():
    logs = {"node1": HEAD_LOG.read_text(), "node2": WORKER_LOG.read_text()}
    crash = cluster_crash(logs, "node1")
    assert crash is not None and crash.named
    assert crash.signal is not None and crash.signal.name == "SIGILL"
    assert {(d.node, d.rank) for d in crash.deaths} == {("node1", 0), ("node2", 1)}
    assert (crash.lead.node, crash.lead.rank) == ("node2", 1)
    assert crash.phase is CrashPhase.FIRST_REQUEST  # the head's log says when
    assert crash.describe() == (
        "node2 rank 1 died by SIGILL: an instruction this CPU or its container does not allow, "
        "on the first request after a healthy boot; also node1 rank 0 (no exit code)"
    )
    assert crash.line() == "node2 rank 1 died by SIGILL (illegal instruction) on the first request"


def test_the_heads_whole_log_says_the_phase_even_when_its_tail_would_not():
    head = read_boot_log(_lines(HEAD_LOG)).crash
    lines = _lines(HEAD_LOG)
    ready_at = next(i for i, ln in enumerate(lines) if "Application startup complete" in ln)
    tail = "\n".join(lines[ready_at + 1 :])  # a tail that misses the ready line
    assert read_crash(tail) is not None and read_crash(tail).phase is CrashPhase.UNKNOWN
    crash = cluster_crash({"node1": tail, "node2": WORKER_LOG.read_text()}, "node1", head)
    assert crash is not None and crash.phase is CrashPhase.FIRST_REQUEST


def test_a_failed_boots_error_becomes_the_named_crash():
    tracker = BootTracker(started_at=0.0)
    tracker.feed_lines(_lines(HEAD_LOG), 0.0)
    p = tracker.fail("node1: container exited (0)", 1.0)
    # the head alone: its own worker's death, no signal, the container's exit as context
    assert p.error == "rank 0 died (no exit code logged), on the first request after a healthy boot"
    assert p.error_context == "node1: container exited (0)"
    logs = {"node1": HEAD_LOG.read_text(), "node2": WORKER_LOG.read_text()}
    named = with_crash(p, cluster_crash(logs, "node1", p.crash))
    assert named.error_kind == "SIGILL" and named.error.startswith("node2 rank 1 died by SIGILL")
    assert named.error_context == "node1: container exited (0)"


# -- real logs of workers dying by a signal, from public sources ------------------------------
# file -> (signal, who, named, phase, what the error holds)
CORPUS = {
    "v0.1.x_ray_sigbus_issue859.log": (
        "SIGBUS",
        "RayWorker pid 3554640",
        True,
        CrashPhase.UNKNOWN,
        "died by SIGBUS: a bad memory access, often shared memory (/dev/shm) too small",
    ),
    "v0.5.x_ray_sigsegv_issue6918.log": (
        "SIGSEGV",
        "RayWorkerWrapper pid 5993",
        True,
        CrashPhase.UNKNOWN,
        "died by SIGSEGV: a native crash",
    ),
    "v0.5.x_tp2_sigabrt_issue5458.log": (
        "SIGABRT",
        "the process",
        True,
        CrashPhase.UNKNOWN,
        "the process died by SIGABRT",
    ),
    "v0.7.x_v0-tp8_sigsegv_issue14372.log": (
        "SIGSEGV",
        "VllmWorkerProcess pid 14538",
        True,
        CrashPhase.UNKNOWN,
        "VllmWorkerProcess pid 14538 died by SIGSEGV",
    ),
    "v0.28_cpu_sigkill-oom_plow-notes.log": (
        "SIGKILL",
        "rank 0",
        True,
        CrashPhase.UNKNOWN,
        "rank 0 died by SIGKILL: killed, often by the kernel's out-of-memory killer",
    ),
    # SIGTERM is an echo: the exception logged before it is the cause
    "v0.8.x_ascend_v0-tp8_sigterm-after-exception_ascend900.log": (
        "SIGTERM",
        "VllmWorkerProcess pid 6341",
        False,
        CrashPhase.BOOT,
        "AttributeError: 'AscendQuantConfig' object has no attribute 'packed_modules_mapping'",
    ),
    "v0.9.x_v1-tp2_no-exit-code_openpipe-art201.log": (
        None,
        "rank 1",
        False,
        CrashPhase.UNKNOWN,
        "rank 1 died (no exit code logged)",
    ),
    "v0.2x_ascend_exit-code-none_ascend-pr7742.log": (
        None,
        "rank 14",
        False,
        CrashPhase.UNKNOWN,
        "rank 14 died (no exit code logged)",
    ),
}


def _header(path: Path) -> dict[str, str]:
    out = {}
    for line in _lines(path):
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(":")
        out[key.strip()] = value.strip()
    return out


def test_every_crash_fixture_has_a_source_a_version_and_an_expectation():
    files = sorted(p.name for p in CRASH.glob("*.log"))
    negatives = [n for n in files if "not-a-signal" in n]
    assert sorted(CORPUS) == sorted(set(files) - set(negatives))
    assert negatives, "a real log whose words look like a signal's but are not"
    for name in files:
        head = _header(CRASH / name)
        assert {"source", "vllm version", "kind"} <= set(head), name


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_real_crash_names_its_signal(name):
    signal, who, named, phase, error = CORPUS[name]
    p = read_boot_log(_lines(CRASH / name))
    assert p.failed and not p.ready
    crash = p.crash
    assert crash is not None
    assert (crash.signal.name if crash.signal else None) == signal
    assert crash.lead.who == who and crash.named is named and crash.phase is phase
    assert error in p.error
    assert len(crash.line()) <= 73


def test_one_death_reported_three_times_is_one_death():
    # absl prints its line twice and faulthandler a third: one worker, one death
    crash = read_boot_log(_lines(CRASH / "v0.1.x_ray_sigbus_issue859.log")).crash
    assert crash is not None and len(crash.deaths) == 1
    crash = read_boot_log(_lines(CRASH / "v0.7.x_v0-tp8_sigsegv_issue14372.log")).crash
    assert crash is not None and len(crash.deaths) == 1 and crash.deaths[0].exit_code == -11


def test_sigterm_after_an_exception_keeps_the_exception_as_the_cause():
    p = read_boot_log(_lines(CRASH / "v0.8.x_ascend_v0-tp8_sigterm-after-exception_ascend900.log"))
    assert p.crash is not None and [d.pid for d in p.crash.deaths] == [6341, 6343]
    assert p.error_kind is None and p.error.startswith("AttributeError:")


def test_a_cuda_illegal_instruction_is_an_exception_not_sigill():
    p = read_boot_log(
        _lines(CRASH / "v0.8.x_v1-tp4_cuda-illegal-instruction_not-a-signal_issue18045.log")
    )
    assert p.crash is None and not p.failed


@pytest.mark.parametrize("name", sorted(p.name for p in BOOT.glob("*success*.log")))
def test_a_healthy_log_reads_ready_with_no_crash(name):
    p = read_boot_log(_lines(BOOT / name))
    assert p.ready and p.crash is None and p.error is None


def test_the_shared_reference_success_log_has_no_crash():
    shared = Path("/work/shared/reference/samples/v0.25.1_gb10_dgx-spark_nvfp4_dflash_success.log")
    path = shared if shared.exists() else SHARED_SUCCESS  # the same log, copied into the corpus
    p = read_boot_log(_lines(path))
    assert p.ready and p.crash is None and p.to_json()["crash"] is None


# -- phases, on lines written here (not real logs) --------------------------------------------
READY = "INFO:     Application startup complete."
DIED = (
    "(EngineCore pid=9) ERROR 01-01 00:00:02 [multiproc_executor.py:315] Worker proc "
    "VllmWorker-2 died unexpectedly (exit code: -9), shutting down executor."
)
START = "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.33.0"


def _post(status: int) -> str:
    return f'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" {status} OK'


@pytest.mark.parametrize(
    ("lines", "phase"),
    [
        ([START, DIED], CrashPhase.BOOT),
        ([START, READY, DIED], CrashPhase.AFTER_READY),
        ([START, READY, DIED, _post(500)], CrashPhase.FIRST_REQUEST),
        ([START, READY, _post(200), _post(200), DIED, _post(500)], CrashPhase.SERVING),
        ([DIED], CrashPhase.UNKNOWN),
    ],
)
def test_the_phase_is_what_the_log_showed_by_the_first_death(lines, phase):
    crash = read_boot_log(lines).crash
    assert crash is not None and crash.phase is phase
    assert crash.lead.rank == 2 and crash.signal.name == "SIGKILL"
    if phase is CrashPhase.SERVING:
        assert crash.requests_answered == 2 and "(2 requests answered before)" in crash.describe()


def test_a_long_worker_name_is_cut_to_the_line():
    death = WorkerDeath(worker="W" * 120, signal=signal_by_number(4))
    crash = Crash(deaths=(death,), phase=CrashPhase.FIRST_REQUEST)
    assert len(crash.line()) == 73 and crash.line().endswith("…")


def test_combine_prefers_the_heads_phase_and_keeps_every_node():
    a = Crash(deaths=(WorkerDeath(worker="VllmWorker-0", rank=0),), phase=CrashPhase.SERVING)
    b = Crash(
        deaths=(WorkerDeath(worker="VllmWorker-3", rank=3, signal=signal_by_number(11)),),
        phase=CrashPhase.AFTER_LOAD,
    )
    crash = combine({"node4": b, "node1": a}, head="node1")
    assert crash is not None and crash.phase is CrashPhase.SERVING
    assert crash.lead.node == "node4" and crash.signal.name == "SIGSEGV"
    assert combine({}, head="node1") is None


# -- exit codes and container exit statuses ---------------------------------------------------
def test_exit_codes_and_statuses_name_their_signal():
    assert from_exitcode(-4).name == "SIGILL" and from_exitcode(-9).name == "SIGKILL"
    assert from_exitcode(-7).name == "SIGBUS" and from_exitcode(-6).name == "SIGABRT"
    assert from_exitcode(None) is None and from_exitcode(1) is None and from_exitcode(0) is None
    assert from_exit_status(132).name == "SIGILL" and from_exit_status(137).name == "SIGKILL"
    assert from_exit_status(139).name == "SIGSEGV"
    assert from_exit_status(0) is None and from_exit_status(1) is None
    assert from_exit_status(255) is None and from_exit_status(128) is None
    other = signal_by_number(10)  # not in the table: Python's name for it
    assert other.name == "SIGUSR1" and not other.cause
    assert signal_by_number(9).cause and not signal_by_number(15).cause


def test_a_containers_exit_status_is_named():
    assert container_exit(0) == "container exited (0)"
    assert container_exit(132) == (
        "container exited (132): SIGILL, an instruction this CPU or its container does not allow"
    )
    assert container_exit(137, oom_killed=True) == "container exited (137): SIGKILL, OOM-killed"
    info = container_info_from_inspect(
        "node2", {"Id": "x", "State": {"Status": "exited", "ExitCode": 132}, "Config": {}}
    )
    assert info.exit_signal is not None and info.exit_signal.name == "SIGILL"
