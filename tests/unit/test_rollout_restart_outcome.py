"""What a rollout records when its restart fails (issue 30 item 5): the cluster's own words,
from the restart's ApplyResult, not a bool turned into "not answering within N s"."""

from __future__ import annotations

from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import ApplyResult, BootResult, NodeOutcome
from tpwarden.cluster.rollout.ports import restart_failure

PLAN = ControlPlan(cluster="lab", config_hash="abc123", steps=())
STARTED = (NodeOutcome("node1", True, "started"), NodeOutcome("node2", True, "started"))


def _result(boot: BootResult | None, outcomes=STARTED) -> ApplyResult:
    return ApplyResult(PLAN, outcomes, boot)


def test_a_crash_at_boot_names_its_root_cause_and_when():
    boot = BootResult(
        ready=False,
        progress=BootProgress(phase=BootPhase.FAILED, error="out of memory: CUDA out of memory"),
        elapsed_s=12.74,
        reason="out of memory: CUDA out of memory (rank 2)",
    )
    assert restart_failure(_result(boot), 120) == (
        "new config failed at boot after 12.7 s: out of memory: CUDA out of memory (rank 2)"
    )


def test_a_crash_without_a_reason_falls_back_to_the_logs_root_cause():
    boot = BootResult(
        ready=False, progress=BootProgress(phase=BootPhase.FAILED, error="RuntimeError: x"),
        elapsed_s=3.0,
    )  # fmt: skip
    assert restart_failure(_result(boot), 120).endswith("after 3.0 s: RuntimeError: x")


def test_a_slow_boot_says_where_it_was_when_time_ran_out():
    boot = BootResult(
        ready=False, progress=BootProgress(phase=BootPhase.LOADING_WEIGHTS), elapsed_s=120.2
    )
    assert restart_failure(_result(boot), 120) == (
        "new config not answering within 120 s (boot at loading_weights after 120 s)"
    )


def test_a_node_that_did_not_start_is_named():
    outcomes = (STARTED[0], NodeOutcome("node3", False, "image tpwarden/vllm:x not found"))
    assert restart_failure(_result(None, outcomes), 120) == (
        "start failed: node3: image tpwarden/vllm:x not found"
    )
