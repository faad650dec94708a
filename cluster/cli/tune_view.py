"""`tune drafter`'s views: the prediction table and the plot file (issue 33). Rendering only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rich.table import Table
from tpwarden.cluster.cli.common import console
from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_bytes
from tpwarden.cluster.tune.model import LevelMeasure, Prediction, Recommendation
from tpwarden.cluster.tune.plot import tune_png
from tpwarden.cluster.tune.steptime import StepModel


def _cell(p: Prediction) -> str:
    mark = "*" if p.measured else ("~" if p.extrapolated else "")
    e = p.tokens_per_step
    return (
        f"{p.aggregate_tok_s:,.1f} ({p.aggregate_lo:,.0f}-{p.aggregate_hi:,.0f}){mark}\n"
        f"{e.mean:.2f}±{1.96 * e.se:.2f} tok/step · {p.step_ms:,.0f} ms"
    )


def render_table(
    levels: list[LevelMeasure], model: StepModel, preds: list[Prediction], rec: Recommendation
) -> None:
    conc = [lv.concurrency for lv in levels]
    table = Table(title=f"predicted aggregate tok/s per k' (measured at k={levels[0].counts.k})")
    table.add_column("k'", justify="right")
    for c in conc:
        table.add_column(f"c={c}", justify="right")
    table.add_column("profile score", justify="right")
    by = {(p.k, p.concurrency): p for p in preds}
    for k in sorted({p.k for p in preds}):
        s, lo, hi = rec.scores[k]
        best = " <- best" if k == rec.k else ""
        table.add_row(
            str(k), *(_cell(by[(k, c)]) for c in conc), f"{s:.3f} ({lo:.2f}-{hi:.2f}){best}"
        )
    console.print(table)
    console.print(
        f"step model ({model.source}): {model.a_ms:.1f} ms + {model.b_ms:.3f} ms x verified "
        f"tokens + {model.d_ms:.2f} ms x k; misfit {100 * model.rel_rms:.1f}% "
        "(* measured, ~ extrapolated; bands are 95%)",
        highlight=False,
    )
    for note in model.notes:
        console.print(f"note: {note}", highlight=False)
    sure = "" if rec.distinguishable else f" (within the uncertainty of k={rec.runner_up})"
    console.print(
        f"recommended k = [bold]{rec.k}[/] for this profile: {rec.score:.3f}x the weighted "
        f"throughput of k={rec.k_ref}{sure}",
        highlight=False,
    )
    for why in rec.extrapolated:
        console.print(f"extrapolated: {why}", highlight=False)


def write_plot(
    path: Path,
    levels: list[LevelMeasure],
    preds: list[Prediction],
    rec: Recommendation,
    applied: Mapping[str, JSONValue] | None,
) -> None:
    """The PNG: predictions per level, the measured points, the rollout's if applied."""
    measured = [
        (lv.counts.k, lv.concurrency, lv.aggregate_tok_s)
        for lv in levels
        if lv.aggregate_tok_s is not None
    ]
    ap = applied or {}
    after = [
        (int(ap["to_k"]), int(j["concurrency"]), float(j["measured_tok_s"]))
        for j in ap.get("levels") or []
        if j.get("measured_tok_s") is not None
    ]
    title = f"predicted aggregate tok/s per k' (measured at k={rec.k_ref}, recommended k={rec.k})"
    atomic_write_bytes(path, tune_png(preds, measured, after, title), mode=0o644)


def print_dataset(doc: JSONObject, per_level: int | None) -> None:
    """Which prompts the acceptance comes from (the advice holds for text like them), and how
    many may be too long for what `vllm bench serve` sends (cluster.bench.dataset)."""
    line = f"prompts: {doc['path']} ({doc['format']}, {doc['prompts']} prompts"
    line += f"; {per_level} a level, drawn anew each level)" if per_level else ")"
    console.print(line, highlight=False, markup=False)
    skipped = doc.get("maybe_skipped") or 0
    if skipped:
        console.print(
            f"note: {skipped} of {doc['prompts']} prompts may be over 1024 tokens (2048 with the "
            "output): vllm bench serve skips those and draws from the rest",
            style="yellow", highlight=False, markup=False,
        )  # fmt: skip
