"""The canary lease: `canary.json` in the watchdog's state directory, how a running canary tells
the watchdog that the load it sees is the canary's, not users' (issue 53).

A canary writes it before its first request (`lease_document`: run id, its concurrency levels,
and an `until` no later than its own timeout) and clears it when it ends; the watchdog reads it
every tick (`read_lease`) and trusts nothing in it: a malformed file or a lease past its `until`
(a canary killed with -9) is no lease. While a lease holds, a busy server is the canary's load:
the watchdog's busy ceiling (an alert meant for users' load) does not run, and a hang is still
judged by the engine's counters as always. The canary's own requests carry the request ids
`tpwarden-canary-<run>-...` (`vllm bench serve --request-id-prefix`), so vLLM's request log
tells them from users' too. In the core, not in the watchdog: the canary (a benchmark) writes it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, atomic_write_json, read_json

MAX_LEASE_S = 4 * 3600.0  # a canary lease is never trusted for longer than this
REQUEST_ID_PREFIX = "tpwarden-canary-"


def lease_path(state_dir: str) -> str:
    """Where a watchdog with this state directory reads the canary lease."""
    return os.path.join(state_dir, "canary.json")


@dataclass(frozen=True)
class CanaryLease:
    run_id: str
    until: float
    levels: tuple[int, ...]
    by: str = ""


def lease_document(
    *, run_id: str, levels: tuple[int, ...], until: float, by: str, now: float
) -> JSONObject:
    return {"canary": {"run_id": run_id, "levels": list(levels), "until": until, "by": by,
                       "set_at": now}}  # fmt: skip


def cleared_document(*, run_id: str, now: float) -> JSONObject:
    return {"canary": None, "ended": run_id, "ended_at": now}


def write_lease(path: str, doc: JSONObject) -> None:
    atomic_write_json(path, doc)


def read_lease(path: str, now: float) -> CanaryLease | None:
    """The canary lease in force at `now`, or None (absent, cleared, expired or malformed)."""
    try:
        data = read_json(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    c = data.get("canary") if isinstance(data, dict) else None
    if not isinstance(c, dict):
        return None
    until, set_at = _finite(c.get("until")), _finite(c.get("set_at"))
    if until is None or set_at is None or now >= min(until, set_at + MAX_LEASE_S):
        return None
    levels = tuple(int(v) for v in c.get("levels") or () if isinstance(v, int))
    return CanaryLease(str(c.get("run_id") or "?"), until, levels, str(c.get("by") or ""))


def _finite(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)
