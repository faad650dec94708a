"""`tpwarden provision` on the lab's four systemd nodes: install, idempotence, --check, services
running, the clock cap back after a node restart (removal back to the state before:
tests/lab/test_provision_removal.py).

The node wheel is built from a snapshot of the source taken once (the tree may be edited while
the tests run; a changed source would rightly reinstall). Uses the session `lab` fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import host, nodes, rootfs
from tpwarden.lab.paths import NODE_NAMES

from tests.lab.provisioning import describe, provision
from tests.lab.waiting import poll

pytestmark = pytest.mark.lab

COLLECTOR = ["/opt/tpwarden/venv/bin/python", "-m", "tpwarden.node.collector", "show"]


def cap_mhz(lab, node: str) -> int | None:
    done = lab.ssh(node, COLLECTOR)
    return json.loads(done.stdout)["gpus"][0]["locked_clock_max_mhz"]


@pytest.fixture
def provisioned(provisioned_lab):
    """The run's one provisioning (tests/lab/provisioning.py); removal is tested after the
    modules that share it, in tests/lab/test_provision_removal.py."""
    return provisioned_lab


def test_provision_succeeds(provisioned):
    doc = provisioned["first"]
    assert doc["exit"] == 0 and doc["ok"], describe(doc)
    assert sorted(h["host"] for h in doc["hosts"]) == sorted(NODE_NAMES)
    assert Path(doc["artifact_dir"]).is_dir() and (Path(doc["artifact_dir"]) / "status").is_file()


def test_second_run_changes_nothing(lab, source, provisioned):
    doc = provision(lab, source)
    assert doc["exit"] == 0 and doc["changed"] == 0, describe(doc)


def test_check_on_provisioned_lab_reports_nothing(lab, source, provisioned):
    doc = provision(lab, source, "--check")
    assert doc["exit"] == 0 and doc["changed"] == 0, describe(doc)


def test_agents_run_and_write_samples(lab, provisioned):
    def sizes(node: str) -> int:
        out = lab.ssh(node, ["find", "/var/log/tpwarden/thermal", "-type", "f", "-printf", "%s\n"])
        return sum(int(x) for x in out.stdout.split())

    def is_active(node: str, unit: str) -> bool:
        # `activating` right after provisioning is normal on a loaded machine: wait, with a
        # deadline, for the unit to settle instead of judging it at first look.
        return lab.ssh(node, ["systemctl", "is-active", unit]).stdout.strip() == "active"

    first = {n: sizes(n) for n in NODE_NAMES}
    for n in NODE_NAMES:
        poll(lambda n=n: is_active(n, "tpwarden-thermal.service"), 60, f"{n}'s thermal agent")
    for n in NODE_NAMES:
        poll(lambda n=n: sizes(n) > first[n], 30, f"{n}'s agent to write a sample")
    for n in NODE_NAMES:  # as its own unprivileged user (issue 29), its samples that user's
        pid = lab.ssh(n, ["systemctl", "show", "-p", "MainPID", "--value", "tpwarden-thermal"])
        owner = lab.ssh(n, ["stat", "-c", "%U", f"/proc/{pid.stdout.strip()}"])
        assert owner.stdout.strip() == "tpwarden-thermal", (n, pid.stdout, owner.stderr)
        files = lab.ssh(n, ["find", "/var/log/tpwarden/thermal", "-type", "f", "-printf", "%u\n"])
        assert set(files.stdout.split()) == {"tpwarden-thermal"}, (n, files.stdout)
    poll(lambda: is_active("node1", "tpwarden-watchdog.service"), 60, "the head's watchdog")
    for n in NODE_NAMES[1:]:
        has = lab.ssh(n, ["systemctl", "cat", "tpwarden-watchdog.service"], timeout_s=10)
        assert has.rc != 0, f"{n} must not run the watchdog"
    verify = lab.ssh(
        "node1",
        ["systemd-analyze", "verify"]
        + [
            f"/etc/systemd/system/tpwarden-{u}.service"
            for u in ("thermal", "watchdog", "clock-cap")
        ],
    )
    assert verify.rc == 0, verify.stderr


def test_nodes_system_python_lacks_pynvml_and_psutil_yet_preflight_passes(lab, provisioned):
    """Issue 28 item 7, nothing by hand on the nodes: the nodes' system python3 has neither
    pynvml nor psutil (the lab's rootfs installs python3 and python3-venv only); provisioning
    puts them in the nodes' tpwarden venv, which the units use, and the collector zipapp carries
    the pure-Python pynvml it needs; pre-flight (GPU facts, clock cap) passes on every node."""
    for node in NODE_NAMES:
        for module in ("pynvml", "psutil"):
            system = lab.ssh(node, ["python3", "-c", f"import {module}"], timeout_s=30)
            assert system.rc != 0, f"{node}: the system python3 has {module}"
            venv = lab.ssh(node, ["/opt/tpwarden/venv/bin/python", "-c", f"import {module}"])
            assert venv.rc == 0, (node, module, venv.stderr)
    spec = load_inventory(lab.inventory)
    with Controller(spec) as ctl:
        report = ctl.preflight(ctl.plan_restart())  # as a rollout checks a running server
    assert report.ok, report.problems


def test_clock_cap_back_after_node_restart(lab, provisioned):
    node = lab.paths.node("node2")
    assert cap_mhz(lab, "node2") == 2000
    host.stop_group(node.pidfile, nodes.STOP_GRACE_S)  # clean poweroff of the machine
    lower = rootfs.rootfs_path(rootfs.NODE_ROOTFS, lab.paths.cache)
    nvml = lab.paths.cache / "nvml" / "libnvidia-ml.so.1"
    assets = nodes.find_assets(lower, lab.paths, nvml if nvml.is_file() else None)
    nodes.prepare(node, assets)  # a boot resets the simulated GPU clocks
    nodes.start(node, lab.paths, assets)
    nodes.wait_ready(node, lab.paths)

    def capped() -> bool:
        done = lab.ssh("node2", ["systemctl", "is-active", "tpwarden-clock-cap.service"])
        return done.stdout.strip() == "active" and cap_mhz(lab, "node2") == 2000

    poll(capped, 60, "the clock cap after the restart")
    poll(
        lambda: (
            lab.ssh("node2", ["systemctl", "is-active", "tpwarden-thermal.service"]).stdout.strip()
            == "active"
        ),
        30,
        "the thermal agent after the restart",
    )
