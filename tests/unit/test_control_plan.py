"""Pure planning for up/down/restart: idempotence, drift, whole-group restarts, start order."""

from __future__ import annotations

from tpwarden.cluster.containers.gateway import restart_policy
from tpwarden.cluster.containers.info import ContainerInfo, container_info_from_inspect
from tpwarden.cluster.control.plan import Action, Drift, plan_down, plan_restart, plan_up
from tpwarden.cluster.launch import ClusterPlan, ContainerPlan


def _cplan(nodes=("node1", "node2", "node3", "node4"), h="h1", backend="native") -> ClusterPlan:
    cs = tuple(
        ContainerPlan(
            node=n,
            role="head" if i == 0 else "worker",
            rank=i,
            name=f"c-vllm-{n}",
            image="img",
            command=("vllm", "serve"),
            entrypoint=None,
            env={},
            secret_env={},
            mounts=(),
            labels={"io.tpwarden.config-hash": h},
        )
        for i, n in enumerate(nodes)
    )
    return ClusterPlan("c", h, backend, cs)


def _info(node, h="h1", state="running", name=None) -> ContainerInfo:
    return ContainerInfo(
        node=node,
        id=f"id-{node}",
        name=name or f"c-vllm-{node}",
        image="img",
        state=state,
        labels={"io.tpwarden.config-hash": h},
    )


def test_everything_running_same_hash_is_a_noop():
    cp = _cplan()
    plan = plan_up(cp, {n: [_info(n)] for n in ("node1", "node2", "node3", "node4")})
    assert not plan.changes and not plan.refused
    assert {s.action for s in plan.steps} == {Action.KEEP}


def test_nothing_running_starts_head_first_then_workers():
    plan = plan_up(_cplan(), {})
    assert [s.action for s in plan.steps] == [Action.START] * 4
    assert plan.waves == (("node1",), ("node2", "node3", "node4"))


def test_one_rank_missing_restarts_the_whole_group():
    observed = {n: [_info(n)] for n in ("node1", "node2", "node4")}
    observed["node3"] = [_info("node3", state="exited")]
    plan = plan_up(_cplan(), observed)
    assert {s.action for s in plan.steps} == {Action.REPLACE}
    assert plan.step("node3").reason == "container exited"
    assert "together" in plan.step("node1").reason
    assert plan.step("node2").remove == ("c-vllm-node2",)


def test_paused_rank_counts_as_not_running():
    observed = {n: [_info(n)] for n in ("node1", "node2", "node3")}
    observed["node4"] = [_info("node4", state="paused")]
    assert plan_up(_cplan(), observed).changes


def test_drift_is_refused_without_replace():
    observed = {n: [_info(n, h="old")] for n in ("node1", "node2", "node3", "node4")}
    plan = plan_up(_cplan(h="new"), observed)
    assert plan.refused and set(plan.drift) == {"node1", "node2", "node3", "node4"}
    err = Drift(plan.drift, plan.config_hash)
    assert "--replace" in str(err) and "old" in str(err)
    plan = plan_up(_cplan(h="new"), observed, replace=True)
    assert not plan.refused and {s.action for s in plan.steps} == {Action.REPLACE}


def test_down_removes_only_what_is_there():
    plan = plan_down("c", {"node1": [_info("node1")], "node2": []})
    assert plan.step("node1").action is Action.REMOVE
    assert plan.step("node2").action is Action.KEEP
    assert not plan_down("c", {"node1": [], "node2": []}).changes


def test_restart_replaces_everything():
    plan = plan_restart(_cplan(), {"node1": [_info("node1")]})
    assert plan.step("node1").action is Action.REPLACE
    assert plan.step("node2").action is Action.START
    assert plan.to_json()["steps"][0]["start"]["container"] == "c-vllm-node1"


def test_inspect_parsing_and_restart_policy():
    info = container_info_from_inspect(
        "n1",
        {
            "Id": "abc",
            "Name": "/c-vllm-n1",
            "RestartCount": 0,
            "Config": {"Image": "img", "Labels": {"io.tpwarden.config-hash": "h"}},
            "State": {
                "Status": "exited",
                "ExitCode": 137,
                "OOMKilled": True,
                "StartedAt": "2026-12-02T10:00:00.123456789Z",
                "FinishedAt": "0001-01-01T00:00:00Z",
            },
        },
    )
    assert info.name == "c-vllm-n1" and info.exit_code == 137 and info.oom_killed
    assert info.started_at.microsecond == 123456 and info.finished_at is None
    assert restart_policy("no") == {"Name": ""}
    assert restart_policy("on-failure:3") == {"Name": "on-failure", "MaximumRetryCount": 3}
