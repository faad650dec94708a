"""PNG figures: the reliability diagram and the selective-prediction curve.

matplotlib is a control-machine dependency (`tpwarden[control]`); it is imported when a plot is
drawn (`cluster/plotting.py`, the Agg backend), so the rest of `decide` works on a node without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tpwarden.cluster.decide.calibrate import Bin, CurvePoint
from tpwarden.cluster.decide.labels import DecideError
from tpwarden.cluster.plotting import pyplot

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn (an optional dependency)
    from matplotlib.figure import Figure

NO_MATPLOTLIB = "plots need matplotlib: pip install 'tpwarden[control]'"


def _save(plt: ModuleType, fig: Figure, path: Path) -> Path:
    """Both figures' last step: lay the figure out, write it at `path` as a 110 dpi PNG, free
    it (pyplot keeps every open figure), and return the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def reliability_png(
    path: Path, before: Sequence[Bin], after: Sequence[Bin], temperature: float
) -> Path:
    plt = pyplot(DecideError, NO_MATPLOTLIB)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfect calibration")
    for bins, name, colour in (
        (before, "T = 1 (raw)", "tab:red"),
        (after, f"T = {temperature:.2f}", "tab:blue"),
    ):
        xs = [b.confidence for b in bins if b.count]
        ys = [b.accuracy for b in bins if b.count]
        sizes = [20 + 200 * b.count / max(1, sum(x.count for x in bins)) for b in bins if b.count]
        ax.plot(xs, ys, "-", color=colour, alpha=0.6)
        ax.scatter(xs, ys, s=sizes, color=colour, label=name)
    ax.set_xlabel("confidence (top-1 probability)")
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("Reliability diagram (marker size: items in bin)")
    ax.legend(loc="upper left")
    return _save(plt, fig, path)


def selective_png(
    path: Path, curve: Sequence[CurvePoint], gate: float | None, target: float | None
) -> Path:
    plt = pyplot(DecideError, NO_MATPLOTLIB)
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [p for p in curve if p.accuracy is not None]
    ax.plot([p.coverage for p in pts], [p.accuracy for p in pts], "-o", ms=3)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", label=f"target accuracy {target:.2f}")
    if gate is not None:
        chosen = next((p for p in pts if p.threshold == gate), None)
        if chosen:
            ax.scatter([chosen.coverage], [chosen.accuracy], color="red", zorder=3,
                       label=f"gate margin >= {gate:.3f}")  # fmt: skip
    ax.set_xlabel("coverage (answered / all)")
    ax.set_ylabel("accuracy on answered")
    ax.set_xlim(0, 1.02)
    ax.set_title("Selective prediction: margin gate")
    ax.legend(loc="lower left")
    return _save(plt, fig, path)
