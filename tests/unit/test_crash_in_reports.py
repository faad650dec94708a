"""The crash named where an operator reads it (issue 49): `up` (the boot follower), `status` and
the incident dossier, on fake nodes whose containers hold the lab's real SIGILL logs
(tests/fixtures/real/boot: the head's worker died with no exit code logged, node2's by SIGILL)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tpwarden.cluster.boot.crash_report import read_crash
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.reports.incident import capture
from tpwarden.cluster.reports.incident_verdict import verdict

from tests.unit.fake_nodes import FakeNodes, FixedClock, good_spec
from tests.unit.fake_server import FakeServer

SPEC = good_spec()
BOOT = Path(__file__).parents[1] / "fixtures" / "real" / "boot"
LOGS = {
    "node1": BOOT / "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node1.log",
    "node2": BOOT / "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node2.log",
}
NAMED = (
    "node2 rank 1 died by SIGILL: an instruction this CPU or its container does not allow, "
    "on the first request after a healthy boot"
)


def _body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


@pytest.fixture
def crashed(monkeypatch) -> FakeNodes:
    """Every container exited as after the lab's SIGILL: node1 (the head) with 0, node2 with
    its log; the other two nodes' logs say nothing."""
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    nodes = FakeNodes.running(SPEC)
    for node, gw in nodes.engines.items():
        for name, c in gw.containers.items():
            gw.containers[name] = dataclasses.replace(c, state="exited", exit_code=0)
            if node in LOGS:
                gw.log_lines[name] = _body(LOGS[node])
    return nodes


def _ctl(tmp_path: Path, nodes: FakeNodes) -> Controller:
    return Controller(
        SPEC,
        state_dir=tmp_path,
        nodes=nodes,
        clock=FixedClock(),
        http=FakeServer(up=False).client(),
    )


def test_up_names_the_signal_the_rank_and_the_phase_not_container_exited(tmp_path, crashed):
    with _ctl(tmp_path, crashed) as ctl:
        boot = ctl.follow_boot(timeout_s=10, poll_s=0.05)
    assert not boot.ready
    assert boot.reason.startswith(NAMED)
    assert "container exited (0)" not in boot.reason.split(";")[0]
    p = boot.progress
    assert p.error_kind == "SIGILL" and p.crash is not None
    assert {(d.node, d.rank) for d in p.crash.deaths} == {("node1", 0), ("node2", 1)}
    # the report still shows each node's last lines, no more than 20
    assert all(len(text.splitlines()) <= 20 for text in boot.last_lines.values())
    assert "died unexpectedly (exit code: -4)" in boot.last_lines["node2"]


def test_status_shows_the_crash_of_the_exited_containers(tmp_path, crashed):
    gw = crashed.engines["node2"]
    (name,) = gw.containers
    gw.containers[name] = dataclasses.replace(gw.containers[name], exit_code=132)
    with _ctl(tmp_path, crashed) as ctl:
        st = ctl.status(timeout_s=5)
    rows = {n.node: n for n in st.nodes}
    assert rows["node2"].crash is not None and rows["node2"].crash.signal.name == "SIGILL"
    assert rows["node3"].crash is None  # its log says nothing
    assert f"crash: {NAMED}; also node1 rank 0 (no exit code)" in st.notes
    assert (
        "node2: container exited (132): SIGILL, an instruction this CPU or its container "
        "does not allow"
    ) in st.notes
    doc = st.to_json()["nodes"][1]
    assert doc["exit_signal"] == "SIGILL" and doc["crash"]["signal"] == "SIGILL"


def test_the_dossier_reads_an_exited_containers_log_and_names_the_signal(crashed):
    doc = capture(SPEC, crashed, "3 consecutive probe failures", pyspy=[])
    part = doc["nodes"]["node2"]
    assert part["crash"]["signal"] == "SIGILL" and part["crash"]["named"]
    assert doc["nodes"]["node1"]["crash"]["phase"] == "first_request"
    assert doc["nodes"]["node3"]["crash"] is None
    # only node2's log names a signal among four exited ranks: it is the suspect
    v = doc["verdict"]
    assert v["suspect"] == "node2"
    assert "rank 1 died by SIGILL (illegal instruction) after loading its model" in v["facts"]


def test_the_verdict_names_one_signal_that_killed_several_ranks():
    head = read_crash("\n".join(_body(LOGS["node1"])))
    worker = read_crash("\n".join(_body(LOGS["node2"])))
    assert head is not None and worker is not None

    def part(rank: int, role: str, crash) -> dict:
        container = {"state": "exited", "exit_code": 0, "oom_killed": False}
        return {"rank": rank, "role": role, "error": None, "container": container,
                "crash": crash.to_json()}  # fmt: skip

    dossier = {
        "nodes": {
            "node1": part(0, "head", head),
            "node2": part(1, "worker", worker),
            "node3": part(2, "worker", dataclasses.replace(worker)),
            "node4": part(3, "worker", worker),
        }
    }
    v = verdict(dossier)
    assert v.suspect is None
    assert v.summary == (
        "no single suspect: 3 ranks died by SIGILL (an instruction this CPU or its container "
        "does not allow), on the first request after a healthy boot: node2 (rank 1), "
        "node3 (rank 2), node4 (rank 3)"
    )
