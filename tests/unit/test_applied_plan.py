"""Issue 15 (1): the applied plan is the truth about what runs; the watchdog follows it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from tpwarden.cluster.control import controller as control_mod
from tpwarden.cluster.control.applied import (
    AppliedPlan,
    plan_for,
    read_applied,
    revision,
    write_local,
)
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.inventory.plain import export_resolved
from tpwarden.cluster.vllm.probe import ProbeResult
from tpwarden.watchdog import restart_job as restart_job_mod
from tpwarden.watchdog import wiring
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import PlanChange
from tpwarden.watchdog.plan import PlanFollower

from .fake_controller import FakeController
from .test_watchdog_daemon import OK, REFUSED, FakeClock, make

ROOT = Path(__file__).resolve().parents[2]


def _inventory(tmp_path: Path, port: int = 8000, name: str = "inventory.yml") -> Path:
    text = (ROOT / "inventory.example.yml").read_text()
    path = tmp_path / name
    path.write_text(text.replace("port: 8000", f"port: {port}", 1))
    return path


def _plan(path: Path, action: str = "up") -> AppliedPlan:
    plan = plan_for(load_inventory(path), action, "ops", 1.0)
    assert plan is not None
    return plan


def test_up_records_the_applied_plan_here_and_on_the_head(tmp_path: Path, monkeypatch) -> None:
    inv = _inventory(tmp_path)
    spec = load_inventory(inv)
    heads: list[AppliedPlan] = []
    monkeypatch.setattr(control_mod, "write_head", lambda plan, s, d: heads.append(plan))
    with Controller(spec, state_dir=tmp_path / "state") as ctl:
        plan = ctl.record_applied("restart", "ops")
    assert plan is not None and heads == [plan]
    saved = read_applied(tmp_path / "state" / "applied" / f"{spec.name}.json")
    assert saved == plan and saved.config_hash == spec.config_hash()
    assert saved.inventory_revision == revision(export_resolved(spec)) and saved.action == "restart"
    assert saved.spec().config_hash() == spec.config_hash()


def test_the_plan_of_an_inventory_directory_is_recorded_resolved(tmp_path: Path) -> None:
    # group_vars beside the inventory: the applied plan holds the values Ansible resolved, so
    # the watchdog rebuilds the same spec from the record alone
    home = tmp_path / "inv"
    (home / "group_vars").mkdir(parents=True)
    text = (ROOT / "inventory.example.yml").read_text()
    head, _, _ = text.partition("  vars:")
    (home / "hosts.yml").write_text(head)
    spec_all = load_inventory(ROOT / "inventory.example.yml")
    (home / "group_vars" / "all.yml").write_text(
        yaml.safe_dump({"tpwarden": spec_all.settings.model_dump(mode="json")})
    )
    spec = load_inventory(home)
    plan = plan_for(spec, "up", "ops", 1.0)
    assert plan is not None and plan.spec().config_hash() == spec.config_hash()


def test_the_applied_plan_is_read_back_without_ansible(tmp_path: Path) -> None:
    # the watchdog host has no Ansible: reading the record must not need it
    path = tmp_path / "applied.json"
    write_local(_plan(_inventory(tmp_path)), [str(path)])
    code = (
        "import sys; sys.modules['ansible'] = None\n"
        "from tpwarden.cluster.control.applied import read_applied\n"
        f"print(read_applied({str(path)!r}).spec().config_hash())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == load_inventory(_inventory(tmp_path)).config_hash()


def test_a_replayed_plan_is_recorded_as_replayed_not_as_the_edited_file(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(control_mod, "write_head", lambda *a: None)
    inv = _inventory(tmp_path)
    old = _plan(inv)
    inv.write_text(inv.read_text().replace("port: 8000", "port: 8001", 1))  # edited since
    with Controller(
        old.spec(),
        state_dir=tmp_path / "s",
        applied_source=(old.inventory_text, old.inventory_path),
    ) as ctl:
        again = ctl.record_applied("restart", "tpwarden-watchdog")
    assert again is not None and again.config_hash == old.config_hash
    assert again.inventory_revision == old.inventory_revision


def test_restart_job_replays_the_applied_plan_not_the_inventory(tmp_path: Path, capsys) -> None:
    # Reproduction: `rollout --via watchdog` restarted the old k; a later hang booted the old k.
    inv = _inventory(tmp_path)
    applied = _plan(inv)
    inv.write_text(inv.read_text().replace("port: 8000", "port: 8001", 1))  # not applied
    path = tmp_path / "applied.json"
    write_local(applied, [str(path)])
    control = FakeController.factory(restart_error=RuntimeError("stop here"))
    assert restart_job_mod.restart_job(str(path), "watchdog: hang", controller=control) == 2
    (ctl,) = control.made
    seen = {"spec": ctl.spec, "source": ctl.kw["applied_source"]}
    assert seen["spec"].config_hash() == applied.config_hash
    assert seen["spec"].api_base.endswith(":8000")
    assert seen["source"] == (applied.inventory_text, applied.inventory_path)
    assert "stop here" in capsys.readouterr().out


def test_follower_sees_a_new_plan_once(tmp_path: Path) -> None:
    path = tmp_path / "applied.json"
    a = _plan(_inventory(tmp_path, 8000, "a.yml"))
    b = _plan(_inventory(tmp_path, 8001, "b.yml"), action="rollout")
    write_local(a, [str(path)])
    built: list[str] = []

    def build(spec: Any, plan: AppliedPlan) -> tuple[Any, Any, Any]:
        built.append(spec.api_base)
        return (WatchdogConfig(probe_url=spec.api_base, state_dir="x"), "prober", "actuator")

    follow = PlanFollower(str(path), a, build, a.cluster)
    assert follow() is None
    write_local(b, [str(path)])
    change = follow()
    assert change is not None and change.config.probe_url.endswith(":8001")
    assert change.detail["action"] == "rollout" and follow() is None
    assert built == [change.config.probe_url]


class PortProber:
    """The server moved to 8001: probes on the old port are refused."""

    def __init__(self, clock: Any, ok: bool) -> None:
        self.clock, self.ok = clock, ok

    def probe(self) -> ProbeResult:
        self.clock.now += 150
        return OK if self.ok else REFUSED

    def scrape_metrics(self) -> Any:
        from tpwarden.cluster.vllm.probe import MetricsSnapshot

        return MetricsSnapshot(self.clock.now, {"vllm:generation_tokens_total": 1.0})

    def close(self) -> None:
        pass


def test_daemon_follows_a_rollout_to_a_new_port_and_never_restarts_it(tmp_path: Path) -> None:
    # Reproduction: after `rollout --set port=8001` a healthy server was restarted at 12 and
    # 52 minutes (the daemon read its config once), then given up.
    pending: list[PlanChange] = []
    clock = FakeClock()
    old_port = PortProber(clock, ok=True)  # answers, until the server moves to 8001
    wd, prober, act = make(
        tmp_path, clock, prober=old_port, follow=lambda: pending.pop() if pending else None
    )
    wd.tick()
    old_port.ok = False
    new_cfg = WatchdogConfig(
        probe_url="http://127.0.0.1:8001", state_dir="elsewhere", config_hash="new"
    )
    pending.append(PlanChange(new_cfg, PortProber(clock, ok=True), act, {"action": "rollout"}))
    for _ in range(40):
        wd.tick()
    assert act.restarts == []
    assert wd.config.probe_url.endswith(":8001") and wd.config.state_dir == str(tmp_path / "wd")
    ev = [e for e in read_events(wd.config.events_path).events if e["kind"] == "plan_changed"]
    assert len(ev) == 1 and ev[0]["new_hash"] == "new" and ev[0]["action"] == "rollout"
    assert ev[0]["changes"]["probe_url"][1] == "http://127.0.0.1:8001"
    wd.close()


def test_unusable_plan_keeps_the_old_one_and_alerts(tmp_path: Path) -> None:
    out = tmp_path / "alerts.txt"
    import sys

    cmd = (sys.executable, "-c", f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read())")

    def broken() -> PlanChange:
        raise ConfigError("the API key's variable K is not set")

    wd, prober, act = make(tmp_path, alert_command=cmd, follow=broken)
    for _ in range(3):
        wd.tick()
    alerts = [json.loads(x) for x in out.read_text().replace("}{", "}\n{").splitlines()]
    assert [a["category"] for a in alerts] == ["plan_unusable"]
    wd.close()


def test_watchdog_run_watches_the_applied_plan_in_its_own_state_dir(
    tmp_path: Path, monkeypatch
) -> None:
    # An inventory edited after `up` (as the lab tests do for the watchdog's own state dir and
    # port): probe target from the applied plan, state dir and /metrics port from the inventory.
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_API_KEY", "k")
    inv = _inventory(tmp_path, 8000)
    applied = _plan(inv)
    spec = load_inventory(inv)
    write_local(applied, [str(tmp_path / "state" / "applied" / f"{spec.name}.json")])
    text = inv.read_text().replace("port: 8000", "port: 8005", 1)
    inv.write_text(
        text.replace(
            "interval_s: 120",
            f"interval_s: 120\n        metrics_port: 9999\n        state_dir: {tmp_path / 'wd'}",
            1,
        )
    )
    cfg, actuator, follower = wiring.watched_plan(inv, None, None)
    assert cfg.probe_url.endswith(":8000") and cfg.config_hash == applied.config_hash
    assert cfg.state_dir == str(tmp_path / "wd") and cfg.metrics_port == 9999
    assert actuator.applied_path == str(tmp_path / "state" / "applied" / f"{spec.name}.json")
    assert follower() is None
    actuator.close()


def test_a_watchdog_setting_alone_is_recorded_by_an_up_with_nothing_to_start(
    tmp_path: Path, monkeypatch
) -> None:
    """Issue 29 item 2: the serving config is unchanged (nothing to restart), the watchdog's
    interval changed: `up` records the new inventory in the applied plan (here and on the
    head), which the watchdog follows; the same inventory again records nothing."""
    heads: list[AppliedPlan] = []
    monkeypatch.setattr(control_mod, "write_head", lambda plan, s, d: heads.append(plan))
    inv = _inventory(tmp_path)
    first = load_inventory(inv)
    with Controller(first, state_dir=tmp_path / "state") as ctl:
        assert ctl.record_applied_if_changed("up", "ops") is False  # nothing recorded here
        ctl.record_applied("up", "ops")
        assert ctl.record_applied_if_changed("up", "ops") is False  # the same inventory
    inv.write_text(inv.read_text().replace("interval_s: 120", "interval_s: 60", 1))
    second = load_inventory(inv)
    assert second.config_hash() == first.config_hash()  # the server needs no restart
    with Controller(second, state_dir=tmp_path / "state") as ctl:
        assert ctl.record_applied_if_changed("up", "ops") is True
    saved = read_applied(tmp_path / "state" / "applied" / f"{second.name}.json")
    assert saved is not None and saved.spec().watchdog.interval_s == 60
    assert len(heads) == 2 and heads[-1] == saved  # record_applied, then the changed one


def test_the_plan_change_event_names_the_settings_that_moved() -> None:
    from tpwarden.watchdog.config import config_changes

    old = WatchdogConfig(probe_url="http://h:8000", state_dir="x", interval_s=30,
                         alert_command=("notify",), api_key="k1")  # fmt: skip
    new = WatchdogConfig(probe_url="http://h:8000", state_dir="x", interval_s=10,
                         alert_command=("notify", "-u"), api_key="k2",
                         config_hash="other")  # fmt: skip
    assert config_changes(old, new) == {
        "interval_s": [30, 10],
        "alert_command": [["notify"], ["notify", "-u"]],
        "api_key": "changed",  # never the value
    }
    assert config_changes(old, old) == {}
