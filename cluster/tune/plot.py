"""`tune drafter --plot FILE`: predicted aggregate throughput per draft length k', one panel per
load level, with the 95 % band, the point measured at the current k and, after `--apply`, the
point the rollout measured at the new k. Matplotlib (Agg, imported when a plot is asked for) as
in `reports.thermal.plot`; no file I/O here (`tune_png` returns bytes)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from tpwarden.cluster.plotting import pyplot
from tpwarden.cluster.tune.model import Prediction

# gids, so tests (and anyone post-processing the figure) find each layer
PREDICTED_GID = "predicted"
BAND_GID = "band"
EXTRAPOLATED_GID = "extrapolated"
MEASURED_GID = "measured"
APPLIED_GID = "applied"

Point = tuple[int, int, float]  # (k, concurrency, aggregate tok/s)


def _panel(
    ax: Any, preds: Sequence[Prediction], measured: Sequence[Point], applied: Sequence[Point]
) -> None:
    ps = sorted(preds, key=lambda p: p.k)
    ks = [p.k for p in ps]
    ax.fill_between(
        ks, [p.aggregate_lo for p in ps], [p.aggregate_hi for p in ps],
        alpha=0.2, color="tab:blue", gid=BAND_GID, label="95 % band",
    )  # fmt: skip
    ax.plot(ks, [p.aggregate_tok_s for p in ps], marker="o", color="tab:blue",
            gid=PREDICTED_GID, label="predicted")  # fmt: skip
    ex = [p for p in ps if p.extrapolated and not p.measured]
    if ex:
        ax.scatter([p.k for p in ex], [p.aggregate_tok_s for p in ex], s=60, zorder=3,
                   facecolors="white", edgecolors="tab:blue", gid=EXTRAPOLATED_GID,
                   label="extrapolated")  # fmt: skip
    if measured:
        ax.scatter([m[0] for m in measured], [m[2] for m in measured], marker="*", s=180,
                   color="black", zorder=4, gid=MEASURED_GID, label="measured")  # fmt: skip
    if applied:
        ax.scatter([m[0] for m in applied], [m[2] for m in applied], marker="D", s=70,
                   color="tab:red", zorder=4, gid=APPLIED_GID,
                   label="measured after the rollout")  # fmt: skip
    ax.set_xticks(ks)
    ax.set_xlabel("k' (draft length, 0 = no drafter)")
    ax.grid(True, alpha=0.3)


def tune_figure(
    preds: Sequence[Prediction],
    measured: Sequence[Point],
    applied: Sequence[Point] = (),
    title: str = "",
) -> Any:
    """The matplotlib Figure (`tune_png` closes it): one panel per level, left to right."""
    plt = pyplot()
    levels = sorted({p.concurrency for p in preds})
    if not levels:
        raise ValueError("no prediction to plot")
    fig, axes = plt.subplots(1, len(levels), figsize=(1.0 + 4.0 * len(levels), 4.4), squeeze=False)
    for ax, c in zip(axes[0], levels, strict=True):
        _panel(
            ax,
            [p for p in preds if p.concurrency == c],
            [m for m in measured if m[1] == c],
            [m for m in applied if m[1] == c],
        )
        ax.set_title(f"c={c}")
    axes[0][0].set_ylabel("aggregate tok/s")
    axes[0][0].legend(loc="best", fontsize="x-small")
    fig.suptitle(title or "predicted throughput per draft length")
    fig.tight_layout()
    return fig


def tune_png(
    preds: Sequence[Prediction],
    measured: Sequence[Point],
    applied: Sequence[Point] = (),
    title: str = "",
    dpi: int = 100,
) -> bytes:
    plt = pyplot()
    fig = tune_figure(preds, measured, applied, title)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()
