"""The queue's timing policy (pure: no I/O, the time given): when the deadline falls, what each
variant costs, which fit before the deadline and which are skipped, and why.

The queue: production measured first (a canary), then the request-only variants (on production,
no restart), then each restarting variant (a boot on its settings and its measurement), then
production restored (a boot) and measured again. Before each variant the time left must hold
the variant, everything still owed after it (the restore and the closing canary) and the
margin; a variant that does not fit is skipped with the numbers, and a later, cheaper one may
still fit. A boot costs the WORST recorded boot of the cluster (a boot that has taken 18.5
minutes once can again); with none recorded, the watchdog's boot deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, tzinfo

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.report_settings import clock_time

# Measurement beyond the canary, assumed until the ledger records them (docs/experiments.md)
BENCH_ASSUMED_S = {"none": 0.0, "quick": 600.0, "full": 1500.0}
EVAL_ASSUMED_S_PER_ITEM = 3.0
EVAL_ASSUMED_UNLIMITED_S = 3600.0
CANARY_ASSUMED_S = 300.0


def deadline_of(restore_by: str, tz: tzinfo, now: datetime) -> datetime:
    """ "06:30": the next 06:30 in `tz` after `now` (aware); "+02:00": two hours after `now`."""
    relative = restore_by.startswith("+")
    hours, minutes = clock_time(restore_by.removeprefix("+").zfill(5))
    if relative:
        return now + timedelta(hours=hours, minutes=minutes)
    local = now.astimezone(tz)
    at = local.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if at <= local:
        tomorrow = local + timedelta(days=1)
        at = tomorrow.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    return at


@dataclass(frozen=True)
class Costs:
    """Seconds each step of the queue is taken to cost, and where each figure came from."""

    boot_s: float
    boot_from: str
    canary_s: float
    canary_from: str
    bench_s: float = 0.0
    eval_s: float = 0.0
    margin_s: float = 600.0

    @property
    def measure_s(self) -> float:
        """One variant's measurement: the canary, the bench preset, the eval preset."""
        return self.canary_s + self.bench_s + self.eval_s

    def to_json(self) -> JSONObject:
        return {**asdict(self), "measure_s": self.measure_s}


def costs_from(
    boots_s: Sequence[float],
    canaries_s: Sequence[float],
    *,
    boot_deadline_s: float,
    bench: str = "none",
    eval_limit: int | None = None,
    eval_preset: str | None = None,
    margin_s: float = 600.0,
) -> Costs:
    """The costs from the recorded boots and canaries (their worst), else the stated fallbacks."""
    boots = [b for b in boots_s if b > 0]
    if boots:
        boot, boot_from = max(boots), f"worst of {len(boots)} recorded boots"
    else:
        boot, boot_from = boot_deadline_s, "no recorded boot: the watchdog's boot deadline"
    canaries = [c for c in canaries_s if c > 0]
    if canaries:
        canary, canary_from = max(canaries), f"worst of {len(canaries)} recorded canaries"
    else:
        canary, canary_from = CANARY_ASSUMED_S, "no recorded canary: assumed"
    evals = 0.0
    if eval_preset is not None:
        evals = EVAL_ASSUMED_S_PER_ITEM * eval_limit if eval_limit else EVAL_ASSUMED_UNLIMITED_S
    return Costs(boot, boot_from, canary, canary_from, BENCH_ASSUMED_S[bench], evals, margin_s)


@dataclass(frozen=True)
class Step:
    """One step of the estimated queue (times as epoch seconds)."""

    name: str
    kind: str  # production-start | request | restart | production-end
    estimate_s: float
    start: float | None = None  # None: skipped
    end: float | None = None
    skipped: str | None = None  # why it does not fit

    def to_json(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True)
class QueueEstimate:
    now: float
    deadline: float
    costs: Costs
    steps: tuple[Step, ...]

    @property
    def finish(self) -> float:
        return max((s.end for s in self.steps if s.end is not None), default=self.now)

    @property
    def skipped(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.skipped)

    @property
    def fits(self) -> bool:
        """The whole queue ends, production restored and measured, before the deadline."""
        return not self.skipped and self.finish + self.costs.margin_s <= self.deadline

    @property
    def whole_s(self) -> float:
        """The queue's duration if every variant ran."""
        return sum(s.estimate_s for s in self.steps)

    def verdict(self) -> str:
        if self.fits:
            return "fits"
        ran = [s for s in self.steps if s.kind in ("request", "restart") and not s.skipped]
        return "partial" if ran else "nothing fits"

    def to_json(self) -> JSONObject:
        return {
            "now": self.now, "deadline": self.deadline, "finish": self.finish,
            "whole_s": self.whole_s, "verdict": self.verdict(), "fits": self.fits,
            "costs": self.costs.to_json(), "steps": [s.to_json() for s in self.steps],
        }  # fmt: skip


def queue_order(variants: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """(name, restarts) in run order: request-only variants first (they run on production),
    then the restarting ones, each group in the plan's order."""
    return [v for v in variants if not v[1]] + [v for v in variants if v[1]]


def plan_queue(
    variants: Sequence[tuple[str, bool]],
    costs: Costs,
    now: float,
    deadline: float,
    *,
    measured: bool = False,
) -> QueueEstimate:
    """The estimated queue (module docstring): each variant run or skipped with its reason.
    `measured`: production's opening canary is already taken (a resumed queue)."""
    c = costs
    steps: list[Step] = []
    t, on_variant = now, False
    if not measured:
        steps.append(Step("production", "production-start", c.canary_s, now, now + c.canary_s))
        t += c.canary_s
    for name, restarts in queue_order(variants):
        cost = c.boot_s + c.measure_s if restarts else c.measure_s
        owed = c.boot_s + c.canary_s if (restarts or on_variant) else c.canary_s
        left = deadline - t - c.margin_s
        if t + cost + owed + c.margin_s > deadline:
            why = (f"needs {minutes(cost)} + {minutes(owed)} to restore and measure production; "
                   f"{minutes(max(left, 0.0))} left before the deadline and its margin")  # fmt: skip
            steps.append(Step(name, "restart" if restarts else "request", cost, skipped=why))
            continue
        steps.append(Step(name, "restart" if restarts else "request", cost, t, t + cost))
        t, on_variant = t + cost, on_variant or restarts
    end = c.boot_s + c.canary_s if on_variant else c.canary_s
    steps.append(Step("production", "production-end", end, t, t + end))
    return QueueEstimate(now, deadline, costs, tuple(steps))


def minutes(seconds: float) -> str:
    """ "18.5 min", "1 h 05 min"."""
    m = seconds / 60.0
    if m < 60:
        return f"{m:.1f} min"
    return f"{int(m // 60)} h {int(m % 60):02d} min"
