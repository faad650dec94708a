"""`up`, `down` and `restart` as operations: one actor at a time, the watchdog held, the job.

Each takes cluster control (a `Controller`, opened by the caller, who renders its events)
and does the whole of what the command does:

* `up`: under the cluster lock, ends an intentional stop (the hold `down` left), then starts
  and follows the boot.
* `down`: under the cluster lock, records the intentional stop where the watchdog reads it
  (before the containers go: the watchdog must never count this stop), then stops.
* `restart`: the one restart, for an operator (`tpwarden restart`: the cluster lock, the watchdog
  held as a lease for the restart's length) and for the watchdog (its restart job: the daemon
  holds the cluster restart lock around the job, and a watchdog never holds itself). Cluster
  control records it in its event log either way (`Controller.restart`).

`Actor` says which of the two takes the lock and the hold. ``showing`` is what the caller wants
around the long part (the CLI's progress bar), entered once the lock and hold are taken.

`up` and `restart` that waited for the server and found it healthy record it in the configuration
ledger (issue 53, `ledger.record.record_if_healthy`: never an exception) before they let the lock
go, and return it beside cluster control's result (`Operated`). The watchdog's restart does not
wait for the boot: its daemon records the server once its probe answers again
(`watchdog.ledger_jobs`), so that restart records nothing here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import ApplyResult
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.ledger.record import HealthyRecord, record_if_healthy
from tpwarden.cluster.operations.watchdog_hold import WatchdogHold
from tpwarden.cluster.operator_lock import (
    Holder,
    LeasedHolder,
    clear_down,
    cluster_lock_path,
    mark_down,
    one_actor,
    operator_identity,
)
from tpwarden.cluster.spec import ClusterSpec

log = logging.getLogger(__name__)

HOLD_MARGIN_S = 600.0  # a restart's hold outlasts its boot timeout by this much
DEFAULT_TIMEOUT_S = 2400.0  # how long `up` and `restart` wait for the server by default


@dataclass(frozen=True)
class Actor:
    """Who restarts, and so what the restart takes itself: the cluster lock (else its caller
    holds it) and a hold of the watchdog (never for the watchdog's own restart)."""

    name: str
    takes_lock: bool
    holds_watchdog: bool
    ledger_action: str | None = None  # the ledger record's action once healthy (None: none)


OPERATOR = Actor("operator", takes_lock=True, holds_watchdog=True, ledger_action="restart")
# The watchdog's restart job: its daemon holds the cluster restart lock around the job, and
# records the server in the ledger itself once its probe answers (the job does not wait).
WATCHDOG = Actor("watchdog", takes_lock=False, holds_watchdog=False)
# A restart inside a rollout (or a rollback), which holds both locks and the watchdog for its
# whole length.
WITHIN_ROLLOUT = Actor("rollout", takes_lock=False, holds_watchdog=False, ledger_action="rollout")


@dataclass(frozen=True)
class Operated:
    """What `up` or `restart` did: cluster control's result and, when it waited for the server
    and found it healthy, the ledger's record of it (None otherwise; its ``error`` when the
    ledger could not be written: the operation's own outcome stands)."""

    result: ApplyResult
    ledger: HealthyRecord | None = None

    @property
    def ok(self) -> bool:
        return self.result.ok


def watchdog_hold(spec: ClusterSpec, who: str | None = None) -> WatchdogHold | Holder:
    """The hold of the inventory's watchdog, for an action (best effort: a watchdog host that
    cannot be reached from here is logged when it is held, not raised)."""
    try:
        return WatchdogHold.of(spec, by=who)
    except ConfigError as exc:  # the watchdog's host: the action goes on without the hold
        return _Unreachable(str(exc))


class _Unreachable:
    """A watchdog this machine cannot hold (its host is neither here nor a node)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def hold(self, reason: str, until: float, kind: str = "hold") -> None:
        log.warning("watchdog not held: %s", self.why)

    def release(self) -> None:
        return None


@contextlib.contextmanager
def acting(
    spec: ClusterSpec, what: str, *, hold_s: float = 0.0, who: str | None = None
) -> Iterator[None]:
    """The cluster lock (ClusterBusy names whoever has it) and, with ``hold_s``, the watchdog
    held as a lease for that long (it lapses within 10 minutes if this process dies)."""
    holder = LeasedHolder(watchdog_hold(spec, who)) if hold_s else None
    with one_actor(cluster_lock_path(spec), what, holder, hold_s=hold_s):
        yield


def up(
    ctl: Controller,
    plan: ControlPlan,
    *,
    replace: bool = False,
    wait_ready: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    who: str | None = None,
    showing: AbstractContextManager[object] | None = None,
) -> Operated:
    """Start the server (``plan``, made by ``ctl.plan_up``); an operator's `up` ends an
    intentional stop: the watchdog watches again. Healthy: a ledger record."""
    who = who or operator_identity()
    with acting(ctl.spec, f"tpwarden up by {who}"):
        clear_down(watchdog_hold(ctl.spec, who))
        with showing or contextlib.nullcontext():
            result = ctl.up(replace, wait_ready=wait_ready, timeout_s=timeout_s, plan=plan)
        return Operated(
            result, record_if_healthy(ctl, result, action="up", reason="tpwarden up", who=who)
        )


def down(ctl: Controller, plan: ControlPlan, *, who: str | None = None) -> ApplyResult:
    """Stop the server (``plan``, made by ``ctl.plan_down``), recorded first as an intentional
    stop (a hold of kind "down" until `up`)."""
    who = who or operator_identity()
    with acting(ctl.spec, f"tpwarden down by {who}"):
        mark_down(watchdog_hold(ctl.spec, who), who)
        return ctl.down(plan)


def restart(
    ctl: Controller,
    why: str,
    *,
    actor: Actor = OPERATOR,
    who: str | None = None,
    timeout_s: float | None = None,
    wait_ready: bool = True,
    showing: AbstractContextManager[object] | None = None,
) -> Operated:
    """Down + up with one plan, recorded in cluster control's event log (who, why, the plan).
    For an operator: under the cluster lock, the watchdog held meanwhile (its release also
    ends an intentional `down`). Healthy (waited for): a ledger record, as ``actor`` says."""
    who = who or operator_identity()
    with contextlib.ExitStack() as stack:
        if actor.takes_lock:
            boot_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
            hold_s = boot_s + HOLD_MARGIN_S if actor.holds_watchdog else 0.0
            what = f"tpwarden restart by {who}: {why}"
            stack.enter_context(acting(ctl.spec, what, hold_s=hold_s, who=who))
        with showing or contextlib.nullcontext():
            if timeout_s is None:  # the watchdog's job: it does not wait for the boot
                result = ctl.restart(why=why, wait_ready=wait_ready, who=who)
            else:
                result = ctl.restart(why=why, timeout_s=timeout_s, wait_ready=wait_ready, who=who)
        if actor.ledger_action is None:
            return Operated(result)
        return Operated(
            result, record_if_healthy(ctl, result, action=actor.ledger_action, reason=why, who=who)
        )
