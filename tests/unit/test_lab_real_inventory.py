"""The lab inventory for the real engine is an ordinary inventory: it loads, and the plan checks
every rank's argv against vLLM 0.32.0's own flag table (pure: no lab, no Docker)."""

from __future__ import annotations

import json

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.flag_tables import shipped
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.lab.host import engine_hard_limits, parse_hard_limits
from tpwarden.lab.inventory import ENGINE_VAR, inventory_doc, render_inventory
from tpwarden.lab.paths import LabPaths


@pytest.fixture
def real_spec(tmp_path):
    paths = LabPaths(tmp_path)
    inv = tmp_path / "inventory.yml"
    inv.write_text(render_inventory(paths, "real"))
    return load_inventory(inv)


def test_real_inventory_plans_tp4_native_on_0_32_0(real_spec):
    s = real_spec.serving
    assert s.vllm_version == "0.32.0" and shipped("0.32.0") is not None
    assert s.ipc_mode == "private" and s.image.startswith("tpwarden-lab/vllm-cpu")
    plan = plan_cluster(real_spec)  # raises ConfigError on a flag 0.32.0 does not have
    head, *workers = plan.containers
    assert "--headless" not in head.command and "--served-model-name" in head.command
    for rank, c in enumerate(workers, start=1):
        argv = list(c.command)
        assert argv[argv.index("--node-rank") + 1] == str(rank) and "--headless" in argv
        assert c.ipc_mode == "private" and c.env["OMP_NUM_THREADS"] == "1"
    spec_cfg = json.loads(head.command[head.command.index("--speculative-config") + 1])
    assert spec_cfg == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    }


def test_sim_inventory_keeps_its_hash_and_says_its_engine(tmp_path):
    doc = inventory_doc(LabPaths(tmp_path), "sim")
    assert doc["all"]["vars"][ENGINE_VAR] == "sim"
    assert "ipc_mode" not in doc["all"]["vars"]["tpwarden"]


def test_a_flag_0_32_0_lacks_is_refused(real_spec):
    from dataclasses import replace

    serving = replace(real_spec.serving, extra_args=("--disable-chunked-prefill",))
    with pytest.raises(ConfigError, match="0.32.0 `vllm serve` has no flag"):
        plan_cluster(replace(real_spec, serving=serving))


def test_ray_is_refused_for_the_real_engine_before_anything_is_built(tmp_path, monkeypatch):
    # Issue 14: vllm-cpu 0.32.0's CpuPlatform has no ray_device_key, and its Ray executor
    # raises "current platform CPU does not support ray." (v1/executor/ray_utils.py).
    from tpwarden.cluster.cli import app
    from tpwarden.cluster.errors import LabError
    from tpwarden.lab.inventory import check_engine_backend
    from typer.testing import CliRunner

    with pytest.raises(LabError, match="does not support ray"):
        check_engine_backend("real", "ray")
    with pytest.raises(LabError, match="does not support ray"):
        inventory_doc(LabPaths(tmp_path), "real", "ray")
    root = tmp_path / "lab"
    monkeypatch.setenv("TPWARDEN_LAB_ROOT", str(root))
    res = CliRunner().invoke(app, ["lab", "up", "--engine", "real", "--backend", "ray"])
    assert res.exit_code != 0 and "does not support ray" in " ".join(res.output.split())
    assert not root.exists()  # nothing built, nothing booted


def test_sim_inventory_can_name_the_ray_backend(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(render_inventory(LabPaths(tmp_path), "sim", "ray"))
    spec = load_inventory(inv)
    assert spec.serving.parallel.backend == "ray"
    plan = plan_cluster(spec)
    head, *workers = plan.containers
    assert head.command[:2] == ("ray", "start") and "--head" in head.command
    assert all(w.command[:2] == ("ray", "start") for w in workers)


@pytest.mark.parametrize("engine", ["sim", "real"])
@pytest.mark.parametrize(
    ("engine_hard", "memlock", "nofile"),
    [
        ({"memlock": -1, "nofile": 1048576}, "unlimited:unlimited", "1048576:1048576"),
        # a sandboxed host (no CAP_SYS_RESOURCE): runc cannot go above the engine's hard limits
        ({"memlock": 8388608, "nofile": 20000}, "8388608:8388608", "20000:20000"),
        ({"memlock": -1, "nofile": 4194304}, "unlimited:unlimited", "1048576:1048576"),
    ],
)
def test_lab_ranks_get_what_a_lab_node_can_honour(tmp_path, engine, engine_hard, memlock, nofile):
    """IPC_LOCK, memlock unlimited and nofile 1048576 on every rank (issue 28 item 3), lowered to
    the host engine's hard limits where it cannot give more; no devices, not privileged; the key
    file directory is identity-mapped (under models/) for the host's engine."""
    paths = LabPaths(tmp_path)
    inv = tmp_path / "inventory.yml"
    inv.write_text(render_inventory(paths, engine, limits=engine_hard))
    spec = load_inventory(inv)
    assert str(spec.serving.container.secrets_dir).startswith(f"{paths.models}/")
    for c in plan_cluster(spec).containers:
        doc = c.to_json()
        assert doc["cap_add"] == ["IPC_LOCK"]
        assert doc["ulimits"] == {"memlock": memlock, "nofile": nofile}
        assert doc["devices"] == [] and doc["privileged"] is False


LIMITS_SANDBOX = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            20000                20000                files
Max locked memory         8388608              8388608              bytes
"""


def test_engine_hard_limits_are_the_lowest_of_the_engine_processes(tmp_path):
    """/proc/PID/limits of dockerd and containerd (text as Linux 6.x prints it): the lowest
    hard limit wins, unlimited ranks above every number, other processes are ignored."""
    for pid, comm, limits in (
        ("10", "dockerd", LIMITS_SANDBOX),
        ("11", "containerd", LIMITS_SANDBOX.replace("8388608", "unlimited")),
        ("12", "bash", LIMITS_SANDBOX.replace("20000", "10")),
    ):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "comm").write_text(comm + "\n")
        (tmp_path / pid / "limits").write_text(limits)
    assert engine_hard_limits(tmp_path) == {"memlock": 8388608, "nofile": 20000}
    assert parse_hard_limits(LIMITS_SANDBOX.replace("8388608  ", "unlimited")) == {
        "memlock": -1,
        "nofile": 20000,
    }
