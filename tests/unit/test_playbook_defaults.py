"""Provisioning defaults are role defaults: the inventory's values win (Ansible's precedence,
computed by Ansible on the real playbooks, no node contacted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"


def _play_vars(playbook: str, inventory: Path, host: str = "node2") -> dict:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook import Playbook
    from ansible.plugins.loader import init_plugin_loader
    from ansible.vars.manager import VariableManager

    init_plugin_loader([])  # what ansible-playbook does before it reads a play
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(inventory)])
    vm = VariableManager(loader=loader, inventory=inv)
    play = Playbook.load(str(PLAYBOOKS / playbook), variable_manager=vm, loader=loader).get_plays()[
        0
    ]
    return vm.get_vars(play=play, host=inv.get_host(host), include_hostvars=False)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    text = (ROOT / "inventory.example.yml").read_text()
    path = tmp_path / "inv.yml"
    path.write_text(
        text.replace(
            "    ansible_user: root\n",
            "    ansible_user: root\n    tpwarden_prefix: /srv/tpwarden\n",
        )
    )
    return path


@pytest.mark.parametrize("playbook", ["site.yml", "remove.yml"])
def test_inventory_value_outranks_the_playbook_default(playbook, inventory):
    assert _play_vars(playbook, inventory)["tpwarden_prefix"] == "/srv/tpwarden"


@pytest.mark.parametrize("playbook", ["site.yml", "remove.yml"])
def test_default_applies_when_the_inventory_is_silent(playbook):
    values = _play_vars(playbook, ROOT / "inventory.example.yml")
    assert values["tpwarden_prefix"] == "/opt/tpwarden"
    assert values["tpwarden_min_free_bytes"] == 1073741824


def test_no_play_level_vars_files():
    """vars_files sit above inventory vars in Ansible's precedence: none may hold defaults."""
    for playbook in PLAYBOOKS.glob("*.yml"):
        assert "vars_files" not in playbook.read_text(), playbook


@pytest.mark.parametrize("playbook", ["site.yml", "remove.yml"])
def test_playbooks_pass_syntax_check(playbook):
    binary = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    assert binary, "ansible-core must be installed next to this Python"
    subprocess.run(
        [binary, "--syntax-check", "-i", str(ROOT / "inventory.example.yml"), playbook],
        cwd=PLAYBOOKS,
        check=True,
        capture_output=True,
        timeout=120,
    )
