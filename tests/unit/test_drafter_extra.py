"""The drafter as the field uses it (issue 28, item 5): more --speculative-config keys through
`drafter.extra`, refusing only the keys tpwarden sets itself; hashed; the drafter can be off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster

GOOD = Path(__file__).parent / "inventories" / "good.yml"
K_LINE = "        num_speculative_tokens: 3\n"


def _inventory(tmp_path, extra: str) -> Path:
    text = GOOD.read_text()
    assert K_LINE in text
    path = tmp_path / "inv.yml"
    path.write_text(text.replace(K_LINE, K_LINE + extra))
    return path


def _speculative_config(spec) -> dict | None:
    argv = plan_cluster(spec).containers[0].vllm_argv
    if "--speculative-config" not in argv:
        return None
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_extra_keys_are_rendered_after_the_ones_tpwarden_sets(tmp_path):
    extra = (
        "        extra:\n"
        "          draft_tensor_parallel_size: 1\n"
        "          quantization: null\n"
        "          speculative_token_tree: '[(0,), (1,)]'\n"
        "          rejection: {kind: strict, bounds: [1, 2.5]}\n"
    )
    spec = load_inventory(_inventory(tmp_path, extra))
    config = _speculative_config(spec)
    assert config == {
        "method": "dflash",
        "model": "/models/GLM-5.3-Flash-DFlash2",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
        "quantization": None,
        "speculative_token_tree": "[(0,), (1,)]",
        "rejection": {"kind": "strict", "bounds": [1, 2.5]},
    }
    assert list(config)[:3] == ["method", "model", "num_speculative_tokens"]
    # every node's rank gets the same drafter
    for container in plan_cluster(spec).containers:
        assert (
            json.loads(container.vllm_argv[container.vllm_argv.index("--speculative-config") + 1])
            == config
        )


def test_extra_is_in_the_config_hash_and_an_empty_one_is_not(tmp_path):
    base = load_inventory(GOOD).config_hash()
    empty = load_inventory(_inventory(tmp_path, "        extra: {}\n")).config_hash()
    assert empty == base  # an upgrade alone shows no drift
    one = load_inventory(_inventory(tmp_path, "        extra: {draft_tensor_parallel_size: 1}\n"))
    two = load_inventory(_inventory(tmp_path, "        extra: {draft_tensor_parallel_size: 2}\n"))
    assert len({base, one.config_hash(), two.config_hash()}) == 3


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("method", "drafter.method"),
        ("model", "drafter.path"),
        ("num_speculative_tokens", "drafter.num_speculative_tokens"),
        ("prompt_lookup_max", "drafter.prompt_lookup_max"),
    ],
)
def test_keys_tpwarden_sets_are_refused_by_name_with_file_and_line(tmp_path, key, instead):
    path = _inventory(tmp_path, f"        extra:\n          {key}: 5\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    assert (info.value.file, info.value.line) == (str(path), 31)
    assert f"{key} is set by tpwarden: use {instead}" in info.value.message
    assert "method, model, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max" in str(
        info.value
    )


def test_a_key_that_is_no_config_key_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_inventory(_inventory(tmp_path, "        extra: {Draft-TP: 1}\n"))
    assert "'Draft-TP' is not a --speculative-config key" in info.value.message


def test_a_secret_looking_extra_value_is_refused(tmp_path):
    token = "hf_" + "a" * 30
    with pytest.raises(ConfigError) as info:
        load_inventory(_inventory(tmp_path, f"        extra: {{revision: {token}}}\n"))
    assert "secret" in info.value.message


def test_no_drafter_renders_no_speculative_config(tmp_path):
    text = GOOD.read_text()
    start = text.index("      drafter:\n")
    end = text.index(K_LINE) + len(K_LINE)
    path = tmp_path / "inv.yml"
    path.write_text(text[:start] + "      drafter: null\n" + text[end:])
    spec = load_inventory(path)
    assert spec.serving.drafter is None and _speculative_config(spec) is None
    assert spec.config_hash() != load_inventory(GOOD).config_hash()


def test_speculative_config_in_extra_args_points_at_drafter_extra(tmp_path):
    path = _inventory(tmp_path, "")
    text = path.read_text().replace(
        "    tpwarden:\n", "    tpwarden:\n      extra_args: ['--speculative-config', '{}']\n", 1
    )
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    assert "managed by tpwarden" in info.value.message and "drafter.extra" in info.value.hint
