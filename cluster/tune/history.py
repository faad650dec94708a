"""The tune history. Earlier bench sweeps as step-time points (k, concurrency, median ITL) for
the step model, and earlier `tune drafter --apply` runs' predictions against what their rollout
measured (the `applied` section of each run's `tune.json`). Pure: reads a run's manifest and
table as `bench.runner.load_run` returns them, and tune.json documents as
`tune.runner.tune_docs` returns them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.tune.steptime import StepPoint


def history_points(
    manifest: Mapping[str, JSONValue], table: Mapping[str, JSONValue]
) -> list[StepPoint]:
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


def applied_lines(doc: Mapping[str, JSONValue]) -> list[str]:
    """A `tune.json` with an `applied` section -> "predicted X tok/s, measured Y" per level, the
    line a later `tune drafter` prints to judge the model; [] when nothing was applied."""
    ap = doc.get("applied") or {}
    if not ap.get("rollout_id"):
        return []
    kept = "kept" if ap.get("kept") else f"{ap.get('step')}: {ap.get('reason') or '-'}"
    head = f"k={ap.get('from_k')} -> k={ap.get('to_k')} (rollout {ap['rollout_id']}, {kept})"
    out = [head]
    for lv in ap.get("levels") or []:
        measured, ratio = lv.get("measured_tok_s"), lv.get("ratio")
        got = "not measured" if measured is None else f"measured {measured:,.1f}"
        err = "" if ratio is None else f" (measured/predicted {ratio:.2f})"
        out.append(
            f"c={lv['concurrency']}: predicted {lv['predicted_tok_s']:,.1f} tok/s, {got}{err}"
        )
    p, m = ap.get("predicted_score"), ap.get("measured_score")
    if isinstance(p, (int, float)) and isinstance(m, (int, float)):
        out.append(f"profile gain: predicted {p:.3f}x, measured {m:.3f}x")
    return out


def last_applied(
    docs: Iterable[tuple[str, Mapping[str, JSONValue]]],
) -> tuple[str, Mapping[str, JSONValue]] | None:
    """The latest (run id, tune.json) whose recommendation went through a rollout. Run ids sort
    by time (bench.runner.run_id_for)."""
    done = [(rid, d) for rid, d in docs if (d.get("applied") or {}).get("rollout_id")]
    return max(done, key=lambda x: x[0]) if done else None
