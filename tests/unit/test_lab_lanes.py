"""Issue 50: two lanes of the lab side by side. Lane 1 is the lab as it always was; lane 2 has
its own addresses, names, ports, lock and state, and shares only the cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tpwarden.cluster.errors import LabError
from tpwarden.lab.inventory import render_inventory
from tpwarden.lab.paths import NODE_NAMES, LabPaths, node_ip

BASE = Path("/var/lib/tpwarden-lab")
LIMITS = {"memlock": -1, "nofile": -1}


def test_lane_one_is_the_lab_as_it_was():
    one = LabPaths(BASE)
    assert one.lane == 1 and one.root == BASE and one.cache == BASE / "cache"
    assert [one.node_ip(n) for n in NODE_NAMES] == [f"127.0.0.1{i}" for i in range(1, 5)]
    assert [node_ip(n) for n in NODE_NAMES] == [one.node_ip(n) for n in NODE_NAMES]
    assert one.cluster_name == "lab"
    assert one.prometheus_listen == "127.0.0.1:9090" and one.watchdog_metrics_port == 9410
    assert one.lock == Path("/run/lock/tpwarden-lab.lock")
    assert one.node("node1").machine == "tpwarden-lab-node1"
    assert one.inventory == BASE / "inventory.yml"


def test_lane_two_owns_everything_but_the_cache():
    one, two = LabPaths(BASE), LabPaths(BASE, 2)
    assert two.root == BASE / "lane2" and two.cache == one.cache
    assert [two.node_ip(n) for n in NODE_NAMES] == [f"127.0.0.2{i}" for i in range(1, 5)]
    assert two.node("node3").ip == "127.0.0.23"
    assert two.cluster_name == "lab2"
    assert two.prometheus_listen == "127.0.0.1:9092" and two.watchdog_metrics_port == 9420
    assert (one.master_port, two.master_port) == (29501, 29601)  # TCPStore binds every address
    assert two.lock == Path("/run/lock/tpwarden-lab-2.lock")
    assert two.node("node1").machine == "tpwarden-lab2-node1"
    owned = ("root", "models", "watchdog_dir", "ssh", "inventory", "nodes_dir", "sensord_pid",
             "prometheus_dir", "sim_faults", "secrets")  # fmt: skip
    for attr in owned:
        assert getattr(one, attr) != getattr(two, attr), attr
        assert not str(getattr(two, attr)).startswith(str(one.nodes_dir)), attr


def test_the_lane_comes_from_the_environment_or_is_refused():
    assert LabPaths.from_env({"TPWARDEN_LAB_LANE": "2"}).lane == 2
    assert LabPaths.from_env({}).lane == 1
    assert LabPaths.from_env({"TPWARDEN_LAB_LANE": "2"}, lane=1).lane == 1  # an explicit lane
    assert LabPaths.from_env({"TPWARDEN_LAB_ROOT": "/srv/lab"}, lane=2).root == Path(
        "/srv/lab/lane2"
    )
    for bad in ("3", "0", "two"):
        with pytest.raises(LabError, match="lane"):
            LabPaths.from_env({"TPWARDEN_LAB_LANE": bad})


@pytest.mark.parametrize("engine", ["sim", "real"])
def test_lane_two_inventory_names_only_lane_two(engine):
    two = LabPaths(BASE, 2)
    text = render_inventory(two, engine, limits=LIMITS)
    assert not re.search(r"127\.0\.0\.1[1-4]\b", text), "a lane-1 node address in lane 2"
    doc = yaml.safe_load(text)["all"]
    hosts = {**doc["children"]["head"]["hosts"], **doc["children"]["workers"]["hosts"]}
    assert {h: v["ansible_host"] for h, v in hosts.items()} == {
        n: two.node_ip(n) for n in NODE_NAMES
    }
    tp = doc["vars"]["tpwarden"]
    assert tp["cluster_name"] == "lab2" and tp["host"] == "127.0.0.21"
    assert tp["watchdog"]["metrics_port"] == 9420
    assert tp["parallel"]["master_port"] == 29601
    assert tp["watchdog"]["state_dir"] == str(two.watchdog_dir)
    assert doc["vars"]["ansible_ssh_private_key_file"] == str(two.key)


def _host_lines(paths: LabPaths) -> list[str]:
    """What a running lane puts on the host, in the forms the leak check reads."""
    node = paths.node("node1")
    ip = paths.node_ip("node1")
    return [
        f"LISTEN 0 128 {ip}:22 0.0.0.0:*",
        f"LISTEN 0 4096 {paths.prometheus_listen} 0.0.0.0:*",
        f"LISTEN 0 4096 127.0.0.1:{paths.watchdog_metrics_port} 0.0.0.0:*",
        f"abc123 {paths.cluster_name}-vllm-node1 io.tpwarden.cluster={paths.cluster_name},"
        "io.tpwarden.node=node1",
        f"overlay on {node.merged} type overlay (rw,upperdir={node.upper})",
        f"systemd-nspawn -D {node.merged} -b --register=no --machine={node.machine}",
        f"/usr/bin/python3 -m tpwarden.lab.sensord {paths.root}",
        f"/usr/bin/prometheus --config.file={paths.prometheus_dir}/prometheus.yml",
        f"vllm serve {paths.models}/GLM-lab-NVFP4 --host {ip}",
    ]


def test_each_lanes_host_pattern_sees_its_own_and_never_the_other():
    one, two = LabPaths(BASE), LabPaths(BASE, 2)
    for mine, other in ((one, two), (two, one)):
        pattern = mine.host_pattern()
        assert all(pattern.search(line) for line in _host_lines(mine)), mine.lane
        leaked = [line for line in _host_lines(other) if pattern.search(line)]
        assert not leaked, (mine.lane, leaked)
