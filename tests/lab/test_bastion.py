"""The lab reached through a bastion: node1 is the jump host for node2-4 (ProxyJump from the
inventory, as Ansible would use it), and `status` and `up` work through it."""

from __future__ import annotations

import os

import pytest
import yaml
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.status_model import Verdict
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab.paths import HEAD

from tests.lab.lane import node_ip

pytestmark = pytest.mark.lab


def test_status_and_up_through_node1_as_bastion(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_API_KEY", os.environ.get("TPWARDEN_API_KEY", "lab-key"))
    doc = yaml.safe_load(lab.inventory.read_text())
    common = doc["all"]["vars"]["ansible_ssh_common_args"]
    workers = doc["all"]["children"]["workers"]
    workers["vars"] = {"ansible_ssh_common_args": f"{common} -o ProxyJump=root@{node_ip(HEAD)}:22"}
    inventory = tmp_path / "bastion.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_inventory(inventory)
    assert spec.config_hash() == load_inventory(lab.inventory).config_hash()
    with Controller(spec, state_dir=tmp_path / "state", node_timeout_s=10) as ctl:
        try:
            st = ctl.status(timeout_s=10)
            assert all(n.reachable for n in st.nodes), st.notes
            for worker in spec.workers:  # each worker's connection went through node1
                jumps = ctl.pool.session(worker)._jumps
                assert [j.get_transport().getpeername()[0] for j in jumps] == [node_ip(HEAD)]
            result = ctl.up(timeout_s=300)
            assert result.ok, (result.outcomes, result.boot and result.boot.reason)
            assert ctl.probe()[0]
            assert ctl.status().verdict is Verdict.HEALTHY
        finally:
            ctl.down()
