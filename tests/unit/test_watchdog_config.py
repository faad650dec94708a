"""One set of watchdog defaults (issue 31, item 3): the daemon's and the policy's configuration
are built from the validated inventory settings (`WatchdogSpec`), whose field defaults are the
only default numbers: probe every 120 s, 3 failures, probe timeout 120 s, boot deadline 2400 s."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.settings import SecretRef, WatchdogSpec
from tpwarden.cluster.vllm.probe import Outcome, ProbeResult
from tpwarden.watchdog.config import SPEC_NAMES, WatchdogConfig
from tpwarden.watchdog.observation import Observation
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import (
    Alert,
    PolicyConfig,
    PolicyState,
    Restart,
    WatchdogPhase,
)
from tpwarden.watchdog.wiring import build_config

URL = "http://127.0.0.1:9"
ROOT = Path(__file__).resolve().parents[2]
REFUSED_PROBE = ProbeResult(Outcome.REFUSED, 0.01, "connect failed")


def test_the_daemon_config_from_a_default_spec_has_the_fields_defaults() -> None:
    cfg = WatchdogConfig.from_spec(WatchdogSpec(), probe_url=URL)
    assert (cfg.interval_s, cfg.failures, cfg.timeout_s, cfg.boot_deadline_s) == (
        120,
        3,
        120,
        2400,
    )
    assert cfg.state_dir == "/var/lib/tpwarden/watchdog"
    policy = PolicyConfig.from_config(cfg)
    assert (policy.failures, policy.stall_window_s, policy.boot_deadline_s) == (3, 120, 2400)
    assert policy.boot_cap_s == 4800  # twice the boot deadline, not a number of its own


def test_a_directly_built_config_has_no_defaults_of_its_own() -> None:
    # the scaled-clock bench and the tests build WatchdogConfig directly: what they leave out is
    # the inventory field's default, never a second number (it was 30 s and 1800 s)
    direct = WatchdogConfig(probe_url=URL, state_dir=WatchdogSpec().state_dir)
    from_spec = WatchdogConfig.from_spec(WatchdogSpec(), probe_url=URL)
    for name in SPEC_NAMES:
        assert getattr(direct, name) == getattr(from_spec, name) == getattr(WatchdogSpec(), name)


def test_the_policy_config_has_no_defaults() -> None:
    missing = dataclasses.MISSING
    fields = dataclasses.fields(PolicyConfig)
    assert fields and all(f.default is missing and f.default_factory is missing for f in fields)
    with pytest.raises(TypeError):
        PolicyConfig()  # type: ignore[call-arg]


def test_validation_is_the_settings_once() -> None:
    with pytest.raises(ValidationError):
        WatchdogSpec(interval_s=0)
    with pytest.raises(ValidationError):
        WatchdogSpec(boot_deadline_s=3000, restart_window_s=2500)


def test_the_spec_values_and_the_resolved_ones_reach_the_config() -> None:
    spec = WatchdogSpec(
        interval_s=60, failures=5, timeout_s=5, alert_command=["notify", "-u"], state_dir="/srv/wd"
    )
    cfg = WatchdogConfig.from_spec(
        spec, probe_url=URL + "/", model="m", api_key="k", alert_webhook="http://127.0.0.1:9/h"
    )
    assert (cfg.interval_s, cfg.failures, cfg.timeout_s) == (60, 5, 5)
    assert cfg.alert_command == ("notify", "-u") and cfg.state_dir == "/srv/wd"
    assert cfg.probe_url == URL and cfg.alert_webhook == "http://127.0.0.1:9/h"
    assert cfg.metrics_timeout_s == 5  # never longer than the probe itself
    assert WatchdogConfig.from_spec(spec, probe_url=URL, state_dir="/x").state_dir == "/x"
    with pytest.raises(ConfigError, match="unknown"):
        WatchdogConfig.from_spec(spec, probe_url=URL, interval=1)


def test_an_unresolved_webhook_reference_is_an_error_not_a_silent_none() -> None:
    spec = WatchdogSpec(alert_webhook=SecretRef(env="HOOK_URL"))
    with pytest.raises(ConfigError) as exc:
        WatchdogConfig.from_spec(spec, probe_url=URL)
    assert exc.value.key == "watchdog.alert_webhook"
    resolved = WatchdogConfig.from_spec(spec, probe_url=URL, alert_webhook="http://127.0.0.1:9/h")
    assert resolved.alert_webhook == "http://127.0.0.1:9/h"


def test_alert_on_restart_is_set_from_the_inventory_and_alerts_on_a_restart(
    tmp_path: Path,
) -> None:
    # Issue 52 item 9: the on-call asked for an alert on every restart; the inventory sets it.
    text = (ROOT / "inventory.example.yml").read_text()
    assert "alert_on_restart" not in text
    env = {"TPWARDEN_API_KEY": "k"}
    default = build_config(load_inventory(_inventory(tmp_path, text, "default.yml")), environ=env)
    assert default.alert_on_restart is False
    on = text.replace(
        "        failures: 3\n", "        failures: 3\n        alert_on_restart: true\n"
    )
    cfg = build_config(load_inventory(_inventory(tmp_path, on, "on.yml")), environ=env)
    assert cfg.alert_on_restart is True

    def decisions(config: WatchdogConfig) -> list[object]:
        policy, state, now, out = Policy(PolicyConfig.from_config(config)), None, 1e6, []
        state = PolicyState(phase=WatchdogPhase.READY)
        for _ in range(config.failures):
            now += config.interval_s
            state, d = policy.decide(state, Observation(REFUSED_PROBE, None), now)
            out += d
        return out

    with_alert = decisions(cfg)
    assert any(isinstance(d, Restart) for d in with_alert)
    assert [d.category for d in with_alert if isinstance(d, Alert)] == ["restarted"]
    without = decisions(default)
    assert any(isinstance(d, Restart) for d in without)
    assert not [d for d in without if isinstance(d, Alert)]


def _inventory(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
