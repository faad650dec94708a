"""The watchdog follows the applied plan (`tpwarden.cluster.control.applied`), not an inventory copy.

`initial_plan()` picks what the daemon starts on: the applied plan when there is one (the
provisioned watchdog has nothing else), else the inventory. `PlanFollower` is called by the
daemon every tick: when the applied plan's hash changes it builds the new settings, prober and
actuator (`PlanChange`); the daemon switches and logs `plan_changed`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from tpwarden.cluster.control.applied import AppliedPlan, read_applied
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.watchdog.collaborators import Actuator, PlanChange, Prober
from tpwarden.watchdog.config import WatchdogConfig

# (spec, plan) -> (settings, prober, actuator) for a newly applied plan
Build = Callable[[ClusterSpec, AppliedPlan], tuple[WatchdogConfig, Prober, Actuator]]

log = logging.getLogger(__name__)


def plan_key(plan: AppliedPlan | None) -> tuple[str, str] | None:
    return None if plan is None else (plan.config_hash, plan.inventory_revision)


def wait_for_applied(
    path: str, poll_s: float = 10.0, sleep: Callable[[float], None] = time.sleep
) -> AppliedPlan:
    """A provisioned watchdog before the first `tpwarden up`: nothing runs, nothing to watch.

    An applied plan that cannot be read (truncated JSON, wrong shape) is waited past too, with
    an error in the log, instead of crash-looping the unit into `failed` (issue 29): the next
    `up` rewrites it, and meanwhile no /metrics answer, which TpwardenWatchdogDown alerts."""
    said: str | None = None
    while True:
        try:
            plan = read_applied(path)
            why = f"no applied plan at {path} yet: waiting for `tpwarden up`"
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            plan = None
            why = (
                f"applied plan {path} is invalid ({type(exc).__name__}: {exc}): "
                "waiting for `tpwarden up` to write it again"
            )
        if plan is not None:
            return plan
        if why != said:
            (log.info if why.startswith("no applied") else log.error)("%s", why)
            said = why
        sleep(poll_s)


class PlanFollower:
    """Callable for `Watchdog(follow=...)`: a PlanChange when `path` holds a new plan."""

    def __init__(
        self,
        path: str,
        current: AppliedPlan | None,
        build: Build,
        cluster: str,
    ) -> None:
        self.path = path
        self._key = plan_key(current)
        self._build = build  # (spec, plan) -> (WatchdogConfig, prober, actuator)
        self._cluster = cluster
        self._mtime: float | None = None

    def __call__(self) -> PlanChange | None:
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            return None
        if mtime == self._mtime:
            return None  # one stat per tick while nothing changes
        plan = read_applied(self.path)
        if plan is None or plan.cluster != self._cluster or plan_key(plan) == self._key:
            self._mtime = mtime
            return None
        config, prober, actuator = self._build(plan.spec(), plan)  # raises: plan unusable
        self._key, self._mtime = plan_key(plan), mtime
        return PlanChange(
            config,
            prober,
            actuator,
            {
                "revision": plan.inventory_revision,
                "action": plan.action,
                "by": plan.by,
                "applied_at": plan.applied_at,
            },
        )
