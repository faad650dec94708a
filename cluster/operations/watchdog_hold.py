"""The watchdog hold, written in one place (issue 51 item 2): `hold.json` and its event.

An operator's `watchdog hold`, a restart's or a rollout's lease, `tpwarden down` (a hold of kind
"down") and their releases all go through `WatchdogHold`, which writes `hold.json` (in
`tpwarden.cluster.hold`'s format) and records the event the watchdog's history and the morning
report read (`hold_set`, `hold_released`) in the watchdog's own `events.jsonl`. It acts where the
watchdog runs (`watchdog_host`): here in-process, or on the watchdog host by running the same
command there (`tpwarden watchdog hold|release --state-dir ...`, which writes through this very
module on that machine), so the file and the event are written by one writer either way.

A lease renews its hold every few minutes: a renewal (the same reason, holder and kind, still in
force) extends `until` without a second `hold_set`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.event_log import EventLog
from tpwarden.cluster.hold import (
    MAX_HOLD_S,
    HoldKind,
    hold_path,
    read_hold,
    write_hold,
    write_release,
)
from tpwarden.cluster.operations import watchdog_host
from tpwarden.cluster.operator_lock import operator_identity
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

__all__ = ["HoldDone", "HoldKind", "WatchdogHold", "check_duration"]

log = logging.getLogger(__name__)

EVENTS = watchdog_host.EVENTS


@dataclass(frozen=True)
class HoldDone:
    """What a hold or release did: ``until`` (a hold written here), or the watchdog host's
    answer (``relayed``) when it was written there."""

    until: float | None = None
    relayed: watchdog_host.Relayed | None = None


def check_duration(seconds: float, text: str) -> None:
    """A hold lasts more than 0 and at most `MAX_HOLD_S` (7 days): ConfigError otherwise."""
    if not 0 < seconds <= MAX_HOLD_S:
        raise ConfigError(f"hold of {text} is out of range (max 7d)", key="--for")


class WatchdogHold:
    """The hold of one watchdog: in the state directory ``state_dir`` on this machine, or on
    ``node`` of ``spec`` (over SSH). Build it with `here` or `of`."""

    def __init__(
        self,
        *,
        state_dir: str,
        by: str | None = None,
        node: tuple[ClusterSpec, NodeSpec] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state_dir = state_dir
        self.by = by or operator_identity()
        self.node = node  # None: the watchdog runs here
        self._clock = clock

    @classmethod
    def here(
        cls, state_dir: str, by: str | None = None, clock: Callable[[], float] = time.time
    ) -> WatchdogHold:
        """The watchdog whose state directory is ``state_dir`` on this machine."""
        return cls(state_dir=state_dir, by=by, clock=clock)

    @classmethod
    def of(
        cls, spec: ClusterSpec, by: str | None = None, clock: Callable[[], float] = time.time
    ) -> WatchdogHold:
        """The inventory's watchdog, where it runs (ConfigError when that cannot be reached)."""
        place = watchdog_host.watchdog_place(spec)
        node = None if place.node is None else (spec, place.node)
        return cls(state_dir=spec.watchdog.state_dir, by=by, node=node, clock=clock)

    @property
    def path(self) -> str:
        return hold_path(self.state_dir)

    # -- what an operator asks for (the CLI): errors raise ---------------------------------------
    def set(
        self,
        reason: str,
        seconds: float,
        kind: HoldKind = HoldKind.HOLD,
        duration: str | None = None,
    ) -> HoldDone:
        """Hold restarts for ``seconds`` from now (``duration``: as the operator wrote it)."""
        if self.node is not None:
            spec, _ = self.node
            args = ["--for", duration or f"{max(1, math.ceil(seconds))}s", "--reason", reason,
                    "--by", self.by, *(["--kind", kind.value] if kind != HoldKind.HOLD else [])]  # fmt: skip
            return HoldDone(relayed=watchdog_host.relay(spec, ("watchdog", "hold"), args))
        self._existing_dir()
        until = self._clock() + seconds
        self._write_here(reason, until, kind)
        return HoldDone(until=until)

    def lift(self) -> HoldDone:
        """End the hold; also re-arms restarts after an automatic hold or a give-up."""
        if self.node is not None:
            spec, _ = self.node
            return HoldDone(
                relayed=watchdog_host.relay(spec, ("watchdog", "release"), ["--by", self.by])
            )
        self._existing_dir()
        write_release(self.path, by=self.by, now=self._clock())
        self._event("hold_released", by=self.by)
        return HoldDone()

    # -- `operator_lock.Holder`: an action's hold, best effort ----------------------------------
    def hold(self, reason: str, until: float, kind: str = "hold") -> None:
        """Hold until ``until`` (this machine's clock); a watchdog that cannot be reached, or
        that has no state directory there, is logged, not raised: the action goes on."""
        if self.node is None and not os.path.isdir(self.state_dir):
            log.info("no watchdog state dir %s here; nothing to hold", self.state_dir)
            return
        self._best_effort(lambda: self.set(reason, until - self._clock(), HoldKind(kind)))

    def release(self) -> None:
        if self.node is None and not os.path.isdir(self.state_dir):
            return
        self._best_effort(self.lift)

    def _best_effort(self, act: Callable[[], HoldDone]) -> None:
        try:
            done = act()
        except TpwardenError as exc:
            log.warning("could not write the watchdog hold (%s): %s", self.where(), exc)
            return
        if done.relayed is not None and done.relayed.rc != 0:
            why = (done.relayed.stderr or done.relayed.stdout).strip()[-300:]
            log.warning("the watchdog hold on %s: %s", self.where(), why)

    def where(self) -> str:
        return "this machine" if self.node is None else self.node[1].name

    # -- the one writer ------------------------------------------------------------------------
    def _existing_dir(self) -> None:
        """The watchdog creates its state directory: a mistyped one is refused, not created."""
        if not os.path.isdir(self.state_dir):
            raise ConfigError(
                f"{self.state_dir}: no watchdog state directory here",
                key="--state-dir",
                hint="run this where the watchdog runs (the head, as provisioned), or give its "
                "--state-dir",
            )

    def _write_here(self, reason: str, until: float, kind: HoldKind) -> None:
        now = self._clock()
        before, _ = read_hold(self.path)
        write_hold(self.path, until=until, reason=reason, by=self.by, now=now, kind=kind)
        renewal = (
            before is not None
            and before.until > now
            and (before.reason, before.by, before.kind) == (reason, self.by, kind)
        )
        if not renewal:
            extra = {} if kind == HoldKind.HOLD else {"hold_kind": kind.value}
            self._event("hold_set", until=until, reason=reason, by=self.by, **extra)

    def _event(self, kind: str, **fields: str | float) -> None:
        events = EventLog(os.path.join(self.state_dir, EVENTS), self._clock)
        try:
            events.append(kind, **fields)
        finally:
            events.close()
