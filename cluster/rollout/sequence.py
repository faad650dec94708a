"""Rollout: change the launcher config, restart, verify, measure, keep or roll back.

Every step is recorded in `<state>/rollout/current.json` before it is taken, so a rollout killed
midway leaves a defined state that the next `tpwarden rollout` resumes or rolls back. Each config
revision is kept under `<state>/rollout/revisions/<id>.json`: the exact text of every inventory
file the rollout edits (the inventory file, or group_vars files: `layout`), by its path relative
to the inventory's home, so a rollback restores each file byte for byte. (Revisions written
before that, `<id>.yml`, hold a single-file inventory's text and are still read.) Each finished
rollout or rollback is one line of `<state>/rollout/history.jsonl`.

The cluster, the benchmark, the watchdog hold and the clock are injected (`RolloutPorts`), so the
sequence and the rollback rules are tested without a cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tpwarden.cluster.durable import append_jsonl, atomic_write_json, read_jsonl
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.rollout.edit import Change, Guard, GuardVerdict, check_guard, describe_changes
from tpwarden.cluster.rollout.layout import (
    Files,
    plan_edit,
    read_files,
    spec_with,
    write_files,
)
from tpwarden.cluster.spec import ClusterSpec

TERMINAL = ("done", "rolled_back", "failed", "abandoned", "refused")
Rows = dict[int, dict[str, float]]


class RolloutInProgress(TpwardenError):
    exit_code = 2


@dataclass(frozen=True)
class Measurement:
    rows: Rows  # concurrency -> {metric: value}; metrics in rollout_ports.ROW_METRICS
    run_dir: str | None = None
    config_hash: str | None = None
    taken_at: float = 0.0


@dataclass(frozen=True)
class RestartOutcome:
    """A restart as the rollout records it: ``why`` says what went wrong in the cluster's own
    words (a boot that crashed, with its verdict; a node that did not start), empty when ok."""

    ok: bool
    why: str = ""


class Cluster(Protocol):
    # The new plan's pre-flight (paths, images, flags): problems found, empty when it may run.
    def preflight(self, spec: ClusterSpec) -> list[str]: ...
    def restart(self, spec: ClusterSpec, why: str, timeout_s: float) -> RestartOutcome: ...
    def probe(self, spec: ClusterSpec) -> tuple[bool, str]: ...
    # --via watchdog: stop the server, then wait for the watchdog to bring it back
    def stop(self, spec: ClusterSpec, why: str) -> None: ...
    def wait_running(self, spec: ClusterSpec, timeout_s: float) -> bool: ...


class Holder(Protocol):
    def hold(self, reason: str, until: float) -> None: ...
    def release(self) -> None: ...


@dataclass
class RolloutPorts:
    cluster: Cluster
    holder: Holder
    measure: Callable[[ClusterSpec, str], Measurement] | None  # None: --bench none
    _: KW_ONLY  # the rest by name: a positional on_event once landed in `via`
    clock: Callable[[], float] = time.time
    # "direct": restart through cluster control while the watchdog is held. "watchdog": as the
    # field report did it: change the launcher config, stop the server, and let the (not held)
    # watchdog restart it on the new config.
    via: str = "direct"
    on_event: Callable[[str, dict[str, Any]], None] = lambda kind, data: None


@dataclass
class RolloutRecord:
    id: str
    inventory: str
    step: str
    changes: list[dict[str, Any]]
    old_revision: str
    new_revision: str
    old_hash: str
    new_hash: str
    started_at: float
    guards: list[str] = field(default_factory=list)
    baseline: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    finished_at: float | None = None
    via: str = "direct"
    summary: list[str] = field(default_factory=list)  # "drafter: dflash k=3 -> off"


class RolloutStore:
    """current.json (atomic), revisions/*.json and history.jsonl under one directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.current_path = self.root / "current.json"
        self.history_path = self.root / "history.jsonl"
        self.revisions = self.root / "revisions"

    def current(self) -> RolloutRecord | None:
        try:
            return RolloutRecord(**json.loads(self.current_path.read_text()))
        except FileNotFoundError:
            return None

    def save(self, record: RolloutRecord) -> None:
        atomic_write_json(self.current_path, record.__dict__)

    def finish(self, record: RolloutRecord) -> None:
        self.save(record)
        append_jsonl(self.history_path, record.__dict__)

    def history(self) -> list[dict[str, Any]]:
        return read_jsonl(self.history_path)

    def save_revision(self, files: Files) -> str:
        """Store the exact text of some inventory files; returns the revision id (content hash)."""
        doc = {"files": dict(sorted(files.items()))}
        rev = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]
        self.revisions.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.revisions / f"{rev}.json"
        if not path.exists():
            atomic_write_json(path, doc)  # never a torn revision that `exists()` then skips
        return rev

    def revision_files(self, rev: str, inventory: str) -> Files:
        path = self.revisions / f"{rev}.json"
        if path.exists():
            return dict(json.loads(path.read_bytes())["files"])
        legacy = self.revisions / f"{rev}.yml"  # before multi-file revisions: the inventory file
        if legacy.exists() and not Path(inventory).is_dir():
            return {os.path.basename(inventory): legacy.read_bytes().decode("utf-8")}
        raise ConfigError(f"no config revision {rev}", hint="see `tpwarden rollout history`")


class Rollout:
    """One rollout from planning to done / rolled back."""

    def __init__(self, store: RolloutStore, ports: RolloutPorts) -> None:
        self.store = store
        self.ports = ports

    # -- planning (pure apart from reading the file) ---------------------------------------------
    def prepare(self, inventory: str, changes: list[Change], guards: list[Guard]) -> RolloutRecord:
        current = self.store.current()
        if current and current.step not in TERMINAL:
            raise RolloutInProgress(
                f"rollout {current.id} stopped at step '{current.step}'",
            )
        edit = plan_edit(inventory, changes)
        old_spec, new_spec = spec_with(inventory, edit.old), spec_with(inventory, edit.new)
        now = self.ports.clock()
        return RolloutRecord(
            id=time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)),
            inventory=inventory,
            step="planned",
            changes=[{"key": c.key, "value": c.value} for c in changes],
            old_revision=self.store.save_revision(edit.old),
            new_revision=self.store.save_revision(edit.new),
            old_hash=old_spec.config_hash(),
            new_hash=new_spec.config_hash(),
            started_at=now,
            guards=[str(g) for g in guards],
            via=self.ports.via,
            summary=describe_changes(old_spec, new_spec),
        )

    # -- the sequence ------------------------------------------------------------------------------
    def run(
        self, record: RolloutRecord, guards: list[Guard], baseline: Measurement | None = None
    ) -> RolloutRecord:
        old_spec = self._spec(record.old_revision, record.inventory)
        new_spec = self._spec(record.new_revision, record.inventory)
        deadline_s = new_spec.watchdog.boot_deadline_s
        self._step(record, "planned")
        # Before anything is measured or written: a refused plan changes nothing.
        problems = self.ports.cluster.preflight(new_spec)
        if problems:
            record.reason = "pre-flight refused the new config: " + "; ".join(problems)
            record.finished_at = self.ports.clock()
            self._step(record, "refused", finish=True)
            return record
        if self.ports.measure and record.baseline is None:
            m = baseline or self.ports.measure(old_spec, "before")
            record.baseline = _m_json(m)
        self._step(record, "baseline_measured")
        if self.ports.via == "watchdog":
            return self._apply(record, old_spec, new_spec, guards, deadline_s)
        hold_for = deadline_s * 2 + 1800  # two boots (rollback included) and the measurements
        self.ports.holder.hold(f"rollout {record.id}", self.ports.clock() + hold_for)
        try:
            return self._apply(record, old_spec, new_spec, guards, deadline_s)
        finally:
            self.ports.holder.release()
            self.ports.on_event("released", {"id": record.id})

    def resume(self, record: RolloutRecord, guards: list[Guard]) -> RolloutRecord:
        """Continue a rollout that was interrupted: redo from the restart on (idempotent)."""
        if record.step in ("planned", "baseline_measured"):
            return self.run(record, guards)
        new_spec = self._spec(record.new_revision, record.inventory)
        old_spec = self._spec(record.old_revision, record.inventory)
        self.ports.holder.hold(
            f"rollout {record.id} (resumed)",
            self.ports.clock() + new_spec.watchdog.boot_deadline_s * 2 + 1800,
        )
        try:
            if record.step == "rolling_back":
                return self._rollback(record, old_spec, record.reason or "resumed rollback")
            return self._apply(
                record, old_spec, new_spec, guards, new_spec.watchdog.boot_deadline_s
            )
        finally:
            self.ports.holder.release()

    def abort(self, record: RolloutRecord, why: str) -> RolloutRecord:
        """Roll an interrupted rollout back to its old revision."""
        old_spec = self._spec(record.old_revision, record.inventory)
        self.ports.holder.hold(
            f"rollback of {record.id}", self.ports.clock() + old_spec.watchdog.boot_deadline_s + 900
        )
        try:
            return self._rollback(record, old_spec, why)
        finally:
            self.ports.holder.release()

    def _apply(
        self,
        record: RolloutRecord,
        old_spec: ClusterSpec,
        new_spec: ClusterSpec,
        guards: list[Guard],
        deadline_s: float,
    ) -> RolloutRecord:
        write_files(
            record.inventory, self.store.revision_files(record.new_revision, record.inventory)
        )
        self._step(record, "inventory_written")
        self._step(record, "restarting")
        why = f"rollout {record.id}: {_summary(record)}"
        try:
            if self.ports.via == "watchdog":
                self.ports.cluster.stop(new_spec, why)
                outcome = RestartOutcome(self.ports.cluster.wait_running(new_spec, deadline_s))
            else:
                outcome = self.ports.cluster.restart(new_spec, why, deadline_s)
        except Exception as exc:  # noqa: BLE001 - after the write, any failure rolls back
            return self._rollback(
                record, old_spec, f"restart on the new config failed: {type(exc).__name__}: {exc}"
            )
        if not outcome.ok:
            return self._rollback(
                record,
                old_spec,
                outcome.why or f"new config not answering within {deadline_s:.0f} s",
            )
        alive, detail = self.ports.cluster.probe(new_spec)
        if not alive:
            return self._rollback(record, old_spec, f"1-token probe failed after restart: {detail}")
        self._step(record, "verified")
        if self.ports.measure:
            after = self.ports.measure(new_spec, "after")
            record.after = _m_json(after)
            verdicts = [check_guard(g, _rows(record.baseline), after.rows) for g in guards]
            record.verdicts = [_v_json(v) for v in verdicts]
            self._step(record, "measured")
            failed = [v for v in verdicts if not v.ok]
            if failed:
                return self._rollback(
                    record, old_spec, "guard failed: " + "; ".join(v.detail for v in failed)
                )
        record.finished_at = self.ports.clock()
        self._step(record, "done", finish=True)
        return record

    def _rollback(self, record: RolloutRecord, old_spec: ClusterSpec, why: str) -> RolloutRecord:
        record.reason = why
        self._step(record, "rolling_back")
        write_files(
            record.inventory, self.store.revision_files(record.old_revision, record.inventory)
        )
        if self.ports.via == "watchdog":
            # Roll back directly, with the watchdog held, rather than race it.
            held = self.ports.clock() + old_spec.watchdog.boot_deadline_s + 900
            self.ports.holder.hold(f"rollback of {record.id}", held)
            try:
                return self._restart_old(record, old_spec, why)
            finally:
                self.ports.holder.release()
        return self._restart_old(record, old_spec, why)

    def _restart_old(self, record: RolloutRecord, old_spec: ClusterSpec, why: str) -> RolloutRecord:
        try:
            outcome = self.ports.cluster.restart(
                old_spec, f"rollback of {record.id}: {why}", old_spec.watchdog.boot_deadline_s
            )
            ok, failed = outcome.ok, outcome.why or "restart failed"
        except Exception as exc:  # noqa: BLE001 - recorded as a failed rollback, not a crash
            ok, failed = False, f"restart failed: {type(exc).__name__}: {exc}"
        alive, detail = self.ports.cluster.probe(old_spec) if ok else (False, failed)
        record.finished_at = self.ports.clock()
        if ok and alive:
            self._step(record, "rolled_back", finish=True)
        else:
            record.reason = f"{why}; rollback did not come back either: {detail}"
            self._step(record, "failed", finish=True)
        return record

    def _step(self, record: RolloutRecord, step: str, finish: bool = False) -> None:
        record.step = step
        (self.store.finish if finish else self.store.save)(record)
        self.ports.on_event(step, {"id": record.id, "reason": record.reason})

    def _spec(self, revision: str, inventory: str) -> ClusterSpec:
        return spec_with(inventory, self.store.revision_files(revision, inventory))


def rollback_to(
    store: RolloutStore, ports: RolloutPorts, inventory: str, revision: str | None
) -> RolloutRecord:
    """`tpwarden rollback [REVISION]`: restore a recorded config revision and restart on it."""
    history = store.history()
    if revision is None:
        done = [h for h in history if h["step"] == "done"]
        if not done:
            raise ConfigError(
                "no finished rollout to roll back", hint="see `tpwarden rollout history`"
            )
        revision = done[-1]["old_revision"]
    target = store.revision_files(revision, inventory)
    current = read_files(inventory, sorted(target))
    old_spec, new_spec = spec_with(inventory, current), spec_with(inventory, target)
    now = ports.clock()
    record = RolloutRecord(
        id=time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-rollback",
        inventory=inventory,
        step="planned",
        changes=[{"key": "<revision>", "value": revision}],
        old_revision=store.save_revision(current),
        new_revision=revision,
        old_hash=old_spec.config_hash(),
        new_hash=new_spec.config_hash(),
        started_at=now,
        summary=describe_changes(old_spec, new_spec),
    )
    rollback_ports = RolloutPorts(
        ports.cluster, ports.holder, None, clock=ports.clock, via=ports.via, on_event=ports.on_event
    )
    return Rollout(store, rollback_ports).run(record, [])


def _summary(record: RolloutRecord) -> str:
    return ", ".join(f"{c['key']}={c['value']}" for c in record.changes)


def _m_json(m: Measurement) -> dict[str, Any]:
    return {
        "rows": {str(k): v for k, v in m.rows.items()},
        "run_dir": m.run_dir,
        "config_hash": m.config_hash,
        "taken_at": m.taken_at,
    }


def _rows(doc: dict[str, Any] | None) -> Rows:
    return {int(k): v for k, v in (doc or {}).get("rows", {}).items()}


def _v_json(v: GuardVerdict) -> dict[str, Any]:
    return {"guard": str(v.guard), "ok": v.ok, "change_pct": v.change_pct, "detail": v.detail}
