"""Nodes never need Ansible: the resolved copy provisioning writes means the same spec."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.inventory import load as inventory
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.inventory.plain import export_resolved

HERE = Path(__file__).parent / "inventories"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("source", ["example-dir", "example-ini/hosts.ini", "example-bastion.yml"])
def test_resolved_copy_reads_without_ansible_to_the_same_spec(source, tmp_path, monkeypatch):
    spec = load_inventory(HERE / source)
    copy = tmp_path / "inventory.yml"
    copy.write_text(export_resolved(spec))
    monkeypatch.setattr(inventory, "_have_ansible", lambda: False)
    again = load_inventory(copy)
    assert again.config_hash() == spec.config_hash()
    assert again.nodes == spec.nodes
    assert again.settings == spec.settings


def test_without_ansible_a_directory_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(inventory, "_have_ansible", lambda: False)
    with pytest.raises(Exception, match="tpwarden\\[control\\]"):
        load_inventory(HERE / "example-dir")
