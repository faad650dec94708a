"""The watchdog against real vLLM, time scaled down, with the real actuator (cluster control):
a real worker rank paused -> /health 200, the probe hangs with flat real counters -> exactly
`failures` counted failures -> one whole-server restart -> healthy again; the restart's incident
dossier names the paused rank. A real worker rank killed (SIGKILL) is named the same way.

In the lab the nodes are systemd-nspawn machines with their own PID namespace while the serving
containers run on the host's engine, so a node's collector cannot see the rank's processes: the
dossier reads them, and their py-spy stacks, from a diagnostic container in each rank's PID
namespace. The paused rank's are frozen; the other workers wait in the tensor-parallel
collective (torch.distributed's all_reduce) for it."""

from __future__ import annotations

import time

import pytest
from tpwarden.cluster.reports.incident import DOSSIER_TIMEOUT_S
from tpwarden.lab import faults
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.policy_state import WatchdogPhase

from tests.lab.test_incident_dossier import assert_dossier_names_a_dead_rank, assert_stacks_beside
from tests.lab.test_watchdog_scenarios import (
    FAILURES,
    control_restarts,
    counted_before_restart,
    events,
    kinds,
    make_watchdog,
    phase_is,
    tick_until,
)

pytestmark = pytest.mark.engine

WORKER = "node3"
BOOT_S = 600  # a real TP=4 boot on 2 shared cores: ~1-3 min


def test_paused_worker_rank_restarts_after_exactly_n_failures(engine_server, tmp_path):
    wd = make_watchdog(engine_server.spec, tmp_path, boot_deadline_s=BOOT_S)
    try:
        tick_until(wd, phase_is(wd, WatchdogPhase.READY), 60, "ready")
        t_fault = time.time()
        faults.container_action(engine_server.paths, WORKER, "pause")
        tick_until(wd, lambda: kinds(events(wd), "restart_end"), BOOT_S, "restarted")
        detected_s = kinds(events(wd), "restart_begin")[0]["ts"] - t_fault
        tick_until(wd, phase_is(wd, WatchdogPhase.READY), BOOT_S, "healthy again")
        evs = events(wd)
        (end,) = kinds(evs, "restart_end")
        assert end["ok"], end
        assert len(control_restarts(tmp_path)) == 1
        counted = counted_before_restart(evs, t_fault)
        assert [c["count"] for c in counted] == list(range(1, FAILURES + 1)), counted
        # real /metrics answered with flat token counters: judged stalled, not busy
        assert any(c["verdict"] == "stalled" for c in counted), counted
        window = FAILURES * (wd.config.interval_s + wd.config.timeout_s)
        assert detected_s <= window + 10, (detected_s, window)
        (begin,) = kinds(evs, "restart_begin")
        (dossier,) = kinds(evs, "incident_dossier")
        assert dossier["restart_id"] == begin["restart_id"] and dossier["suspect"] == WORKER, (
            dossier
        )
        doc = IncidentStore(wd.config.state_dir).load(dossier["id"])
        assert doc is not None and doc["nodes"][WORKER]["container"]["state"] == "paused", doc
        assert_stacks_beside(doc, WORKER)
        waits = [f for f in doc["verdict"]["facts"] if " in all_reduce (torch/distributed/" in f]
        assert waits and waits[0].startswith("node1, node2, node4 wait"), doc["verdict"]
        # taken after restart_begin (which follows the third failure at once), within its bound
        assert begin["ts"] - counted[-1]["ts"] < 1.0, (begin, counted[-1])
        assert dossier["took_s"] <= DOSSIER_TIMEOUT_S + 1, dossier
        with engine_server.controller() as ctl:
            assert ctl.probe(timeout=10)[0]
            assert {n.state for n in ctl.status(timeout_s=15).nodes} == {"running"}
    finally:
        wd.close()
        engine_server.ensure_healthy()


def test_killed_worker_rank_is_named_by_the_dossier_and_restarted(engine_server, tmp_path):
    """SIGKILL, not a pause: the rank's container exits (137); whatever the head's engine makes
    of its lost worker, the dossier names node3 and the server is restarted once."""
    wd = make_watchdog(engine_server.spec, tmp_path, boot_deadline_s=BOOT_S)
    try:
        tick_until(wd, phase_is(wd, WatchdogPhase.READY), 60, "ready")
        faults.container_action(engine_server.paths, WORKER, "kill")
        tick_until(wd, lambda: kinds(events(wd), "restart_end"), BOOT_S, "restarted")
        tick_until(wd, phase_is(wd, WatchdogPhase.READY), BOOT_S, "healthy again")
        evs = events(wd)
        (end,) = kinds(evs, "restart_end")
        assert end["ok"], end
        assert len(control_restarts(tmp_path)) == 1
        assert_dossier_names_a_dead_rank(wd.config.state_dir, evs, WORKER)
    finally:
        wd.close()
        engine_server.ensure_healthy()
