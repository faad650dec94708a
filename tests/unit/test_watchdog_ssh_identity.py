"""Issue 15 (1): the provisioned watchdog reaches the nodes with its own SSH key and known_hosts,
not the control machine's that the applied plan names; what runs (config hash, the plan a
restart records) does not change with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import paramiko
import pytest
from tpwarden.cluster.control.applied import AppliedPlan, plan_for, write_local
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget, connect
from tpwarden.cluster.ssh.identity import SshIdentity, with_ssh_identity
from tpwarden.watchdog import actuator as actuator_mod
from tpwarden.watchdog import restart_job as restart_job_mod
from tpwarden.watchdog import wiring

from .fake_controller import FakeController

ROOT = Path(__file__).resolve().parents[2]
KEY = "/etc/tpwarden/watchdog/id_ed25519"
KNOWN = "/etc/tpwarden/watchdog/known_hosts"


def _inventory(tmp_path: Path, port: int = 8000, extra_vars: str = "") -> Path:
    text = (ROOT / "inventory.example.yml").read_text().replace("port: 8000", f"port: {port}", 1)
    text = text.replace(
        "    ansible_user: root\n",
        "    ansible_user: root\n"
        "    ansible_ssh_private_key_file: /home/ops/.ssh/tpwarden_ed25519\n"
        "    ansible_ssh_common_args: -o UserKnownHostsFile=/home/ops/.ssh/kh"
        " -o ProxyJump=ops@bastion:2222\n" + extra_vars,
    )
    path = tmp_path / f"inventory-{port}.yml"
    path.write_text(text)
    return path


def _applied(tmp_path: Path, port: int = 8000, action: str = "up") -> tuple[AppliedPlan, Path]:
    plan = plan_for(load_inventory(_inventory(tmp_path, port)), action, "ops@control", 1.0)
    assert plan is not None
    path = tmp_path / "wd" / "applied.json"
    write_local(plan, [str(path)])
    return plan, path


# --- the pure override --------------------------------------------------------------------------


def test_identity_replaces_every_nodes_key_and_the_known_hosts(tmp_path: Path) -> None:
    spec = load_inventory(_inventory(tmp_path))
    assert {n.ssh_key_file for n in spec.nodes} == {"/home/ops/.ssh/tpwarden_ed25519"}
    mine = with_ssh_identity(spec, KEY, KNOWN)
    assert [n.ssh_key_file for n in mine.nodes] == [KEY] * len(spec.nodes)
    assert mine.ssh.known_hosts == KNOWN and mine.settings.ssh.known_hosts == KNOWN
    # everything else about the nodes is the plan's: address, port, user, route
    strip = [(n.name, n.ssh_host, n.ssh_port, n.ssh_user, n.ssh_args) for n in spec.nodes]
    assert [(n.name, n.ssh_host, n.ssh_port, n.ssh_user, n.ssh_args) for n in mine.nodes] == strip
    # the watcher's deployment, not the server's config: same hash, the input untouched
    assert mine.config_hash() == spec.config_hash()
    assert spec.nodes[0].ssh_key_file == "/home/ops/.ssh/tpwarden_ed25519"
    assert spec.ssh.known_hosts is None


def test_no_identity_is_the_spec_itself_and_each_part_alone(tmp_path: Path) -> None:
    spec = load_inventory(_inventory(tmp_path))
    assert with_ssh_identity(spec, None, None) is spec
    assert SshIdentity().apply(spec) is spec and SshIdentity().argv() == []
    key_only = with_ssh_identity(spec, KEY, None)
    assert key_only.ssh == spec.ssh and key_only.nodes[1].ssh_key_file == KEY
    known_only = with_ssh_identity(spec, None, KNOWN)
    assert known_only.nodes == spec.nodes and known_only.ssh.known_hosts == KNOWN
    assert SshIdentity(KEY, KNOWN).argv() == ["--ssh-key", KEY, "--known-hosts", KNOWN]


class _Transport:
    def open_channel(self, *a: Any, **kw: Any) -> str:
        return "channel"

    def set_keepalive(self, interval: int) -> None:
        pass


class _Recorder:
    """A paramiko.SSHClient stand-in: records what each connection would use."""

    seen: list[dict[str, Any]] = []

    def get_host_keys(self) -> paramiko.HostKeys:
        return paramiko.HostKeys()

    def set_missing_host_key_policy(self, policy: Any) -> None:
        self.known_hosts = policy.known.path  # the known_hosts file the keys were read from

    def connect(self, host: str, **kw: Any) -> None:
        _Recorder.seen.append(
            {"host": host, "port": kw["port"], "user": kw["username"], "key": kw["key_filename"],
             "known_hosts": self.known_hosts, "look_for_keys": kw["look_for_keys"]}
        )  # fmt: skip

    def get_transport(self) -> _Transport:
        return _Transport()

    def close(self) -> None:
        pass


def test_every_hop_of_the_route_uses_the_watchdogs_key_and_known_hosts(
    tmp_path: Path, monkeypatch
) -> None:
    # The plan's route goes through ops@bastion:2222 with the control machine's key and
    # known_hosts; on the watchdog host (no ssh_config entry for the bastion) both hops use
    # the watchdog's key and its known_hosts, never ~/.ssh keys looked up at random.
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config here
    (tmp_path / "kh").write_text("")
    spec = with_ssh_identity(load_inventory(_inventory(tmp_path)), KEY, str(tmp_path / "kh"))
    _Recorder.seen = []
    target = SshTarget.from_node(spec.node("node2"))
    client, jumps = connect(target, SshOptions.from_spec(spec.ssh), _Recorder)
    jump, node = _Recorder.seen
    assert (jump["host"], jump["port"], jump["user"]) == ("bastion", 2222, "ops")
    assert (node["host"], node["port"], node["user"]) == ("10.0.0.12", 22, "root")
    for hop in (jump, node):
        assert hop["key"] == KEY and hop["known_hosts"] == str(tmp_path / "kh")
        assert hop["look_for_keys"] is False


# --- the watchdog uses it -----------------------------------------------------------------------


def test_watched_plan_gives_the_identity_to_the_actuator_and_to_every_new_plan(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "k")
    plan, path = _applied(tmp_path)
    identity = SshIdentity(KEY, KNOWN)
    cfg, actuator, follower = wiring.watched_plan(
        tmp_path / "absent.yml", str(path), str(tmp_path / "wd"), identity
    )
    try:
        assert cfg.config_hash == plan.config_hash  # the hash of what runs, unchanged
        assert actuator.identity == identity and actuator.applied_path == str(path)
        assert {n.ssh_key_file for n in actuator.spec.nodes} == {KEY}
        assert actuator.spec.ssh.known_hosts == KNOWN
        assert actuator.controller.pool.options.known_hosts == KNOWN
    finally:
        actuator.close()
    newer, _ = _applied(tmp_path, port=8001, action="rollout")  # a rollout records a new plan
    change = follower()
    assert change is not None and change.config.probe_url.endswith(":8001")
    try:
        assert change.config.config_hash == newer.config_hash
        assert change.actuator.identity == identity
        assert {n.ssh_key_file for n in change.actuator.spec.nodes} == {KEY}
        assert change.actuator.spec.ssh.known_hosts == KNOWN
    finally:
        change.actuator.close()


def test_run_options_reach_watched_plan(tmp_path: Path, monkeypatch) -> None:
    from tpwarden.cluster.cli import app
    from typer.testing import CliRunner

    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    key.write_text("k")
    known.write_text("")
    seen: dict[str, Any] = {}

    def stop(inventory: Any, applied: Any, state_dir: Any, identity: SshIdentity) -> Any:
        seen.update(applied=applied, state_dir=state_dir, identity=identity)
        raise ConfigError("stop here")

    # `watchdog run` imports watched_plan when it runs (not at the CLI's start: issue 30)
    monkeypatch.setattr("tpwarden.watchdog.wiring.watched_plan", stop)
    argv = ["watchdog", "run", "--applied", str(tmp_path / "a.json"), "--state-dir",
            str(tmp_path), "--ssh-key", str(key), "--known-hosts", str(known)]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert "stop here" in result.output, result.output
    assert seen["identity"] == SshIdentity(str(key), str(known))
    missing = CliRunner().invoke(app, [*argv[:-1], str(tmp_path / "nope")])
    assert missing.exit_code == 2  # a usage error: the key file must exist
    assert seen["identity"] == SshIdentity(str(key), str(known))  # not called again


def test_the_restart_job_is_given_the_same_identity(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "k")
    _, path = _applied(tmp_path)
    spawned: list[list[str]] = []

    class Proc:
        pid, returncode = 1, 0

        def __init__(self, argv: list[str], **kw: Any) -> None:
            spawned.append(argv)

        def communicate(self, timeout: float) -> tuple[str, str]:
            return json.dumps({"ok": True}) + "\n", ""

    actuator = actuator_mod.build_actuator(
        load_inventory(_inventory(tmp_path)), None, str(path), SshIdentity(KEY, KNOWN), spawn=Proc
    )
    try:
        actuator.restart("hang", {})
    finally:
        actuator.close()
    (argv,) = spawned
    assert argv[:3] == [sys.executable, "-m", "tpwarden.watchdog.restart_job"]
    assert argv[3:] == [
        str(path), "watchdog: hang", "--ssh-key", KEY, "--known-hosts", KNOWN,
    ]  # fmt: skip


@pytest.mark.parametrize("with_state_dir", [False, True])
def test_restart_job_replays_the_plan_with_the_identity_and_records_the_plan_as_is(
    tmp_path: Path, capsys, with_state_dir: bool
) -> None:
    plan, path = _applied(tmp_path)
    control = FakeController.factory(restart_error=RuntimeError("stop here"))
    argv = [str(path), "watchdog: hang"] + (["/state"] if with_state_dir else [])
    assert restart_job_mod.main([*argv, "--ssh-key", KEY, "--known-hosts", KNOWN], control) == 2
    (ctl,) = control.made
    seen = {"spec": ctl.spec, "state_dir": ctl.kw["state_dir"], "source": ctl.kw["applied_source"]}
    spec = seen["spec"]
    assert {n.ssh_key_file for n in spec.nodes} == {KEY} and spec.ssh.known_hosts == KNOWN
    assert spec.config_hash() == plan.config_hash
    assert seen["state_dir"] == ("/state" if with_state_dir else None)
    # the record a restart writes is the plan as applied from the control machine
    assert seen["source"] == (plan.inventory_text, plan.inventory_path)
    assert "stop here" in capsys.readouterr().out
