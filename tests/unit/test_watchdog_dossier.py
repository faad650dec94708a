"""The watchdog takes an incident dossier before a restart, stores it, names the suspect in
the alert, and restarts anyway when the dossier fails or hangs (issue 32)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from tpwarden.cluster.event_log import read_events
from tpwarden.watchdog.incidents import IncidentStore, new_id, trimmed

from tests.unit.test_watchdog_daemon import REFUSED, make

SUSPECT = "suspect: node3 (rank 2): process 2765 (python) stopped (T)"


def dossier(reason: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "taken_at_unix_s": 1_780_000_000.0,
        "took_s": 3.2,
        "nodes": {"node3": {"rank": 2, "error": None}},
        "verdict": {"suspect": "node3", "rank": 2, "summary": SUSPECT, "facts": []},
    }


def restart_begin(wd) -> dict[str, Any]:
    events = read_events(wd.config.events_path).events
    return next(e for e in events if e["kind"] == "restart_begin")


def dossier_event(wd) -> dict[str, Any]:
    """The incident_dossier event, recorded right after restart_begin, for the same restart."""
    events = read_events(wd.config.events_path).events
    kinds = [e["kind"] for e in events]
    assert kinds.index("incident_dossier") == kinds.index("restart_begin") + 1, kinds
    found = next(e for e in events if e["kind"] == "incident_dossier")
    assert found["restart_id"] == restart_begin(wd)["restart_id"]
    return {k: v for k, v in found.items() if k not in ("ts", "kind", "restart_id")}


def fail_three_times(wd, prober) -> None:
    wd.tick()
    prober.next = REFUSED
    for _ in range(3):
        wd.tick()


def test_the_dossier_is_stored_with_the_restart_and_the_alert_names_the_suspect(
    tmp_path: Path,
) -> None:
    out = tmp_path / "alerts.txt"
    cmd = (sys.executable, "-c", f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read())")
    wd, prober, act = make(tmp_path, alert_command=cmd)
    act.collect_dossier = dossier  # type: ignore[attr-defined]
    act.fail = True  # a failed restart is alerted at once
    fail_three_times(wd, prober)
    assert len(act.restarts) == 1
    incident = dossier_event(wd)
    assert act.restarts[0][1]["incident"] == incident  # the actuator gets it with the evidence
    assert incident["suspect"] == "node3" and incident["summary"] == SUSPECT
    store = IncidentStore(wd.config.state_dir)
    [stored] = store.summaries()
    assert stored["id"] == incident["id"] and stored["suspect"] == "node3"
    doc = store.load(incident["id"])
    assert doc is not None and doc["restart_id"] == restart_begin(wd)["restart_id"]
    alert = json.loads(out.read_text())
    assert alert["category"] == "restart_failed"
    assert (alert["suspect"], alert["dossier_id"]) == ("node3", incident["id"])
    assert alert["dossier_summary"] == SUSPECT
    wd.close()


def test_a_failing_dossier_never_stops_the_restart(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)

    def broken(reason: str) -> dict[str, Any]:
        raise RuntimeError("ssh exploded")

    act.collect_dossier = broken  # type: ignore[attr-defined]
    fail_three_times(wd, prober)
    assert len(act.restarts) == 1
    assert dossier_event(wd) == {"error": "RuntimeError: ssh exploded"}
    assert IncidentStore(wd.config.state_dir).ids() == []
    wd.close()


def test_a_hanging_dossier_is_cut_at_its_bound_and_the_restart_goes_on(tmp_path: Path) -> None:
    release = threading.Event()
    wd, prober, act = make(tmp_path)
    wd.dossier_timeout_s = 0.2

    def hangs(reason: str) -> dict[str, Any]:
        release.wait(30)
        return dossier(reason)

    act.collect_dossier = hangs  # type: ignore[attr-defined]
    try:
        fail_three_times(wd, prober)
    finally:
        release.set()
    assert len(act.restarts) == 1
    error = dossier_event(wd)["error"]
    assert "dossier" in error and "0.2" in error, error
    wd.close()


def test_an_actuator_without_dossiers_still_restarts(tmp_path: Path) -> None:
    wd, prober, act = make(tmp_path)
    fail_three_times(wd, prober)
    assert len(act.restarts) == 1
    events = read_events(wd.config.events_path).events
    assert "incident_dossier" not in [e["kind"] for e in events]
    assert "incident" not in act.restarts[0][1]
    wd.close()


def test_the_store_prunes_the_oldest_and_ids_are_unique(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path, max_files=3)
    ids = [
        store.save(dossier("r") | {"taken_at_unix_s": 1_780_000_000.0 + i // 2}) for i in range(5)
    ]
    assert ids[0] == "20260528T202640Z" and ids[1] == "20260528T202640Z-2"
    assert store.ids() == sorted(ids[2:])
    assert [s["id"] for s in store.summaries()] == sorted(ids[2:], reverse=True)
    assert store.last() is not None and store.last()["id"] == max(ids[2:])
    assert store.load("../etc/passwd") is None and store.load("nope") is None
    assert new_id(0.0, set()) == "19700101T000000Z"


def test_a_big_dossier_is_trimmed_to_its_cap_keeping_the_collective_frame() -> None:
    frames = [f"f{i} (x.py:{i})" for i in range(500)]
    proc = {"pid": 1, "pyspy": {"waiting_in": "all_reduce (c10d.py:1)", "threads": []}}
    proc["pyspy"]["threads"] = [{"id": str(t), "frames": list(frames)} for t in range(40)]
    doc = dossier("r")
    doc["nodes"]["node3"]["collected"] = {"processes": [proc]}
    small = trimmed(doc, max_bytes=20_000)
    assert len(json.dumps(small)) <= 20_000
    kept = small["nodes"]["node3"]["collected"]["processes"][0]["pyspy"]
    assert kept["waiting_in"] == "all_reduce (c10d.py:1)"
    assert small["trimmed"][0] == "stacks cut to 12 frames"
    assert trimmed(dossier("r")).get("trimmed") is None
