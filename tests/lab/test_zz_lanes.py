"""Two lanes of the lab side by side (issue 50): lane 2 brought up beside this run's lane 1, a
worker rank lost in lane 2 while both watchdogs tick; lane 2's watchdog restarts its server and
lane 1's status and watchdog see nothing; `lab down --lane 2` leaves lane 1 running.

Marked `alone`: the test command runs it after the lanes, when both lanes' locks are free
(it takes the other lane's lock like any run does).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.status_model import Verdict
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab import lab as lablib
from tpwarden.lab.paths import LabPaths
from tpwarden.watchdog.policy_state import WatchdogPhase

from tests.lab.conftest import tpwarden
from tests.lab.test_watchdog_scenarios import (
    WORKER,
    control_restarts,
    events,
    kinds,
    make_watchdog,
    phase_is,
    tick_until,
)

# alone: it takes both lanes (the other lane's lock, held by the other lane's tests until they
# end); scripts/test.sh runs it after the lanes.
pytestmark = [pytest.mark.lab, pytest.mark.alone]


@pytest.fixture
def lane2(lab):
    other = LabPaths(lab.paths.base, 2) if lab.paths.lane == 1 else LabPaths(lab.paths.base, 1)
    other.lock.parent.mkdir(parents=True, exist_ok=True)
    with open(other.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the engine tier's lane, once it is done with it
        try:
            lablib.up(other, engine_name="sim")
            yield other
        finally:
            if lablib.status(other).up:
                lablib.down(other)


def _up(paths: LabPaths, control: Path) -> Controller:
    ctl = Controller(load_inventory(paths.inventory), state_dir=control, node_timeout_s=10)
    result = ctl.up(timeout_s=300)
    assert result.ok, (paths.lane, result.outcomes, result.boot and result.boot.reason)
    return ctl


def test_two_lanes_side_by_side_a_fault_in_one_leaves_the_other_alone(lab, lane2, tmp_path):
    one, two = lab.paths, lane2
    assert lablib.status(one).up and lablib.status(two).up
    assert {n.ip for n in lablib.status(one).nodes}.isdisjoint(
        n.ip for n in lablib.status(two).nodes
    )
    with contextlib.ExitStack() as stack:
        ctl1 = stack.enter_context(_up(one, tmp_path / "lane1" / "control"))
        ctl2 = stack.enter_context(_up(two, tmp_path / "lane2" / "control"))
        assert ctl1.spec.name != ctl2.spec.name and ctl1.spec.api_base != ctl2.spec.api_base
        wd1 = make_watchdog(ctl1.spec, tmp_path / "lane1", "wd")
        wd2 = make_watchdog(ctl2.spec, tmp_path / "lane2", "wd")
        stack.callback(wd1.close)
        stack.callback(wd2.close)

        def both_ready() -> bool:
            wd1.tick()
            return phase_is(wd1, WatchdogPhase.READY)() and phase_is(wd2, WatchdogPhase.READY)()

        tick_until(wd2, both_ready, 60, "both watchdogs ready")
        t_fault = time.time()
        faults.container_action(two, WORKER, "pause")
        stack.callback(lambda: faults.container_action(two, WORKER, "unpause"))

        def lane2_restarted_and_lane1_ticked() -> bool:
            wd1.tick()
            return bool(kinds(events(wd2), "restart_end"))

        tick_until(wd2, lane2_restarted_and_lane1_ticked, 120, "lane 2 restarted")
        tick_until(wd2, phase_is(wd2, WatchdogPhase.READY), 120, "lane 2 healthy again")
        assert len(control_restarts(tmp_path / "lane2")) == 1
        # lane 1 saw nothing: no failure counted after the fault, no restart, healthy throughout
        counted = [
            e for e in events(wd1)
            if e["ts"] >= t_fault and e["kind"] == "decision" and e["decision"] == "count_failure"
        ]  # fmt: skip
        assert not counted, counted
        assert not kinds(events(wd1), "restart_begin")
        assert control_restarts(tmp_path / "lane1") == []
        assert wd1.state is not None and wd1.state.phase is WatchdogPhase.READY
        assert ctl1.status(timeout_s=15).verdict is Verdict.HEALTHY

    done = tpwarden("lab", "down", "--lane", str(two.lane))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not lablib.status(two).up
    assert lablib.status(one).up
    with Controller(load_inventory(one.inventory), state_dir=tmp_path / "lane1" / "control") as c:
        assert c.status(timeout_s=15).verdict is Verdict.HEALTHY
