"""Boot durations: the ETA from earlier boots and the JSON-lines history they come from."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path

from tpwarden.cluster.boot.phase import TIMED_PHASES, BootPhase
from tpwarden.cluster.durable import JSONObject, append_jsonl, default_state_dir, read_jsonl


def estimate_eta(
    phase: BootPhase,
    within: float,
    durations: Mapping[BootPhase, float],
    phase_started_at: float | None = None,
    now: float | None = None,
) -> float | None:
    """Seconds left: the rest of the current phase plus the medians of the phases after it.

    The current phase's rest is its median scaled by progress within it (shards a/b), or its
    median minus the time already spent when there is no finer progress. None without history.
    """
    if not durations or phase not in TIMED_PHASES:
        return 0.0 if phase is BootPhase.READY else None
    idx = TIMED_PHASES.index(phase)
    current = durations.get(phase, 0.0)
    if within > 0:
        rest = current * (1.0 - within)
    elif phase_started_at is not None and now is not None:
        rest = max(0.0, current - (now - phase_started_at))
    else:
        rest = current
    return rest + sum(durations.get(ph, 0.0) for ph in TIMED_PHASES[idx + 1 :])


def phase_durations(phase_times: Mapping[BootPhase, float], ended_at: float) -> dict[str, float]:
    """Entered-at times -> seconds spent in each phase (a phase skipped gets 0)."""
    seen = sorted(
        ((t, ph) for ph, t in phase_times.items() if ph in TIMED_PHASES),
        key=lambda x: (x[0], x[1].order),
    )
    out: dict[str, float] = {ph.value: 0.0 for ph in TIMED_PHASES}
    for (t, ph), nxt in zip(seen, [*seen[1:], (ended_at, BootPhase.READY)], strict=True):
        out[ph.value] = max(0.0, nxt[0] - t)
    return out


class BootHistory:
    """Durations of earlier successful boots, one JSON line each (`boots.jsonl`)."""

    def __init__(self, path: str | Path | None = None, keep: int = 20) -> None:
        self.path = Path(path) if path else default_state_dir() / "boots.jsonl"
        self.keep = keep

    def records(self, cluster: str | None = None) -> list[JSONObject]:
        out = [r for r in read_jsonl(self.path) if cluster is None or r.get("cluster") == cluster]
        return out[-self.keep :]

    def medians(self, cluster: str | None = None) -> dict[BootPhase, float]:
        per: dict[BootPhase, list[float]] = {}
        for rec in self.records(cluster):
            for name, seconds in (rec.get("phases") or {}).items():
                try:
                    per.setdefault(BootPhase(name), []).append(float(seconds))
                except (ValueError, TypeError):
                    continue
        return {ph: statistics.median(v) for ph, v in per.items() if v}

    def record(
        self,
        cluster: str,
        config_hash: str,
        phases: Mapping[str, float],
        total_s: float,
        now: float | None = None,
    ) -> None:
        rec = {
            "ts": now if now is not None else time.time(),
            "cluster": cluster,
            "config_hash": config_hash,
            "total_s": round(total_s, 3),
            "phases": {k: round(v, 3) for k, v in phases.items()},
        }
        append_jsonl(self.path, rec)
