"""The watchdog's durable policy state: `state.json`, written by the daemon only
(`durable.atomic_write_json`), and never trusted on read.

The operator's hold (`hold.json`) is `tpwarden.cluster.hold`; the locks (`watchdog.lock`, held
for the daemon's life, and the cluster restart lock) are `tpwarden.cluster.operator_lock.FileLock`:
both live in the core, where the CLI, a rollout and the watchdog all read them.
"""

from __future__ import annotations

import logging

from tpwarden.cluster.durable import atomic_write_json, move_aside, read_json
from tpwarden.watchdog.policy_state import PolicyState

log = logging.getLogger(__name__)

STATE_VERSION = 1


class StateStore:
    """Loads and saves `PolicyState` atomically. A file that is not valid JSON of the right
    shape and types is moved aside (`quarantined` says where and why), never trusted: the
    daemon starts from a safe state (boot grace) and alerts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.quarantined: list[tuple[str | None, str]] = []

    def load(self) -> PolicyState | None:
        try:
            data = read_json(self.path)
            if data is None:
                return None
            if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
                raise ValueError("no policy object")
            return PolicyState.from_json(data["policy"])
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.quarantined.append((move_aside(self.path, error), error))
            return None

    def save(self, state: PolicyState) -> None:
        atomic_write_json(self.path, {"version": STATE_VERSION, "policy": state.to_json()})
