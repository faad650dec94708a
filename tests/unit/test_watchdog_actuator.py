"""The watchdog's actuator wiring: ApplyResult -> success/failure, and restart fencing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.actuator import raise_unless_applied, result_doc

from tests.unit.test_watchdog_daemon import REFUSED, FakeActuator, kinds, make


def _spec(*names: str) -> Any:
    return SimpleNamespace(nodes=[SimpleNamespace(name=n) for n in names])


def _result(ok: bool, *outcomes: tuple[str, bool]) -> Any:
    return SimpleNamespace(
        ok=ok,
        plan=SimpleNamespace(config_hash="abc"),
        outcomes=[SimpleNamespace(node=n, ok=o, message="m") for n, o in outcomes],
    )


def test_all_nodes_started_is_applied() -> None:
    doc = result_doc(_result(True, ("n1", True), ("n2", True)), _spec("n1", "n2"))
    assert doc["ok"]
    raise_unless_applied(doc)


def test_a_node_without_an_outcome_is_a_failure() -> None:
    # apply() stops after a failed wave: the later waves' nodes have no outcome at all
    doc = result_doc(_result(True, ("n1", True)), _spec("n1", "n2"))
    assert not doc["ok"] and doc["missing"] == ["n2"]
    with pytest.raises(TpwardenError, match="n2: not started"):
        raise_unless_applied(doc)


def test_a_failed_node_is_named() -> None:
    doc = result_doc(_result(False, ("n1", False), ("n2", True)), _spec("n1", "n2"))
    with pytest.raises(TpwardenError, match="n1: m"):
        raise_unless_applied(doc)


def test_a_job_error_is_a_failure() -> None:
    with pytest.raises(TpwardenError, match="Drift"):
        raise_unless_applied({"ok": False, "error": "Drift: x"})


class StartedActuator(FakeActuator):
    def __init__(self, state_path: str, started_at: float | None) -> None:
        super().__init__(state_path)
        self.started_at = started_at

    def server_started_at(self) -> float | None:
        return self.started_at


def _fail_three_times(tmp_path: Path, started_at_offset: float | None):
    wd, prober, act = make(tmp_path, actuator=lambda path: StartedActuator(path, None))
    wd.tick()
    prober.next = REFUSED
    first_failure = prober.clock.now + prober.step_s
    if started_at_offset is not None:
        act.started_at = first_failure + started_at_offset
    for _ in range(3):
        wd.tick()
    return wd, act


def test_restart_made_by_someone_else_since_the_failures_began_is_not_repeated(
    tmp_path: Path,
) -> None:
    wd, act = _fail_three_times(tmp_path, started_at_offset=+10)
    assert act.restarts == []
    ks = kinds(wd.config)
    assert "restart_skipped" in ks and "restart_end" not in ks
    assert wd.state.phase.value == "booting" and wd.state.restart_times == ()


def test_refusals_of_a_boot_that_began_just_before_the_first_failure_are_fenced(
    tmp_path: Path,
) -> None:
    # another actor restarted the server a moment before this watchdog's first refused probe
    wd, act = _fail_three_times(tmp_path, started_at_offset=-5)
    assert act.restarts == []


def test_an_old_server_is_restarted(tmp_path: Path) -> None:
    wd, act = _fail_three_times(tmp_path, started_at_offset=-100_000)
    assert len(act.restarts) == 1
    wd2, act2 = _fail_three_times(tmp_path / "x", started_at_offset=None)  # unknown: restart
    assert len(act2.restarts) == 1


def test_tpwarden_status_line_reads_the_state_dir(tmp_path: Path) -> None:
    from tpwarden.cluster.cli.watchdog_view import watchdog_line
    from tpwarden.watchdog.policy_state import PolicyState, WatchdogPhase
    from tpwarden.watchdog.state import StateStore

    assert watchdog_line(str(tmp_path))[0] is None
    StateStore(str(tmp_path / "state.json")).save(
        PolicyState(phase=WatchdogPhase.SUSPECT, consecutive_failures=2, restart_times=(1.0,))
    )
    doc, text = watchdog_line(str(tmp_path))
    assert doc is not None and doc["state"]["phase"] == "suspect"
    assert "suspect" in text and "2 failure(s)" in text and "not running" in text
    assert doc["last_incident"] is None and "last incident" not in text


def test_tpwarden_status_line_names_the_last_incident_suspect(tmp_path: Path) -> None:
    from tpwarden.cluster.cli.watchdog_view import watchdog_line
    from tpwarden.watchdog.incidents import IncidentStore
    from tpwarden.watchdog.policy_state import PolicyState, WatchdogPhase
    from tpwarden.watchdog.state import StateStore

    StateStore(str(tmp_path / "state.json")).save(PolicyState(phase=WatchdogPhase.BOOTING))
    verdict = {"suspect": "node3", "summary": "suspect: node3 (rank 2): process 1 stopped (T)"}
    ident = IncidentStore(tmp_path).save({"taken_at_unix_s": 1.0e9, "verdict": verdict})
    doc, text = watchdog_line(str(tmp_path))
    assert doc is not None and doc["last_incident"]["suspect"] == "node3"
    assert f"last incident {ident} (2001-09-09 01:46:40Z): suspect node3" in text
