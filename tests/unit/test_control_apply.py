"""`up`, `down`, `restart` and apply on fake nodes: order, outcomes, secrets, records."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.control.applied import APPLIED_NAME
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.plan import Drift
from tpwarden.cluster.errors import DockerError, TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import KEY_WRAPPER, plan_cluster

from tests.unit.fake_nodes import GOOD, FakeNodes, FixedClock, good_spec

SPEC = good_spec()
WORKERS = {"node2", "node3", "node4"}


def _no_server(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused")


@pytest.fixture
def fake(monkeypatch) -> FakeNodes:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    return FakeNodes(SPEC)


def _ctl(tmp_path: Path, nodes: FakeNodes, spec=SPEC, events=None) -> Controller:
    return Controller(
        spec,
        state_dir=tmp_path / "state",
        nodes=nodes,
        clock=FixedClock(),
        http=httpx.Client(transport=httpx.MockTransport(_no_server)),
        on_event=events.append if events is not None else None,
    )


def test_up_removes_everywhere_then_starts_the_head_then_the_workers(tmp_path, fake) -> None:
    fake.run_all(state="exited")
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.up(wait_ready=False)
    assert result.ok and result.boot is None
    kinds = [a[0] for a in fake.actions]
    assert kinds == ["remove"] * 4 + ["start"] * 4
    assert {a[1] for a in fake.actions[:4]} == {"node1", *WORKERS}
    assert fake.actions[4] == ("start", "node1", "tpwarden-vllm-node1")  # the head's wave first
    assert {a[1] for a in fake.actions[5:]} == WORKERS
    assert [(o.node, o.ok, o.message) for o in result.outcomes] == [
        (f"node{i}", True, f"started tpwarden-vllm-node{i}") for i in range(1, 5)
    ]
    assert fake.closed  # the controller closes its connector


def test_secrets_are_resolved_at_apply_time_and_go_to_the_engine_only(tmp_path, fake) -> None:
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.up(wait_ready=False)
    # the API key goes to a 0600 file on the head, never into the container env (issue 29)
    head = fake.sessions["node1"]
    assert head.files["/run/tpwarden/tpwarden-api_key"] == b"sk-test"
    assert head.modes["/run/tpwarden/tpwarden-api_key"] == 0o600
    assert ["mkdir", "-p", "-m", "0700", "/run/tpwarden"] in head.commands
    assert fake.engines["node1"].secrets_seen["tpwarden-vllm-node1"] == {}
    assert fake.engines["node2"].secrets_seen["tpwarden-vllm-node2"] == {}
    assert "/run/tpwarden/tpwarden-api_key" not in fake.sessions["node2"].files
    assert "sk-test" not in json.dumps(result.plan.to_json())


def test_an_empty_api_key_is_refused_before_the_head_starts(tmp_path, fake, monkeypatch) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "  ")
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.up(wait_ready=False)
    head = next(o for o in result.outcomes if o.node == "node1")
    assert not head.ok and "the API key is empty" in head.message
    assert "tpwarden-vllm-node1" not in fake.engines["node1"].secrets_seen


def test_up_records_the_applied_plan_here_and_on_the_head(tmp_path, fake) -> None:
    fake.sessions["node1"].dirs.add(SPEC.watchdog.state_dir)
    with _ctl(tmp_path, fake) as ctl:
        ctl.up(wait_ready=False, who="ops@desk")
    here = json.loads((tmp_path / "state" / "applied" / f"{SPEC.name}.json").read_text())
    assert (here["config_hash"], here["action"], here["by"]) == (
        SPEC.config_hash(),
        "up",
        "ops@desk",
    )
    assert here["applied_at"] == FixedClock()()  # the injected clock, not the machine's
    on_head = fake.sessions["node1"].files[f"{SPEC.watchdog.state_dir}/{APPLIED_NAME}"]
    assert json.loads(on_head) == here


def test_nothing_to_do_when_the_config_already_runs(tmp_path, fake) -> None:
    fake.run_all()
    events = []
    with _ctl(tmp_path, fake, events=events) as ctl:
        result = ctl.up()
    assert result.ok and fake.actions == [] and fake.collector_calls == []
    assert [(e.kind, e.message) for e in events] == [
        ("info", f"nothing to do: config {SPEC.config_hash()} is running")
    ]


def test_up_refuses_a_drifted_cluster_without_replace(tmp_path, fake) -> None:
    edited = tmp_path / "old.yml"
    edited.write_text(GOOD.read_text().replace("max_model_len: 1048576", "max_model_len: 65536"))
    old = load_inventory(edited)
    assert old.config_hash() != SPEC.config_hash()
    for c in plan_cluster(old).containers:
        fake.engines[c.node].add(c)
    with _ctl(tmp_path, fake) as ctl, pytest.raises(Drift) as err:
        ctl.up(wait_ready=False)
    assert err.value.wanted == SPEC.config_hash() and fake.actions == []


def test_a_failed_preflight_applies_nothing(tmp_path, fake) -> None:
    fake.engines["node2"].images.clear()
    with _ctl(tmp_path, fake) as ctl, pytest.raises(TpwardenError, match="pre-flight failed"):
        ctl.up(wait_ready=False)
    assert fake.actions == []


def test_a_failed_removal_starts_nothing(tmp_path, fake) -> None:
    fake.run_all(state="exited")

    def broken(container: str, stop_timeout: int = 10) -> bool:
        raise DockerError("node3: remove: engine says no")

    fake.engines["node3"].remove = broken
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.up(wait_ready=False, preflight=False)
    assert not result.ok and not [a for a in fake.actions if a[0] == "start"]
    assert ("node3", False, "node3: remove: engine says no") in [
        (o.node, o.ok, o.message) for o in result.outcomes
    ]
    assert not (tmp_path / "state" / "applied").exists()  # nothing applied, nothing recorded


def test_a_head_that_fails_to_start_stops_the_workers_wave(tmp_path, fake) -> None:
    def broken(plan, secret_values=None):
        raise DockerError("node1: run tpwarden-vllm-node1: no such device")

    fake.engines["node1"].run = broken
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.up(wait_ready=False, preflight=False)
    assert fake.actions == []  # no worker started
    assert [(o.node, o.ok) for o in result.outcomes] == [("node1", False)]
    assert not (tmp_path / "state" / "applied").exists()


def test_down_removes_every_serving_container(tmp_path, fake) -> None:
    fake.run_all()
    fake.engines["node4"].containers.clear()
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.down()
    assert sorted(fake.actions) == [
        ("remove", f"node{i}", f"tpwarden-vllm-node{i}") for i in (1, 2, 3)
    ]
    assert all(not gw.containers for gw in fake.engines.values())
    assert result.ok and {o.node for o in result.outcomes} == {"node1", "node2", "node3", "node4"}


def test_restart_logs_who_why_and_when_then_replaces_every_rank(tmp_path, fake) -> None:
    fake.run_all()
    with _ctl(tmp_path, fake) as ctl:
        result = ctl.restart("hung", wait_ready=False, who="ops@desk")
    assert result.ok and [a[0] for a in fake.actions] == ["remove"] * 4 + ["start"] * 4
    (event,) = [json.loads(line) for line in (tmp_path / "state" / "events.jsonl").open()]
    assert event["ts"] == "2026-12-01T12:00:00+00:00"  # the injected clock
    assert (event["event"], event["who"], event["why"]) == ("restart", "ops@desk", "hung")
    applied = json.loads((tmp_path / "state" / "applied" / f"{SPEC.name}.json").read_text())
    assert applied["action"] == "restart"


def test_the_ray_head_gets_vllm_serve_execd_once_every_rank_runs(tmp_path, fake) -> None:
    ray = tmp_path / "ray.yml"
    ray.write_text(GOOD.read_text().replace("backend: native", "backend: ray"))
    spec = load_inventory(ray)
    nodes = FakeNodes(spec)
    with _ctl(tmp_path, nodes, spec=spec) as ctl:
        result = ctl.up(wait_ready=False, preflight=False)
    assert result.ok
    head = plan_cluster(spec).for_node("node1")
    assert nodes.actions[-1] == ("exec", "node1", head.name)
    assert [a[0] for a in nodes.actions] == ["start"] * 4 + ["exec"]
    # the exec'd vllm serve reads the key from the file written on the head, not from its env
    ((container, argv, env),) = nodes.engines["node1"].execs
    assert argv == [*KEY_WRAPPER, *head.exec_after_start] and argv[len(KEY_WRAPPER)] == "vllm"
    assert "VLLM_API_KEY" not in env
    assert nodes.sessions["node1"].files[head.secret_files[0].path] == b"sk-test"
