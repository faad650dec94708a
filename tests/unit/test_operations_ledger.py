"""The operations record a healthy server in the configuration ledger (issue 53 on issue 51's
operations layer): `up` and `restart` that waited and found the server ready record it once,
with their actor's action; a restart that was not waited for, a failed one and the watchdog's
restart (its daemon records once its probe answers) record nothing; a ledger that cannot be
written never fails the operation; the CLI shows the record in --json and only renders it.

Cluster control is the shared fake Controller, whose results here carry a ready boot; the
ledger's own `record_healthy` (tested in test_ledger_fingerprint.py) is replaced by one that
says what it was asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli import control as control_cli
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import ApplyResult, BootResult
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger import record as ledger_record
from tpwarden.cluster.ledger.record import RecordOutcome
from tpwarden.cluster.ledger.store import LedgerError
from tpwarden.cluster.ledger.tables import LedgerRecord
from tpwarden.cluster.operations import control as operations
from typer.testing import CliRunner

from .fake_controller import FakeController

GOOD = Path(__file__).parent / "inventories" / "good.yml"
CFG = "cfg:3f2a9e01c4d2"


class ReadyController(FakeController):
    """The shared fake, its up/restart reaching a server that is ready when waited for."""

    ready: ClassVar[bool] = True

    def _booted(self, result: ApplyResult, wait_ready: bool) -> ApplyResult:
        if not wait_ready:
            return result
        boot = BootResult(self.ready, BootProgress(), 12.0, None if self.ready else "timeout")
        return ApplyResult(result.plan, result.outcomes, boot)

    def up(
        self,
        replace: bool = False,
        wait_ready: bool = True,
        timeout_s: float = 0,
        plan: ControlPlan | None = None,
    ) -> ApplyResult:
        return self._booted(super().up(replace, wait_ready, timeout_s, plan), wait_ready)

    def restart(self, why: str, **kw: Any) -> Any:
        return self._booted(super().restart(why, **kw), kw.get("wait_ready", True))


@pytest.fixture()
def asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """What the ledger was asked to record; `asked.append({"fail": ...})` first to fail it."""
    calls: list[dict[str, Any]] = []

    def record_healthy(ctl: Any, *, action: str, reason: str, who: str | None = None) -> Any:
        if calls and "fail" in calls[0]:
            raise LedgerError(calls[0]["fail"])
        calls.append({"action": action, "reason": reason, "who": who})
        rec = LedgerRecord(
            id=len(calls), ts=0.0, cluster=ctl.spec.name, cfg=CFG, spec_hash=None,
            action=action, reason=reason, who=who, run_dir=None, rows=40, missing={}, changed=40,
        )  # fmt: skip
        return RecordOutcome(rec, None, tmp_path / "ledger.sqlite")

    monkeypatch.setattr(ledger_record, "record_healthy", record_healthy)
    return calls


def _ctl(**knobs: Any) -> Any:
    return ReadyController.factory(**knobs)(load_inventory(GOOD))


def test_a_restart_within_a_rollout_records_the_healthy_server_as_the_rollout(asked) -> None:
    done = operations.restart(
        _ctl(), "rollout r7", actor=operations.WITHIN_ROLLOUT, who="tpwarden-rollout",
        timeout_s=60.0,
    )  # fmt: skip
    assert done.ok and done.result.boot is not None and done.result.boot.ready
    assert asked == [{"action": "rollout", "reason": "rollout r7", "who": "tpwarden-rollout"}]
    assert done.ledger is not None and done.ledger.outcome is not None
    assert done.ledger.to_json()["id"] == 1 and done.ledger.to_json()["cfg"] == CFG


def test_the_watchdogs_restart_records_nothing_its_daemon_does(asked) -> None:
    # its restart job does not wait for the boot ...
    done = operations.restart(
        _ctl(), "watchdog: hung", actor=operations.WATCHDOG, who="tpwarden-watchdog",
        wait_ready=False,
    )  # fmt: skip
    assert done.ok and done.ledger is None
    # ... and were it ever to wait, the daemon's BOOTING -> READY record stays the only one
    waited = operations.restart(
        _ctl(), "watchdog: hung", actor=operations.WATCHDOG, timeout_s=60.0, wait_ready=True
    )
    assert waited.ok and waited.ledger is None and asked == []


def test_a_server_not_waited_for_or_not_ready_is_not_recorded(asked) -> None:
    no_wait = operations.restart(
        _ctl(), "r", actor=operations.WITHIN_ROLLOUT, timeout_s=60.0, wait_ready=False
    )
    assert no_wait.ok and no_wait.ledger is None
    late = operations.restart(
        _ctl(ready=False), "r", actor=operations.WITHIN_ROLLOUT, timeout_s=60.0
    )
    assert not late.ok and late.ledger is None and asked == []


def test_a_ledger_that_cannot_be_written_never_fails_the_restart(asked) -> None:
    asked.append({"fail": "ledger.sqlite: database disk image is malformed"})
    done = operations.restart(_ctl(), "r", actor=operations.WITHIN_ROLLOUT, timeout_s=60.0)
    assert done.ok and done.ledger is not None and done.ledger.outcome is None
    assert done.ledger.to_json() == {"error": "ledger.sqlite: database disk image is malformed"}


@pytest.mark.parametrize(
    ("command", "action", "reason"),
    [("up", "up", "tpwarden up"), ("restart", "restart", "kernel update")],
)
def test_up_and_restart_json_show_the_ledger_record(
    monkeypatch: pytest.MonkeyPatch, asked, command: str, action: str, reason: str
) -> None:
    Fake = ReadyController.factory()
    monkeypatch.setattr(control_cli, "Controller", Fake)
    extra = ["--yes", "--reason", reason] if command == "restart" else []
    got = CliRunner().invoke(app, [command, "-i", str(GOOD), "--json", *extra])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    assert doc["ok"] is True and doc["boot"]["ready"] is True
    assert doc["ledger"]["id"] == 1 and doc["ledger"]["cfg"] == CFG
    assert doc["ledger"]["changed"] is True and doc["ledger"]["previous_cfg"] is None
    assert [a["action"] for a in asked] == [action] and asked[0]["reason"] == reason


def test_a_failed_up_shows_no_ledger_record(monkeypatch: pytest.MonkeyPatch, asked) -> None:
    monkeypatch.setattr(control_cli, "Controller", ReadyController.factory(fail_node="node3"))
    got = CliRunner().invoke(app, ["up", "-i", str(GOOD), "--json"])
    assert got.exit_code == 1
    assert "ledger" not in json.loads(got.stdout) and asked == []


def test_down_is_never_recorded(monkeypatch: pytest.MonkeyPatch, asked) -> None:
    monkeypatch.setattr(control_cli, "Controller", ReadyController.factory())
    got = CliRunner().invoke(app, ["down", "-i", str(GOOD), "--json"])
    assert got.exit_code == 0 and "ledger" not in json.loads(got.stdout) and asked == []
