"""`rollout`, `rollback` and `tune drafter --apply` as operations: the locks for the whole
length, the watchdog held as a lease, the real ports, the sequence (`cluster.rollout`).

* `rollout_locks`: one rollout at a time (the rollout lock, taken before `current.json` is read,
  so a second rollout is refused naming the first rather than mistaken for an interrupted one),
  and for a direct rollout also the cluster lock (no operator or watchdog restart meanwhile).
  `--via watchdog` leaves the cluster lock free: the watchdog's own restart is what that
  rollout waits for.
* `ports_for`: the real ports: cluster control (`ControllerCluster`, whose restart is the one
  restart operation, `operations.control.restart`, inside the rollout's locks), the watchdog
  hold (`operations.watchdog_hold`, as a lease), and a measurer.
* `RolloutOperation`: one `tpwarden rollout` from its locks to its record; `rollback`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ControlEvent
from tpwarden.cluster.durable import JSONObject, default_state_dir
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.control import WITHIN_ROLLOUT, acting, restart, watchdog_hold
from tpwarden.cluster.operator_lock import LeasedHolder, one_actor, operator_identity
from tpwarden.cluster.rollout.edit import Change, Guard, argv_diff, text_diff
from tpwarden.cluster.rollout.layout import Files, shown, spec_with
from tpwarden.cluster.rollout.ports import restart_failure
from tpwarden.cluster.rollout.sequence import (
    TERMINAL,
    Measurement,
    RestartOutcome,
    Rollout,
    RolloutPorts,
    RolloutRecord,
    RolloutStore,
    rollback_to,
)
from tpwarden.cluster.spec import ClusterSpec

Measure = Callable[[ClusterSpec, str], Measurement]
OnEvent = Callable[[str, JSONObject], None]


class ControllerCluster:
    """Restart and probe through cluster control: the same plan and event log as an operator's
    `tpwarden restart`, so a rollout restart looks the same in the history."""

    def __init__(
        self, on_event: Callable[[ControlEvent], None] | None = None, who: str = "tpwarden-rollout"
    ):
        self.on_event = on_event
        self.who = who

    def preflight(self, spec: ClusterSpec) -> list[str]:
        """The restart's own pre-flight on `spec` (images, model/drafter paths, GPUs, ports),
        run before the rollout writes the inventory."""
        with Controller(spec) as ctl:
            return list(ctl.preflight(ctl.plan_restart()).problems)

    def restart(self, spec: ClusterSpec, why: str, timeout_s: float) -> RestartOutcome:
        with Controller(spec, on_event=self.on_event) as ctl:
            # the healthy server recorded in the ledger by the restart operation (its actor)
            result = restart(
                ctl, why, actor=WITHIN_ROLLOUT, who=self.who, timeout_s=timeout_s
            ).result
        return RestartOutcome(result.ok, "" if result.ok else restart_failure(result, timeout_s))

    def probe(self, spec: ClusterSpec) -> tuple[bool, str]:
        with Controller(spec) as ctl:
            got = ctl.probe()
        return got.ok, got.describe()

    def stop(self, spec: ClusterSpec, why: str) -> None:
        """`--via watchdog`: take the server down; the watchdog sees it and restarts it."""
        with Controller(spec, on_event=self.on_event) as ctl:
            ctl.record_stop(why, self.who)
            # The watchdog restarts the applied plan: make the new config the one it replays.
            ctl.record_applied("rollout", self.who)
            ctl.down()

    def wait_running(self, spec: ClusterSpec, timeout_s: float, poll_s: float = 2.0) -> bool:
        """Until every node runs `spec`'s config hash and a 1-token completion answers."""
        want = spec.config_hash()
        deadline = time.monotonic() + timeout_s
        with Controller(spec) as ctl:
            while time.monotonic() < deadline:
                st = ctl.status(with_gpus=False)
                if st.ok and all(n.config_hash == want for n in st.nodes):
                    return True
                time.sleep(poll_s)
        return False


def rollout_store(inventory: Path) -> RolloutStore:
    """The inventory's cluster's rollout records (`<state>/rollout/<cluster>`)."""
    return RolloutStore(default_state_dir() / "rollout" / load_inventory(inventory).name)


def rollout_lock_path(inventory: Path) -> str:
    """The rollout lock: one rollout, rollback or experiment at a time on the cluster."""
    return os.path.join(str(rollout_store(inventory).root), "rollout.lock")


@contextlib.contextmanager
def rollout_locks(inventory: Path, what: str, via: str = "direct") -> Iterator[None]:
    """The rollout lock and, unless ``via`` is "watchdog", the cluster lock (module doc)."""
    spec, who = load_inventory(inventory), operator_identity()
    lock = rollout_lock_path(inventory)
    os.makedirs(os.path.dirname(lock), mode=0o700, exist_ok=True)
    with one_actor(lock, f"{what} by {who}"):
        if via == "watchdog":
            yield
            return
        with acting(spec, f"{what} by {who}"):
            yield


def ports_for(
    inventory: Path,
    measure: Measure | None,
    via: str = "direct",
    on_event: OnEvent | None = None,
) -> RolloutPorts:
    """The real ports (cluster control, the leased watchdog hold, ``measure``); ``on_event``
    hears the sequence's steps (the CLI prints them)."""
    spec = load_inventory(inventory)
    holder = LeasedHolder(watchdog_hold(spec, "tpwarden-rollout"))  # lapses if this dies
    if on_event is None:
        return RolloutPorts(ControllerCluster(), holder, measure, via=via)
    return RolloutPorts(ControllerCluster(), holder, measure, on_event=on_event, via=via)


@dataclass(frozen=True)
class Preview:
    """What a rollout will change: each edited file's diff, the files, every node's argv."""

    diff: str
    files: list[str]
    argv: dict[str, list[str]]


class RolloutOperation:
    """One `tpwarden rollout`: entered, it holds the rollout's locks (none for a dry run,
    which changes nothing; none either with ``locks_held``: its caller, an experiment, holds
    them for its whole night); `prepare`, `preview`, `run`, `resume` and `abort` act under them."""

    def __init__(
        self,
        inventory: Path,
        *,
        measure: Measure | None = None,
        via: str = "direct",
        on_event: OnEvent | None = None,
        dry_run: bool = False,
        locks_held: bool = False,
    ) -> None:
        self.inventory = inventory
        self.measure, self.via, self.on_event, self.dry_run = measure, via, on_event, dry_run
        self.locks_held = locks_held
        self._locks = contextlib.ExitStack()
        self._rollouts: dict[str, Rollout] = {}  # by `via`: a resumed rollout keeps its own
        self.store = RolloutStore("")  # set when entered: the locks come first

    def __enter__(self) -> RolloutOperation:
        if not self.dry_run and not self.locks_held:
            self._locks.enter_context(rollout_locks(self.inventory, "tpwarden rollout", self.via))
        self.store = rollout_store(self.inventory)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._locks.close()

    def interrupted(self) -> RolloutRecord | None:
        """The rollout that stopped midway, if any."""
        current = self.store.current()
        return current if current is not None and current.step not in TERMINAL else None

    def _rollout(self, via: str | None = None) -> Rollout:
        via = via or self.via
        if via not in self._rollouts:
            if self.dry_run:  # a dry run only prepares the record: the clock and `via`
                ports = RolloutPorts(None, None, None, via=via)  # type: ignore[arg-type]
            else:
                ports = ports_for(self.inventory, self.measure, via, self.on_event)
            self._rollouts[via] = Rollout(self.store, ports)
        return self._rollouts[via]

    def resume(self, record: RolloutRecord, guards: list[Guard]) -> RolloutRecord:
        return self._rollout(record.via).resume(record, guards)

    def abort(self, record: RolloutRecord, why: str) -> RolloutRecord:
        return self._rollout(record.via).abort(record, why)

    def prepare(self, changes: list[Change], guards: list[Guard]) -> RolloutRecord:
        return self._rollout().prepare(str(self.inventory), changes, guards)

    def preview(self, record: RolloutRecord) -> Preview:
        inv = str(self.inventory)
        old = self.store.revision_files(record.old_revision, inv)
        new = self.store.revision_files(record.new_revision, inv)
        argv = argv_diff(spec_with(inv, old), spec_with(inv, new))
        return Preview(files_diff(inv, old, new), [shown(inv, rel) for rel in sorted(new)], argv)

    def run(
        self, record: RolloutRecord, guards: list[Guard], baseline: Measurement | None = None
    ) -> RolloutRecord:
        return self._rollout().run(record, guards, baseline=baseline)


def rollback(
    inventory: Path,
    revision: str | None,
    on_event: OnEvent | None = None,
    *,
    locks_held: bool = False,
) -> RolloutRecord:
    """`tpwarden rollback [REVISION]` under the rollout's locks (an unknown revision is refused
    before any lock); ``locks_held``: under those its caller (an experiment) holds already."""
    if revision is not None:
        rollout_store(inventory).revision_files(revision, str(inventory))
    ports = ports_for(inventory, None, on_event=on_event)
    with contextlib.nullcontext() if locks_held else rollout_locks(inventory, "tpwarden rollback"):
        return rollback_to(rollout_store(inventory), ports, str(inventory), revision)


def files_diff(inventory: str, old: Files, new: Files) -> str:
    """The unified diff of each edited file, named as the user named the inventory."""
    return "".join(
        text_diff(old[rel], new[rel], shown(inventory, rel)) for rel in sorted(new) if rel in old
    )
