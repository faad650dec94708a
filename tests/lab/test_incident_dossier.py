"""Which rank hung, and where (issue 32), on the lab with the REAL actuator: node3's rank is
paused (the demo's fault), or the head's rank killed; the watchdog's dossier, taken right after restart_begin,
names node3, and the restart still happens. Also `incident capture` on the paused server.

In the lab the nodes are systemd-nspawn machines with their own PID namespace and the serving
containers run on the host's engine, so the node's collector cannot see the container's host
PIDs: its findings say "not in this node's /proc", and the verdict rests on the engine's
container state (paused / exited). On real nodes the same dossier carries process states (a SIGSTOPped rank: T,
a `docker pause`d one: frozen at do_freezer_trap / __refrigerator) and py-spy stacks.
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

pytestmark = pytest.mark.lab
ctl = scenarios.ctl  # the same fixture: the lab's server up, left healthy after each test

FROZEN = {"T", "t"}  # a SIGSTOP; docker pause freezes (S/D at a freezer wchan)
FREEZER_WCHANS = {"do_freezer_trap", "__refrigerator"}


def _node3_processes_or_why(doc: dict) -> None:
    """The paused rank's processes are stopped or frozen, or the collector says why it could
    not see them (the lab's PID namespace)."""
    node = doc["nodes"][WORKER]
    collected = node.get("collected") or {}
    procs = collected.get("processes") or []
    if procs:
        assert all(p["state"] in FROZEN or p["wchan"] in FREEZER_WCHANS for p in procs), procs
    else:
        notes = " ".join(collected.get("findings") or []) + str(node.get("collect_error"))
        assert "not in this node's /proc" in notes or node.get("collect_error"), node


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
        _node3_processes_or_why(doc)
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
        _node3_processes_or_why(doc)
    finally:
        faults.container_action(lab.paths, WORKER, "unpause")
