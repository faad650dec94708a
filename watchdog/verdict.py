"""Probe verdicts: what one probe (and its /metrics read) says, before any counting.

Pure functions of the observation, the previous /metrics snapshot and `now`; the rules are
described in `tpwarden.watchdog.policy` (counting rules). Split from the policy for size.
"""

from __future__ import annotations

import enum
from dataclasses import Field, replace
from typing import ClassVar, Protocol, TypeVar

from tpwarden.cluster.vllm.probe_types import COUNTERS, MetricsSnapshot, Outcome, is_healthy
from tpwarden.watchdog.observation import Observation


class VerdictState(Protocol):
    """What a verdict reads of the policy's state (`tpwarden.watchdog.policy_state.PolicyState`,
    a frozen dataclass the verdict `replace`s: it imports this module, so not named here)."""

    __dataclass_fields__: ClassVar[dict[str, Field[object]]]  # a dataclass, for `replace`

    @property
    def baseline(self) -> MetricsSnapshot | None: ...

    @property
    def flat_since(self) -> float | None: ...

    @property
    def unreadable_since(self) -> float | None: ...


PolicyStateT = TypeVar("PolicyStateT", bound=VerdictState)


class ProbeVerdict(enum.StrEnum):
    OK = "ok"
    BUSY = "busy"
    STALLED = "stalled"
    HARD = "hard_fail"
    MISCONFIG = "misconfig"
    UNKNOWN = "unknown"


COUNTED = (ProbeVerdict.STALLED, ProbeVerdict.HARD)


def progress_signal(prev: MetricsSnapshot, cur: MetricsSnapshot) -> str | None:
    """Pure: what advanced between two snapshots; "reset" if a counter went backwards."""
    for name in COUNTERS:
        a, b = prev.get(name), cur.get(name)
        if a is None or b is None:
            continue
        if b < a:
            return "reset"
        if b > a:
            return name
    running = cur.get("vllm:num_requests_running") or 0
    kv_a, kv_b = prev.get("vllm:kv_cache_usage_perc"), cur.get("vllm:kv_cache_usage_perc")
    if running > 0 and kv_a is not None and kv_b is not None and kv_b > kv_a:
        return "vllm:kv_cache_usage_perc (prefill in flight)"
    return None


def classify(
    stall_window_s: float, s: PolicyStateT, obs: Observation, now: float
) -> tuple[ProbeVerdict, str, PolicyStateT]:
    """Pure: one probe (+ /metrics) against the previous snapshot -> verdict, why, new state."""
    m, prev, flat_since = obs.metrics, s.baseline, s.flat_since
    progress = None
    if m is not None and m.error is None:
        progress = progress_signal(prev, m) if prev is not None else None
        new_flat = m.taken_at if prev is None or progress else flat_since
        s = replace(s, baseline=m, flat_since=new_flat)
    p = obs.probe
    if is_healthy(p):  # the one notion of healthy, shared with `tpwarden status`
        return ProbeVerdict.OK, "probe answered", s
    if p.outcome in (Outcome.REFUSED, Outcome.HTTP_5XX, Outcome.MALFORMED):
        return ProbeVerdict.HARD, f"{p.outcome.value}: {p.detail}", s
    if p.outcome is Outcome.HTTP_4XX:
        if p.status_code == 429:
            return ProbeVerdict.BUSY, "HTTP 429: server is shedding load", s
        return ProbeVerdict.MISCONFIG, p.detail, s
    # TIMEOUT: busy or stalled?
    if m is None or m.error is not None:
        err = m.error if m is not None else "not read"
        if m is not None and m.refused:
            return ProbeVerdict.HARD, f"probe timed out and /metrics refused ({err})", s
        # No evidence either way: a busy API server can be slow on /metrics too. Count it
        # only once /metrics has stayed unreadable for the stall window.
        since = s.unreadable_since if s.unreadable_since is not None else now
        s = replace(s, unreadable_since=since)
        if now - since < stall_window_s:
            return ProbeVerdict.UNKNOWN, f"probe timed out and /metrics unreadable ({err})", s
        return (
            ProbeVerdict.STALLED,
            f"probe timed out and /metrics unreadable for {now - since:.0f}s ({err})",
            s,
        )
    s = replace(s, unreadable_since=None)
    if prev is None or flat_since is None:
        return ProbeVerdict.UNKNOWN, "probe timed out; first /metrics baseline taken", s
    if progress == "reset":
        return (
            ProbeVerdict.UNKNOWN,
            "probe timed out; engine counters went backwards (re-baselined)",
            s,
        )
    if progress:
        return ProbeVerdict.BUSY, f"probe timed out but {progress} advanced: busy, not dead", s
    flat_for = now - flat_since
    gauges = (
        f"running={m.get('vllm:num_requests_running')}, "
        f"waiting={m.get('vllm:num_requests_waiting')}"
    )
    if flat_for < stall_window_s:
        return (
            ProbeVerdict.UNKNOWN,
            f"probe timed out; counters flat only {flat_for:.0f}s ({gauges})",
            s,
        )
    return (
        ProbeVerdict.STALLED,
        f"probe timed out; no engine progress for {flat_for:.0f}s ({gauges})",
        s,
    )
