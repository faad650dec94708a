"""Earlier bench sweeps as step-time points (k, concurrency, median ITL) for the step model.
Pure: reads a run's manifest and table as `bench.runner.load_run` returns them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpwarden.cluster.tune.steptime import StepPoint


def history_points(manifest: Mapping[str, Any], table: Mapping[str, Any]) -> list[StepPoint]:
    """One point per sweep level with a median ITL; [] for a prefill run or a run without a
    drafter (k unknown). Drafts are taken as full (fill 1): the table keeps no per-draft count."""
    if table.get("kind") != "sweep":
        return []
    k = (manifest.get("server_defaults") or {}).get("drafter_k")
    if not isinstance(k, int) or k < 1:
        return []
    out = []
    for row in table.get("rows") or []:
        level, itl = row.get("level"), row.get("itl_p50_ms")
        if isinstance(level, int) and isinstance(itl, (int, float)) and itl > 0:
            out.append(StepPoint(k, level, float(itl)))
    return out
