"""`record_healthy`: THE entry point an operation calls once the server has become healthy
(after `up`, `restart`, a rollout's restart, a watchdog restart). It fingerprints what runs,
writes one ledger record and says whether the configuration changed (a canary is then due).
`record_if_healthy` is the operations' form (`tpwarden.cluster.operations.control`): a record
only when their result reached a healthy server, and never an exception.

Best effort by contract: a node or the engine that cannot be read is a None row with its
reason; only a ledger that cannot be opened or written raises (`LedgerError`), and callers
that must not fail on it (the watchdog) catch that and say so in their own log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ApplyResult
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger.collect import collect_fingerprint
from tpwarden.cluster.ledger.fingerprint import config_id
from tpwarden.cluster.ledger.store import Ledger, ledger_path
from tpwarden.cluster.ledger.tables import LedgerRecord, NewRecord
from tpwarden.cluster.operator_lock import operator_identity
from tpwarden.cluster.spec import ClusterSpec

log = logging.getLogger(__name__)


def ledger_file(spec: ClusterSpec, state_dir: str | os.PathLike[str] | None = None) -> Path:
    """`tpwarden.ledger.path`, else `<state dir>/ledger/<cluster>.sqlite`."""
    configured = spec.settings.ledger.path
    return Path(configured) if configured else ledger_path(spec.name, state_dir)


@dataclass(frozen=True)
class RecordOutcome:
    record: LedgerRecord
    previous_cfg: str | None
    path: Path

    @property
    def changed(self) -> bool:
        """A configuration this ledger has not seen last: a canary is due."""
        return self.previous_cfg != self.record.cfg

    def to_json(self) -> JSONObject:
        return {
            "id": self.record.id,
            "cfg": self.record.cfg,
            "previous_cfg": self.previous_cfg,
            "changed": self.changed,
            "changed_rows": self.record.changed,
            "missing": self.record.missing,
            "path": str(self.path),
        }


def record_healthy(
    ctl: Controller,
    *,
    action: str,
    reason: str,
    who: str | None = None,
    run_dir: str | None = None,
    path: str | os.PathLike[str] | None = None,
    http: httpx.Client | None = None,
    clock: Callable[[], float] | None = None,
) -> RecordOutcome:
    """Fingerprint the healthy server `ctl` drives and record it. `action`: up, restart,
    rollout, rollback, watchdog_restart...; `reason`: the operation's own words."""
    got = collect_fingerprint(ctl, http)
    file = Path(path) if path is not None else ledger_file(ctl.spec, ctl.state_dir)
    now = clock() if clock is not None else ctl.now().timestamp()
    with Ledger.open(file) as led:
        prev = led.latest_record(ctl.spec.name)
        rec = led.add_record(
            NewRecord(
                ts=now,
                cluster=ctl.spec.name,
                cfg=config_id(got.rows),
                spec_hash=ctl.spec.config_hash(),
                action=action,
                reason=reason,
                who=who or operator_identity(),
                run_dir=run_dir,
                rows=tuple(got.rows),
                missing=got.missing,
            )
        )
    return RecordOutcome(rec, prev.cfg if prev else None, file)


@dataclass(frozen=True)
class HealthyRecord:
    """The ledger's part of an operation's result: its record of the healthy server, or why
    none could be written (the operation's own outcome stands either way)."""

    outcome: RecordOutcome | None
    error: str | None = None

    def to_json(self) -> JSONObject:
        return self.outcome.to_json() if self.outcome is not None else {"error": self.error}


def record_if_healthy(
    ctl: Controller, result: ApplyResult, *, action: str, reason: str, who: str | None = None
) -> HealthyRecord | None:
    """The operations' call after up, restart or a rollout's restart: a record when `result`
    reached a healthy server (`boot.ready`), else None. Never raises: a ledger that cannot be
    written is logged and returned as its `error`, the operation's own outcome stands."""
    if not result.ok or result.boot is None or not result.boot.ready:
        return None
    try:
        return HealthyRecord(record_healthy(ctl, action=action, reason=reason, who=who))
    except Exception as exc:  # noqa: BLE001 - the ledger never fails the operation it records
        log.warning("ledger: no record of this healthy server: %s", exc)
        return HealthyRecord(None, str(exc))
