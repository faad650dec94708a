"""Provisioning verifies host keys (issue 29): the environment ansible-runner gives Ansible, and
the ssh argv Ansible builds from it, captured by a stand-in ssh executable (no host is reached).

ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless its caller sets it; Ansible then puts
`-o StrictHostKeyChecking=no` first in the ssh argv, and ssh keeps the first value it reads, so
the inventory's own `StrictHostKeyChecking=yes` would not count.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.provision import gateway as prov

ansible_runner = pytest.importorskip("ansible_runner")  # the `control` extra

ROOT = Path(__file__).resolve().parents[2]


def _prepared(tmp_path: Path) -> prov.PreparedRun:
    req = prov.ProvisionRequest(
        inventory=ROOT / "inventory.example.yml", state_root=tmp_path / "state", ident="hk"
    )
    run = prov.prepare(req)
    run.private_data_dir.mkdir(parents=True)
    return run


def test_runner_env_turns_host_key_checking_on_even_if_the_shell_turned_it_off(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")  # the operator's shell
    run = _prepared(tmp_path)
    runner = ansible_runner.interface.init_runner(**run.kwargs)  # builds env + argv, runs nothing
    assert runner.config.env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert runner.config.command[0] == "ansible-playbook"
    assert not any("StrictHostKeyChecking" in a for a in runner.config.command)


def test_the_ssh_argv_ansible_builds_has_no_strict_host_key_checking_no(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    run = _prepared(tmp_path)
    argv_file = tmp_path / "argv"
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> {argv_file}\nexit 255\n")
    fake_ssh.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "ping.yml").write_text(
        "- hosts: node2\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"
    )
    private = tmp_path / "private"
    private.mkdir()
    kwargs = {
        **run.kwargs,
        "project_dir": str(project),
        "playbook": "ping.yml",
        "private_data_dir": str(private),
        "envvars": {
            **run.kwargs["envvars"],
            "ANSIBLE_SSH_EXECUTABLE": str(fake_ssh),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
        },
    }
    result = ansible_runner.run(**kwargs)
    assert result.status == "failed"  # the stand-in ssh answers 255: node2 is unreachable
    argv = argv_file.read_text().splitlines()
    assert "10.0.0.12" in argv  # Ansible did call ssh for node2 ...
    assert "StrictHostKeyChecking=no" not in argv  # ... without turning checking off
    assert not any(a.lower().startswith("stricthostkeychecking=no") for a in argv)
