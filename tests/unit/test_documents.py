"""Durable documents validated by one typed model (issue 51 item 4): state.json and hold.json
are read through their dataclasses' annotations (`cluster.documents.load_document`), with no
hand-kept list of field names; and the policy's knobs are the daemon's settings by name."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
from tpwarden.cluster.hold import load_hold, write_hold
from tpwarden.cluster.vllm.probe_types import MetricsSnapshot
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.policy_state import PolicyConfig, PolicyState, WatchdogPhase


def test_a_full_state_round_trips() -> None:
    state = PolicyState(
        phase=WatchdogPhase.SUSPECT,
        consecutive_failures=2,
        boot_progress=BootReading("load_weights", 12.0),
        restart_times=(1.0, 2.5),
        alerted=("gave_up",),
        baseline=MetricsSnapshot(10.0, {"vllm:num_requests_running": 3.0}),
        failure_log=({"at": 1.0, "verdict": "hang"},),
        last_probe={"outcome": "timeout"},
        held_at=5.0,
    )
    again = PolicyState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state and again.phase is WatchdogPhase.SUSPECT


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"consecutive_failures": -1}, "consecutive_failures"),
        ({"consecutive_failures": True}, "consecutive_failures"),
        ({"incident_seq": 2.5}, "incident_seq"),
        ({"held_at": float("inf")}, "held_at"),
        ({"alerted": ["ok", 3]}, "alerted"),
        ({"boot_progress": {"phase": "load", "progress": "half"}}, "boot_progress"),
        ({"baseline": {"taken_at": "yesterday"}}, "baseline"),
    ],
)
def test_a_field_of_the_wrong_type_or_value_is_named(doc: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PolicyState.from_json(doc)


def test_unknown_keys_are_ignored_and_missing_ones_default() -> None:
    state = PolicyState.from_json({"phase": "ready", "from_a_newer_version": 1})
    assert state == PolicyState(phase=WatchdogPhase.READY)


def test_hold_json_is_read_through_its_model(tmp_path: Path) -> None:
    path = tmp_path / "hold.json"
    write_hold(str(path), until=700.0, reason="k=3", by="ops", now=100.0, kind="down")
    got = load_hold(str(path))
    assert got.hold is not None and (got.hold.until, got.hold.kind) == (700.0, "down")
    path.write_text('{"hold": {"until": 700, "reason": 3}}')
    bad = load_hold(str(path))
    assert bad.hold is None and bad.invalid is not None and "reason" in bad.invalid
    path.write_text('{"hold": {}, "released_at": 50}')  # an empty hold is no hold
    assert load_hold(str(path)).released_at == 50.0 and load_hold(str(path)).invalid is None


def test_every_policy_knob_is_the_daemon_setting_of_that_name() -> None:
    hints = typing.get_type_hints(WatchdogConfig)
    for f in dataclasses.fields(PolicyConfig):
        attr = getattr(WatchdogConfig, f.name, None)
        if isinstance(attr, property):  # derived: stall_window_s, boot_cap_s
            assert (
                typing.get_type_hints(attr.fget)["return"]
                == typing.get_type_hints(PolicyConfig)[f.name]
            ), f.name
        else:
            assert hints[f.name] == typing.get_type_hints(PolicyConfig)[f.name], f.name
    cfg = WatchdogConfig(probe_url="http://127.0.0.1:9", state_dir="/x", failures=7)
    assert PolicyConfig.from_config(cfg).failures == 7
