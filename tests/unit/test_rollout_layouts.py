"""Rollouts on every inventory layout Ansible reads (issue 28, items 5 and 6): the value changes in
the file Ansible took it from, only that file changes, the new value loads, a rollback restores
every file byte for byte, and what cannot be edited is refused with file:line, never a traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.rollout.edit import argv_diff, parse_set
from tpwarden.cluster.rollout.layout import plan_edit
from tpwarden.cluster.rollout.sequence import (
    RestartOutcome,
    Rollout,
    RolloutPorts,
    RolloutStore,
    rollback_to,
)
from typer.testing import CliRunner

from tests.unit.test_rollout import FakeHolder

HERE = Path(__file__).parent / "inventories"
PASSWORD = HERE / "vault-password.txt"
# layout -> (what to copy, the inventory to name with -i, the file holding the settings)
LAYOUTS = {
    "yaml": ("good.yml", "good.yml", "good.yml"),
    "ini": ("example-ini", "example-ini/hosts.ini", "example-ini/group_vars/all.yml"),
    "dir": ("example-dir", "example-dir", "example-dir/group_vars/all/tpwarden.yml"),
    "vault": ("example-vault", "example-vault/hosts.yml", "example-vault/group_vars/all.yml"),
}
DRAFTER_ON = (
    "drafter={method: dflash, path: /models/GLM-5.3-Flash-DFlash2, num_speculative_tokens: 3}"
)


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request, tmp_path, monkeypatch):
    """(inventory path, settings file) in a private copy of one example layout."""
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    copy, inventory, settings = LAYOUTS[request.param]
    src, dst = HERE / copy, tmp_path / "inv" / copy
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.parent.mkdir(parents=True)
        shutil.copy(src, dst)
    return tmp_path / "inv" / inventory, tmp_path / "inv" / settings


class FakeCluster:
    """Comes up on any config; remembers which ones (by hash) it was restarted on."""

    def __init__(self):
        self.restarts = []

    def preflight(self, spec):
        return []

    def restart(self, spec, why, timeout_s):
        self.restarts.append(spec.config_hash())
        return RestartOutcome(True)

    def probe(self, spec):
        return (self.restarts[-1] == spec.config_hash(), "probe")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _rollout(tmp_path, cluster):
    ports = RolloutPorts(cluster, FakeHolder(), None, clock=lambda: 1_767_000_000.0)
    return Rollout(RolloutStore(tmp_path / "store"), ports)


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    assert set(before) == set(after)
    return [name for name in before if before[name] != after[name]]


def test_dry_run_shows_the_diff_of_the_file_the_value_came_from(layout, tmp_path):
    inventory, settings = layout
    before = _snapshot(tmp_path / "inv")
    result = CliRunner().invoke(
        app,
        ["rollout", "-i", str(inventory), "--set", "drafter.num_speculative_tokens=5",
         "--dry-run", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["files"] == [str(settings)]
    assert f"--- a/{settings}\n+++ b/{settings}\n" in doc["diff"]
    lines = doc["diff"].splitlines()
    changed = [ln for ln in lines if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert [ln[0] + ln[1:].strip() for ln in changed] == [
        "-num_speculative_tokens: 3",
        "+num_speculative_tokens: 5",
    ]
    assert doc["record"]["summary"] == ["drafter: dflash k=3 -> dflash k=5"]
    assert _snapshot(tmp_path / "inv") == before  # a dry run writes nothing


def test_apply_edits_only_that_file_and_rollback_restores_every_byte(layout, tmp_path):
    inventory, settings = layout
    root = tmp_path / "inv"
    before = _snapshot(root)
    ro = _rollout(tmp_path, FakeCluster())
    record = ro.prepare(str(inventory), [parse_set("drafter.num_speculative_tokens=5")], [])
    assert ro.run(record, []).step == "done"
    after = _snapshot(root)
    assert _changed(before, after) == [str(settings.relative_to(root))]
    assert load_inventory(inventory).serving.drafter.num_speculative_tokens == 5
    back = rollback_to(ro.store, ro.ports, str(inventory), None)
    assert back.step == "done"
    assert _snapshot(root) == before
    assert load_inventory(inventory).config_hash() == record.old_hash


def test_drafter_off_and_back_on(layout, tmp_path):
    """The field report's no-drafter baseline: drafter=null, then the same drafter again."""
    inventory, settings = layout
    original = load_inventory(inventory)
    ro = _rollout(tmp_path, FakeCluster())
    off = ro.run(ro.prepare(str(inventory), [parse_set("drafter=null")], []), [])
    assert off.step == "done" and off.summary == ["drafter: dflash k=3 -> off"]
    spec = load_inventory(inventory)
    assert spec.serving.drafter is None
    assert all("--speculative-config" not in c.vllm_argv for c in plan_cluster(spec).containers)
    removed = [ln for ln in argv_diff(original, spec)["node1"] if ln.startswith("-")]
    assert removed[0] == "---speculative-config" and len(removed) == 2
    assert "  drafter: null\n" in settings.read_text()
    on = ro.run(ro.prepare(str(inventory), [parse_set(DRAFTER_ON)], []), [])
    assert on.step == "done" and on.summary == ["drafter: off -> dflash k=3"]
    assert load_inventory(inventory).config_hash() == original.config_hash()


def test_drafter_back_on_field_by_field(layout, tmp_path):
    inventory, _ = layout
    original = load_inventory(inventory).config_hash()
    ro = _rollout(tmp_path, FakeCluster())
    ro.run(ro.prepare(str(inventory), [parse_set("drafter=null")], []), [])
    fields = [
        "drafter.method=dflash",
        "drafter.path=/models/GLM-5.3-Flash-DFlash2",
        "drafter.num_speculative_tokens=3",
    ]
    record = ro.prepare(str(inventory), [parse_set(f) for f in fields], [])
    assert ro.run(record, []).step == "done"
    assert load_inventory(inventory).config_hash() == original


def test_extra_speculative_keys_roll_out(layout, tmp_path):
    inventory, _ = layout
    ro = _rollout(tmp_path, FakeCluster())
    record = ro.prepare(
        str(inventory), [parse_set("drafter.extra.draft_tensor_parallel_size=1")], []
    )
    assert record.summary == ["drafter.extra.draft_tensor_parallel_size: (unset) -> 1"]
    assert record.new_hash != record.old_hash
    assert ro.run(record, []).step == "done"
    assert load_inventory(inventory).serving.drafter.extra == {"draft_tensor_parallel_size": 1}


def test_a_vaulted_value_is_refused_with_its_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    shutil.copytree(HERE / "example-vault", tmp_path / "v")
    inventory = str(tmp_path / "v" / "hosts.yml")
    for item in ("model.served_name=other", "model={path: /m, served_name: x}"):
        with pytest.raises(ConfigError) as info:
            plan_edit(inventory, [parse_set(item)])
        assert info.value.file == str(tmp_path / "v" / "group_vars" / "all.yml")
        assert info.value.line == 7 and "vault-encrypted" in info.value.message
        assert "does not re-encrypt" in info.value.hint


def test_a_vault_encrypted_file_is_refused(tmp_path, monkeypatch):
    from ansible.parsing.vault import VaultLib, VaultSecret

    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    shutil.copytree(HERE / "example-ini", tmp_path / "i")
    all_yml = tmp_path / "i" / "group_vars" / "all.yml"
    secret = VaultSecret(PASSWORD.read_bytes().strip())
    all_yml.write_bytes(VaultLib([("default", secret)]).encrypt(all_yml.read_bytes(), secret))
    inventory = str(tmp_path / "i" / "hosts.ini")
    assert load_inventory(inventory).serving.drafter.num_speculative_tokens == 3
    with pytest.raises(ConfigError) as info:
        plan_edit(inventory, [parse_set("drafter.num_speculative_tokens=5")])
    assert (info.value.file, info.value.line) == (str(all_yml), 1)
    assert "whole file is vault-encrypted" in info.value.message


def test_settings_in_an_ini_file_are_refused_not_a_traceback(tmp_path, monkeypatch):
    # Ansible reads a Python literal in [all:vars] as a mapping; tpwarden does not edit INI.
    settings = load_inventory(HERE / "good.yml").settings.model_dump(exclude_unset=True)
    hosts = (HERE / "example-ini" / "hosts.ini").read_text()
    ini = f"{hosts}\n[all:vars]\nansible_user=root\ntpwarden={settings!r}\n"
    (tmp_path / "hosts.ini").write_text(ini)
    inventory = str(tmp_path / "hosts.ini")
    load_inventory(inventory)
    result = CliRunner().invoke(
        app, ["rollout", "-i", inventory, "--set", "drafter.num_speculative_tokens=5", "--dry-run"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{inventory}:" in result.output and "INI inventory" in result.output


def test_a_bad_value_names_the_real_file_and_line(layout, tmp_path):
    inventory, settings = layout
    with pytest.raises(ConfigError) as info:
        _rollout(tmp_path, FakeCluster()).prepare(
            str(inventory), [parse_set("drafter.num_speculative_tokens=99")], []
        )
    assert info.value.file == str(settings) and info.value.line is not None
    assert "tpwarden-rollout-" not in str(info.value)


def test_a_revision_from_before_multi_file_revisions_still_rolls_back(tmp_path):
    """Revisions used to be the single inventory file's text (revisions/<id>.yml)."""
    inventory = tmp_path / "inv.yml"
    shutil.copy(HERE / "good.yml", inventory)
    store = RolloutStore(tmp_path / "store")
    store.revisions.mkdir(parents=True)
    old = (
        (HERE / "good.yml")
        .read_text()
        .replace("num_speculative_tokens: 3", "num_speculative_tokens: 6")
    )
    (store.revisions / "0123456789.yml").write_text(old)
    assert store.revision_files("0123456789", str(inventory)) == {"inv.yml": old}
    ports = RolloutPorts(FakeCluster(), FakeHolder(), None, clock=lambda: 1_767_000_000.0)
    assert rollback_to(store, ports, str(inventory), "0123456789").step == "done"
    assert inventory.read_text() == old
    with pytest.raises(ConfigError, match="no config revision"):
        store.revision_files("feedfacefe", str(inventory))
