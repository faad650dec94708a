"""The inventory is validated once; every malformed one fails with file:line, key and a fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory, parse_inventory
from tpwarden.cluster.settings import parse_size

HERE = Path(__file__).parent / "inventories"
ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((HERE / "bad" / "expected.json").read_text())


def test_corpus_is_large_enough():
    assert len(EXPECTED) >= 60
    entries = sorted(p.name for p in (HERE / "bad").iterdir() if p.name != "expected.json")
    assert sorted(EXPECTED) == entries


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_inventory_exact_error(name):
    path = HERE / "bad" / name
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    assert info.value.render() == EXPECTED[name].replace("{file}", str(path))
    assert info.value.exit_code == 2


EXAMPLE_FORMS = ["example-ini", "example-ini/hosts.ini", "example-dir", "example-dir/hosts.yml"]


@pytest.mark.parametrize("form", EXAMPLE_FORMS)
def test_example_in_every_ansible_form_is_the_same_spec(form):
    """INI + group_vars/, a directory with host_vars/ and group_vars/all/ (with templating):
    Ansible resolves them, and they mean exactly what the single YAML file means."""
    single = load_inventory(ROOT / "inventory.example.yml")
    other = load_inventory(HERE / form)
    assert other.config_hash() == single.config_hash()
    assert other.nodes == single.nodes
    assert other.settings == single.settings


def test_vaulted_value_is_decrypted_with_the_ansible_password_file(monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(HERE / "vault-password.txt"))
    spec = load_inventory(HERE / "example-vault")
    assert spec.serving.model.served_name == "glm-5.3-flash"
    assert spec.config_hash() == load_inventory(ROOT / "inventory.example.yml").config_hash()


def test_alias_bomb_is_refused_in_well_under_a_second():
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases expand"):
        load_inventory(HERE / "bad" / "39-alias-bomb.yml")
    assert time.perf_counter() - start < 0.5


def test_oversized_file_is_refused_before_parsing(tmp_path):
    big = tmp_path / "inv.yml"
    big.write_text((HERE / "good.yml").read_text() + "#" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="more than an inventory needs"):
        load_inventory(big)


def test_relative_inventory_path_is_named_as_given(monkeypatch):
    monkeypatch.chdir(HERE)
    with pytest.raises(ConfigError) as info:
        load_inventory("bad/64-tpwarden-in-host-vars")
    assert info.value.file == os.path.join("bad/64-tpwarden-in-host-vars", "host_vars/node2.yml")


def test_parse_inventory_text_uses_group_vars_beside_the_file():
    """Rollout validates a revision's text: the group_vars beside the file still apply."""
    path = HERE / "example-dir" / "hosts.yml"
    spec = parse_inventory(path.read_text(), str(path))
    assert spec.nodes[3].ssh_host == "10.0.0.14"  # from host_vars/node4.yml
    assert spec.serving.model.served_name == "glm-5.3-flash"
    assert spec.source_file == str(path)


def test_missing_inventory_says_so():
    with pytest.raises(ConfigError, match="file not found"):
        load_inventory(HERE / "nope.yml")


def test_good_inventory_loads():
    spec = load_inventory(HERE / "good.yml")
    assert [n.name for n in spec.nodes] == ["node1", "node2", "node3", "node4"]
    assert spec.head.name == "node1" and spec.head.rank == 0
    assert [n.rank for n in spec.workers] == [1, 2, 3]
    assert spec.serving.kv_cache.memory_bytes == 16 * 2**30
    assert spec.nodes[2].vllm_host_ip == "192.168.100.13"


def test_example_inventory_is_the_field_cluster():
    spec = load_inventory(ROOT / "inventory.example.yml")
    s = spec.serving
    assert len(spec.nodes) == 4 and s.parallel.tensor == 4
    assert s.drafter.method == "dflash" and s.drafter.num_speculative_tokens == 3
    assert s.kv_cache.dtype == "fp8" and s.kv_cache.memory_bytes == 17179869184
    assert s.max_model_len == 1048576 and s.enforce_eager
    assert s.chat_template_kwargs == {"enable_thinking": False}
    assert s.gpu_clock_cap_mhz == 2000 and s.port == 8000 and s.vllm_version == "0.33.0"
    assert spec.watchdog.interval_s == 120 and spec.watchdog.failures == 3
    assert spec.thermal.interval_s == 10


def test_ansible_accepts_the_example_inventory():
    ansible_inventory = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent))
    assert ansible_inventory, "ansible-core must be installed next to this Python"
    out = subprocess.run(
        [ansible_inventory, "-i", str(ROOT / "inventory.example.yml"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    data = json.loads(out.stdout)
    assert data["head"]["hosts"] == ["node1"]
    assert data["workers"]["hosts"] == ["node2", "node3", "node4"]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16GiB", 16 * 2**30),
        ("16G", 16 * 2**30),
        ("16 GiB", 16 * 2**30),
        ("17179869184", 17179869184),
        (17179869184, 17179869184),
        ("16GB", 16 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
    ],
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "", "16 parsecs", "-1", True, 0])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_config_hash_changes_with_k_only():
    base = (HERE / "good.yml").read_text()
    a = parse_inventory(base)
    b = parse_inventory(base.replace("num_speculative_tokens: 3", "num_speculative_tokens: 7"))
    c = parse_inventory(
        base.replace(
            "      watchdog:\n        interval_s: 120", "      watchdog:\n        interval_s: 60"
        )
    )
    assert a.config_hash() != b.config_hash()
    assert a.config_hash() == c.config_hash()  # watchdog settings do not change what runs


def test_bastion_inventory_routes_workers_through_node1():
    """ProxyJump in ansible_ssh_common_args (group vars of workers) reaches the SSH gateway."""
    from tpwarden.cluster.ssh.connect import SshTarget
    from tpwarden.cluster.ssh.route import Hop

    spec = load_inventory(HERE / "example-bastion.yml")
    assert spec.config_hash() == load_inventory(ROOT / "inventory.example.yml").config_hash()
    routes = [SshTarget.from_node(n).route for n in spec.nodes]
    assert routes[0].jumps == ()
    assert all(r.jumps == (Hop("10.0.0.11", 22, "root"),) for r in routes[1:])
