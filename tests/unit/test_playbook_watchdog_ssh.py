"""The watchdog's SSH identity tasks, run by real Ansible on this machine (connection local, every
path under tmp_path, /etc/ssh only read): key made once, authorized on every node, known_hosts
from the nodes' own host keys keyed as the watchdog connects, a second run changes nothing,
and a deleted key is replaced (rotation) without a second authorized line."""

from __future__ import annotations

import base64
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from tpwarden.cluster.node_zipapp import COLLECTOR, COLLECTOR_FILE, build_node_zipapp
from tpwarden.node.ssh_gate import load_config

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
HOST_KEYS = sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub"))
VENV = str(Path(sys.executable).parent.parent)  # this tpwarden's venv stands for the nodes'

pytestmark = pytest.mark.skipif(not HOST_KEYS, reason="this machine has no SSH host keys")


def _setup(tmp_path: Path) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "head": {"hosts": {"node1": {**local, "ansible_host": "127.0.0.1"}}},
                "workers": {
                    "hosts": {"node2": {**local, "ansible_host": "127.0.0.2", "ansible_port": 2222}}
                },
            },
            "vars": {
                "ansible_user": "root",
                "tpwarden_watchdog_ssh_dir": str(tmp_path / "wd"),
                "tpwarden_watchdog_key_options": "restrict,port-forwarding",
                "tpwarden_venv": VENV,
                "tpwarden_watchdog_ssh_gate": True,
                "tpwarden_watchdog_ssh_gate_config": str(tmp_path / "ssh-gate.json"),
                "tpwarden_watchdog_ssh_from": "",
                "tpwarden_watchdog_authorized_keys": str(tmp_path)
                + "/{{ inventory_hostname }}/authorized_keys",
            },
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [
        {
            "name": "watchdog SSH identity",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"ansible.builtin.import_role": {"name": "units", "tasks_from": "watchdog_ssh"}}
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    return tmp_path / "play.yml"


def _run(tmp_path: Path, *extra: str) -> dict[str, int]:
    binary = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    assert binary, "ansible-core must be installed next to this Python"
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    done = subprocess.run(
        [binary, "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), *extra],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = dict(re.findall(r"^(node\d)\s+:.*?changed=(\d+)", done.stdout, re.MULTILINE))
    assert set(recap) == {"node1", "node2"}, done.stdout[-2000:]
    return {host: int(n) for host, n in recap.items()}


def _options(tmp_path: Path) -> str:
    """The forced command (the SSH gate, run by the node's venv) before the other options."""
    gate = f"{VENV}/bin/python -I -m tpwarden.node.ssh_gate {tmp_path / 'ssh-gate.json'}"
    return f'command="{gate}",restrict,port-forwarding'


def _authorized(tmp_path: Path, node: str) -> list[str]:
    lines = (tmp_path / node / "authorized_keys").read_text().splitlines()
    return [ln for ln in lines if "tpwarden-watchdog@" in ln]


def test_identity_is_made_once_authorized_everywhere_and_known_hosts_is_the_nodes_keys(
    tmp_path: Path,
) -> None:
    _setup(tmp_path)
    first = _run(tmp_path)
    assert first["node1"] > 0 and first["node2"] > 0
    wd = tmp_path / "wd"
    assert stat.S_IMODE(wd.stat().st_mode) == 0o700
    assert stat.S_IMODE((wd / "id_ed25519").stat().st_mode) == 0o600
    assert stat.S_IMODE((wd / "known_hosts").stat().st_mode) == 0o600
    pub = (wd / "id_ed25519.pub").read_text().strip()
    assert pub.startswith("ssh-ed25519 ") and pub.endswith(" tpwarden-watchdog@node1")
    for node in ("node1", "node2"):
        assert _authorized(tmp_path, node) == [f"{_options(tmp_path)} {pub}"]
        path = tmp_path / node / "authorized_keys"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the gate's config: the sha256 of the collector this tpwarden builds, as the watchdog does
    with tempfile.TemporaryDirectory() as tmp:
        built = build_node_zipapp(COLLECTOR, Path(tmp) / COLLECTOR_FILE)
    gate = json.loads((tmp_path / "ssh-gate.json").read_text())
    assert gate == {"collector_sha256": [built.sha256]}
    assert load_config(str(tmp_path / "ssh-gate.json")).collector_sha256 == {built.sha256}
    # every node's host keys as read from the node, under the address the watchdog connects to
    keys = [" ".join(Path(p).read_text().split()[:2]) for p in HOST_KEYS]
    entries = [ln for ln in (wd / "known_hosts").read_text().splitlines() if ln and ln[0] != "#"]
    assert entries == [f"127.0.0.1 {k}" for k in keys] + [f"[127.0.0.2]:2222 {k}" for k in keys]
    for line in entries:  # each one a valid known_hosts line
        base64.b64decode(line.split()[2], validate=True)

    assert _run(tmp_path) == {"node1": 0, "node2": 0}  # idempotent
    assert _run(tmp_path, "--check") == {"node1": 0, "node2": 0}

    # rotation: delete the pair, provision again -> a new key, still one line per node
    (wd / "id_ed25519").unlink()
    (wd / "id_ed25519.pub").unlink()
    _run(tmp_path)
    new = (wd / "id_ed25519.pub").read_text().strip()
    assert new != pub
    for node in ("node1", "node2"):
        assert _authorized(tmp_path, node) == [f"{_options(tmp_path)} {new}"]


def test_from_is_one_more_comma_separated_option(tmp_path: Path) -> None:
    """sshd reads the options as one field: `from=` joins the others with a comma, no space."""
    _setup(tmp_path)
    inv = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    inv["all"]["vars"]["tpwarden_watchdog_ssh_from"] = "10.0.0.5,127.0.0.0/8"
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    _run(tmp_path)
    pub = (tmp_path / "wd" / "id_ed25519.pub").read_text().strip()
    expected = f'{_options(tmp_path)},from="10.0.0.5,127.0.0.0/8" {pub}'
    assert _authorized(tmp_path, "node2") == [expected]


def test_check_mode_on_a_node_without_tpwarden_yet_passes_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """`provision --check` before the first install: no venv to read the collector's digest
    from; nothing is written (the gate's config included) and nothing fails."""
    _setup(tmp_path)
    inv = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    inv["all"]["vars"]["tpwarden_venv"] = str(tmp_path / "no-venv-yet")
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    _run(tmp_path, "--check")
    assert not (tmp_path / "ssh-gate.json").exists() and not (tmp_path / "wd").exists()


def test_no_identity_when_the_watchdog_runs_on_no_node(tmp_path: Path) -> None:
    _setup(tmp_path)
    inv = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    inv["all"]["vars"]["tpwarden_watchdog_host"] = "control"  # as the lab inventory does
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    assert _run(tmp_path) == {"node1": 0, "node2": 0}
    assert not (tmp_path / "wd").exists() and not (tmp_path / "node1").exists()
