"""Issue 15 (4): the watchdog refuses to start blind (API key not resolvable where it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.settings import SecretRef
from tpwarden.watchdog.wiring import build_config, resolve_api_key

ROOT = Path(__file__).resolve().parents[2]


def test_key_env_missing_refuses_to_start(tmp_path: Path) -> None:
    # Reproduction: the key could not be resolved, the daemon probed without it (401 forever).
    spec = load_inventory(ROOT / "inventory.example.yml")
    with pytest.raises(ConfigError, match="TPWARDEN_API_KEY"):
        build_config(spec, str(tmp_path), environ={})
    cfg = build_config(spec, str(tmp_path), environ={"TPWARDEN_API_KEY": "k"})
    assert cfg.api_key == "k" and cfg.config_hash == spec.config_hash()


def test_key_file_is_read_where_the_watchdog_runs(tmp_path: Path) -> None:
    key = tmp_path / "api_key"
    with pytest.raises(ConfigError, match="not readable"):
        resolve_api_key(SecretRef(file=str(key)), {})
    key.write_text("secret\n")
    assert resolve_api_key(SecretRef(file=str(key)), {}) == "secret"
    assert resolve_api_key(None, {}) is None
