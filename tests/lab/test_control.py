"""Cluster control on the lab: up to a 1-token answer, idempotent up, drift, down, status with a
node cut off, clocks. Uses the session-scoped `lab` fixture (tests/lab/conftest.py)."""

from __future__ import annotations

import os
import time

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.plan import Action, Drift
from tpwarden.cluster.control.status_model import Verdict
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab.sensors import write_gpu_state

pytestmark = pytest.mark.lab


@pytest.fixture
def ctl(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_API_KEY", os.environ.get("TPWARDEN_API_KEY", "lab-key"))
    spec = load_inventory(lab.inventory)
    with Controller(spec, state_dir=tmp_path, node_timeout_s=5) as c:
        yield c
        c.down()


def test_up_answers_then_second_up_is_a_noop_then_down_is_clean(ctl, tmp_path):
    result = ctl.up(timeout_s=300)
    assert result.ok, (result.outcomes, result.boot and result.boot.reason)
    assert result.boot.ready and ctl.probe()[0]
    assert (tmp_path / "boots.jsonl").exists()  # the ETA's history grew
    again = ctl.plan_up()
    assert not again.changes and {s.action for s in again.steps} == {Action.KEEP}
    st = ctl.status()
    assert st.verdict is Verdict.HEALTHY, st.notes
    ctl.down()
    assert all(not v for v in ctl.observe().values())


def test_drift_refused_without_replace(ctl, lab):
    ctl.up(timeout_s=300)
    from dataclasses import replace as dc_replace

    s = ctl.spec
    drafter = s.serving.drafter.model_copy(update={"num_speculative_tokens": 7})
    changed = dc_replace(s, serving=dc_replace(s.serving, drafter=drafter))
    with Controller(changed, state_dir=ctl.history.path.parent) as other:
        st = other.status()
        assert all(n.drift for n in st.nodes if n.reachable)
        with pytest.raises(Drift):
            other.up(wait_ready=False)


def test_status_with_a_node_cut_off(ctl, lab):
    ctl.up(timeout_s=300)
    faults.cut(lab.paths, "node3")
    try:
        t0 = time.monotonic()
        st = ctl.status(timeout_s=5)
        assert time.monotonic() - t0 < 8
        n3 = next(n for n in st.nodes if n.node == "node3")
        assert not n3.reachable and n3.reason
        assert all(n.reachable for n in st.nodes if n.node != "node3")
        assert not st.ok
    finally:
        faults.restore(lab.paths, "node3")


def test_clock_cap_is_the_lock_calls_answer(ctl):
    # NVML has no read-back of a lock (issue 28): `show` reads the node's record of the answer
    results = ctl.clocks("cap", 2000)
    assert all(r.ok for r in results), results
    shown = ctl.clocks("show")
    assert all(r.ok and "NVML has no read-back" in r.message for r in shown), shown
    assert all(g.get("locked_clock_max_mhz") == 2000 for r in shown for g in r.gpus)
    assert all(g.get("clock_cap_state") == "set" for r in shown for g in r.gpus)
    assert all(r.ok for r in ctl.clocks("reset"))
    assert all(g.get("clock_cap_state") == "reset" for r in ctl.clocks("show") for g in r.gpus)


def test_a_gpu_refusing_the_lock_makes_preflight_refuse_with_the_drivers_reason(ctl, lab):
    state = lab.paths.node("node3").gpu_state  # the stand-in's state file (nvml_stub.c)
    ctl.down()  # nothing running: `up` has to start containers, so pre-flight runs
    write_gpu_state(state, {"lock_clocks_answer": "NOT_SUPPORTED"})
    try:
        with pytest.raises(TpwardenError) as refused:
            ctl.up(timeout_s=300)
        said = str(refused.value)
        assert said.startswith("pre-flight failed"), said
        assert (
            "node3: cap: cannot lock GPU clocks on GPU 0: NVML answered NOT_SUPPORTED "
            "(Not Supported)" in said
        ), said
        assert not any(f"node{i}:" in said for i in (1, 2, 4)), said  # only the refusing node
        assert not any(ctl.observe().values())  # nothing was started
        shown = {r.node: r for r in ctl.clocks("show")}
        assert not shown["node3"].ok and "NOT_SUPPORTED" in shown["node3"].message
        assert shown["node3"].gpus[0]["clock_cap_state"] == "refused"
    finally:
        write_gpu_state(state, {"lock_clocks_answer": ""})  # empty: as the driver would
    # the same lab, the driver no longer refusing: pre-flight passes with the 2000 MHz cap
    result = ctl.up(wait_ready=False)
    assert all(o.ok for o in result.outcomes), result.outcomes
    shown = ctl.clocks("show")
    assert all(g.get("clock_cap_state") == "set" for r in shown for g in r.gpus), shown
    assert all(g.get("locked_clock_max_mhz") == 2000 for r in shown for g in r.gpus)
