"""Which rank hung, and where (issue 32), on the lab with the REAL actuator: node3's rank is
paused (the demo's fault), or the head's rank killed; the watchdog's dossier, taken right after restart_begin,
names node3, and the restart still happens. Also `incident capture` on the paused server.

In the lab the nodes are systemd-nspawn machines with their own PID namespace and the serving
containers run on the host's engine, so the node's collector cannot see the container's host
PIDs ("not in this node's /proc"): each rank's processes and py-spy stacks come from a
diagnostic container in its PID namespace, started through the node's Docker gateway
(`tpwarden.cluster.reports.incident.from_beside`), as on a node whose engine runs in a VM.
"""

from __future__ import annotations

import time

import pytest
from tpwarden.cluster.reports.incident import DOSSIER_TIMEOUT_S, capture
from tpwarden.lab import faults
from tpwarden.lab.paths import HEAD
from tpwarden.watchdog.incidents import IncidentStore

from tests.lab import test_watchdog_scenarios as scenarios
from tests.lab.test_watchdog_scenarios import WORKER, kinds, ready_watchdog, restart_then_healthy

# alone: every node's dossier within the product's 10-s deadline is a deadline on this machine's
# CPUs; beside the engine lane's real vLLM bench a node's part ran past it (CI3, CI4), so
# scripts/test.sh runs these after the lanes, on lane 1, with nothing beside them.
pytestmark = [pytest.mark.lab, pytest.mark.alone]
ctl = scenarios.ctl  # the same fixture: the lab's server up, left healthy after each test


def assert_stacks_beside(doc: dict, paused: str) -> None:
    """Every rank's processes were read from a diagnostic container: the paused rank's frozen
    (the engine's word) and dumped nonblocking, every rank's serving process with a stack
    (also used by tests/engine/test_watchdog_real.py)."""
    for name, node in doc["nodes"].items():
        collected = node["collected"]
        procs = collected["processes"]
        assert collected.get("pid_namespace") == "container" and procs, (name, collected)
        stacks = [p["pyspy"] for p in procs if p.get("pyspy")]
        assert stacks and all(s["error"] is None and s["threads"] for s in stacks), (name, procs)
        if name == paused:
            assert all(p["frozen"] is True for p in procs), procs
            assert all(s["nonblocking"] for s in stacks), stacks


def assert_dossier_names_a_dead_rank(state_dir: str, evs: list[dict], node: str) -> None:
    """The restart's dossier names `node`, whose serving container is gone or has exited (also
    used by tests/engine/test_watchdog_real.py)."""
    (dossier_event,) = kinds(evs, "incident_dossier")
    assert dossier_event["suspect"] == node, dossier_event
    doc = IncidentStore(state_dir).load(dossier_event["id"])
    assert doc is not None
    container = doc["nodes"][node]["container"]
    assert container is None or container["state"] in ("exited", "dead"), container


def test_paused_rank_is_the_suspect_of_the_watchdog_dossier(ctl, lab, tmp_path):
    wd = ready_watchdog(ctl, tmp_path)
    try:
        t_fault = time.time()
        faults.container_action(lab.paths, WORKER, "pause")
        evs = restart_then_healthy(wd, tmp_path, t_fault)
        (begin,) = kinds(evs, "restart_begin")
        (dossier_event,) = kinds(evs, "incident_dossier")
        assert dossier_event["restart_id"] == begin["restart_id"]
        assert dossier_event["suspect"] == WORKER, dossier_event
        assert dossier_event["took_s"] <= DOSSIER_TIMEOUT_S + 1, dossier_event
        doc = IncidentStore(wd.config.state_dir).load(dossier_event["id"])
        assert doc is not None
        assert doc["nodes"][WORKER]["container"]["state"] == "paused"
        assert "container paused (all its processes frozen)" in doc["verdict"]["facts"]
        assert_stacks_beside(doc, WORKER)
    finally:
        wd.close()


def test_killed_rank_is_the_suspect_of_the_watchdog_dossier(ctl, lab, tmp_path):
    """The head's rank killed (SIGKILL), as test_head_container_crash_restarts does: in the
    simulator a killed worker need not hang the head, a killed head always fails the probe."""
    wd = ready_watchdog(ctl, tmp_path)
    try:
        t_fault = time.time()
        faults.container_action(lab.paths, HEAD, "kill")
        evs = restart_then_healthy(wd, tmp_path, t_fault)
        assert_dossier_names_a_dead_rank(wd.config.state_dir, evs, HEAD)
    finally:
        wd.close()


def test_capture_on_demand_names_the_paused_rank_and_restarts_nothing(ctl, lab):
    try:
        faults.container_action(lab.paths, WORKER, "pause")
        started = time.monotonic()
        doc = capture(ctl.spec, ctl.nodes, "lab test")
        assert time.monotonic() - started <= DOSSIER_TIMEOUT_S + 1
        assert doc["verdict"]["suspect"] == WORKER, doc["verdict"]
        assert all(doc["nodes"][n.name].get("error") is None for n in ctl.spec.nodes), doc
        assert_stacks_beside(doc, WORKER)
    finally:
        faults.container_action(lab.paths, WORKER, "unpause")
