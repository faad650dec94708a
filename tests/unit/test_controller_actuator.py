"""The watchdog's real actuator and its restart job, with a fake Controller and a fake spawn."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.control.applied import plan_for, write_local
from tpwarden.cluster.errors import ProbeError, TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.watchdog.actuator import (
    EVIDENCE_MAX_CHARS,
    RESTART_JOB_MODULE,
    WATCHDOG_WHO,
    ControllerActuator,
    boot_reading,
)
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.restart_job import main, restart_job

from .fake_controller import FakeController

ROOT = Path(__file__).resolve().parents[2]


def _result(ok: bool, *nodes: tuple[str, bool]) -> Any:
    return SimpleNamespace(
        ok=ok,
        plan=SimpleNamespace(config_hash="abc"),
        outcomes=[SimpleNamespace(node=n, ok=o, message="m") for n, o in nodes],
    )


def _spec(*names: str, source_file: str | None = None) -> Any:
    # SshIdentity() leaves a spec as it is: no key or known_hosts to put in
    return SimpleNamespace(nodes=[SimpleNamespace(name=n) for n in names], source_file=source_file)


def _actuator(spec: Any, **kw: Any) -> tuple[ControllerActuator, FakeController]:
    ctl = FakeController(spec)
    ctl.result = _result(True, ("n1", True))
    ctl.log_lines = {"n1": "x" * (EVIDENCE_MAX_CHARS + 10) + "END", "n2": "short"}
    return ControllerActuator(spec, controller=ctl, **kw), ctl  # type: ignore[arg-type]


# --- restart ----------------------------------------------------------------------------------


def test_without_a_file_to_hand_a_job_the_restart_runs_here() -> None:
    act, ctl = _actuator(_spec("n1"))
    assert act.restart_job_argv("watchdog: x") is None
    act.restart("hang", {})
    assert ctl.restarts == [{"why": "watchdog: hang", "wait_ready": False, "who": WATCHDOG_WHO}]
    ctl.result = _result(True)  # n1 never started (an earlier wave failed): not applied
    with pytest.raises(TpwardenError, match="n1: not started"):
        act.restart("hang", {})


class FakeProc:
    def __init__(self, out: str = "", err: str = "", timeout: bool = False) -> None:
        self.pid, self.returncode = 42, 0
        self.out, self.err, self.timeout = out, err, timeout
        self.argv: list[str] = []
        self.kw: dict[str, Any] = {}

    def __call__(self, argv: list[str], **kw: Any) -> FakeProc:
        self.argv, self.kw = argv, kw
        return self

    def communicate(self, timeout: float) -> tuple[str, str]:
        if self.timeout:
            raise subprocess.TimeoutExpired("job", timeout)
        return self.out, self.err


def test_the_restart_job_is_a_detached_child_with_the_plan_and_the_state_dir(
    tmp_path: Path,
) -> None:
    applied = tmp_path / "applied.json"
    applied.write_text("{}")
    proc = FakeProc(out="progress\n" + json.dumps({"ok": True}) + "\n")
    act, ctl = _actuator(
        _spec("n1"), control_state_dir="/ctl", applied_path=str(applied), spawn=proc
    )
    act.restart("hang", {}, keep_fds=(7,))
    assert proc.argv == [sys.executable, "-m", RESTART_JOB_MODULE, str(applied), "watchdog: hang",
                         "/ctl"]  # fmt: skip
    assert proc.kw["start_new_session"] and proc.kw["stdin"] is subprocess.DEVNULL
    assert proc.kw["pass_fds"] == (7,)  # the cluster restart lock, held by the job too
    assert ctl.restarts == []  # the child restarts, not this process


@pytest.mark.parametrize(
    ("proc", "match"),
    [
        (FakeProc(out=json.dumps({"ok": False, "error": "Drift: x"})), "restart failed: Drift"),
        (FakeProc(out="", err="Traceback ... boom"), "without a result: Traceback ... boom"),
        (FakeProc(timeout=True), "still running after"),
    ],
)
def test_a_restart_job_that_fails_raises(tmp_path: Path, proc: FakeProc, match: str) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("x")
    act, _ = _actuator(_spec("n1", source_file=str(inventory)), spawn=proc)
    with pytest.raises(TpwardenError, match=match):
        act.restart("hang", {})
    assert proc.argv[3] == str(inventory)  # no applied plan: the inventory it was started on


# --- what the daemon reads ------------------------------------------------------------------


def test_boot_progress_is_failed_as_soon_as_a_rank_exited() -> None:
    act, ctl = _actuator(_spec("n1"))
    assert act.boot_progress() is None
    ctl.progress = BootProgress(phase=BootPhase.LOADING_WEIGHTS, shards_loaded=3, fraction=0.5)
    assert act.boot_progress() == BootReading("loading_weights", 3.0)
    ctl.dead = ["node2: container gone"]  # gone is not exited: still booting
    assert act.boot_progress() == BootReading("loading_weights", 3.0)
    ctl.dead = ["node2: container exited (1)"]
    got = act.boot_progress()
    assert got is not None and got.failed and "node2: container exited (1)" in got.phase
    ctl.progress = BootProgress(phase=BootPhase.FAILED, cuda_graphs_pct=40)
    assert act.boot_progress() == BootReading("failed", 40.0, failed=True)


def test_the_boot_counter_grows_with_evidence_only() -> None:
    # time-based fraction and ETA grow while a boot is stuck: they must not look like progress
    stuck = BootProgress(phase=BootPhase.LOADING_WEIGHTS, shards_loaded=2, fraction=0.9, eta_s=5)
    assert boot_reading(stuck) == BootReading("loading_weights", 2.0)
    more = BootProgress(phase=BootPhase.LOADING_WEIGHTS, shards_loaded=2, drafter_shards_loaded=1)
    assert boot_reading(more).progress == 3.0


def test_evidence_keeps_the_log_tails_and_the_engines_series() -> None:
    act, ctl = _actuator(_spec("n1"))
    ctl.page = (200, 'vllm:a{x="1"} 1\nvllm:h_bucket{le="1"} 2\npython_info 1\nvllm:b 3\n')
    doc = act.collect_evidence()
    assert doc["last_log_lines"]["n1"].endswith("END")
    assert len(doc["last_log_lines"]["n1"]) == EVIDENCE_MAX_CHARS
    assert doc["metrics"] == {"status_code": 200, "text": 'vllm:a{x="1"} 1\nvllm:b 3'}
    ctl.page = ProbeError("ConnectError: refused")
    assert act.collect_evidence()["metrics"] == {"error": "ConnectError: refused"}


def test_server_started_at_fences_with_the_head_containers_start() -> None:
    act, ctl = _actuator(_spec("n1"))
    assert act.server_started_at() is None
    ctl.started_at = datetime(2026, 1, 1, tzinfo=UTC)
    assert act.server_started_at() == ctl.started_at.timestamp()
    act.close()
    assert ctl.closed


# --- the restart job ------------------------------------------------------------------------


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text((ROOT / "inventory.example.yml").read_text())
    return path


class Factory:
    """A Controller factory for the restart job; every controller made reports `ok`."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.made: list[FakeController] = []

    def __call__(self, spec: Any, **kw: Any) -> FakeController:
        ctl = FakeController(spec, **kw)
        ctl.result = _result(self.ok, *((n.name, self.ok) for n in spec.nodes))
        self.made.append(ctl)
        return ctl


@pytest.mark.parametrize(("ok", "code"), [(True, 0), (False, 1)])
def test_restart_job_prints_one_result_line(tmp_path: Path, ok: bool, code: int) -> None:
    factory, out = Factory(ok), io.StringIO()
    inv = _inventory(tmp_path)
    assert restart_job(str(inv), "watchdog: hang", "/ctl", out=out, controller=factory) == code
    (ctl,) = factory.made
    assert ctl.kw == {"state_dir": "/ctl", "applied_source": None} and ctl.closed
    assert ctl.restarts == [{"why": "watchdog: hang", "wait_ready": False, "who": WATCHDOG_WHO}]
    doc = json.loads(out.getvalue())
    assert doc["ok"] is ok and doc["missing"] == []


def test_restart_job_replays_an_applied_plan_as_recorded(tmp_path: Path) -> None:
    plan = plan_for(load_inventory(_inventory(tmp_path)), "up", "ops")
    assert plan is not None
    path = tmp_path / "applied.json"
    write_local(plan, [str(path)])
    factory, out = Factory(), io.StringIO()
    assert restart_job(str(path), "watchdog: hang", out=out, controller=factory) == 0
    (ctl,) = factory.made
    assert ctl.kw["applied_source"] == (plan.inventory_text, plan.inventory_path)
    assert ctl.spec.config_hash() == plan.config_hash


def test_restart_job_error_is_reported_as_data(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "absent.yml"), "watchdog: hang"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and "ConfigError" in doc["error"]


def test_restart_job_runs_as_a_module(tmp_path: Path) -> None:
    # the command line the actuator spawns: a real interpreter, the installed module
    argv = [sys.executable, "-m", RESTART_JOB_MODULE, str(tmp_path / "absent.yml"), "w"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["ok"] is False


def test_under_systemd_the_restart_job_runs_in_a_scope_of_its_own():
    """Issue 29 item 4: a watchdog unit stopped mid-restart (KillMode=control-group) took the
    job with it. As a systemd service (INVOCATION_ID set) the job runs through `systemd-run
    --scope` (its own cgroup, this process's environment and stdout); elsewhere, as is."""
    from tpwarden.watchdog.actuator import outside_this_unit

    job = ["/opt/tpwarden/venv/bin/python", "-m", "tpwarden.watchdog.restart_job", "a.json", "w"]
    wrapped = outside_this_unit(job, {"INVOCATION_ID": "5f1e"}, "/usr/bin/systemd-run")
    assert wrapped[:4] == ["/usr/bin/systemd-run", "--scope", "--quiet", "--collect"]
    assert wrapped[4].startswith("--unit=tpwarden-restart-")
    assert wrapped[wrapped.index("--") + 1 :] == job
    assert outside_this_unit(job, {}, "/usr/bin/systemd-run") == job  # not a systemd service
    assert outside_this_unit(job, {"INVOCATION_ID": "5f1e"}, None) == job  # no systemd-run
    other = outside_this_unit(job, {"INVOCATION_ID": "5f1e"}, "/usr/bin/systemd-run")
    assert other[4] != wrapped[4]  # one scope per restart
