"""The fitted calibration (temperature + margin gate), saved by `decide calibrate` and applied by
`decide ask/run`. One small JSON file per cluster in the state directory, written atomically.

A fit belongs to one server configuration (model, drafter, template defaults); the file records
the config hash it was fitted under so the CLI can warn when the cluster changed since.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tpwarden.cluster.bench.runner import write_json
from tpwarden.cluster.decide.calibrate import (
    CalibrationReport,
    CurvePoint,
    Example,
    calibrate,
    choose_gate,
    selective_curve,
)
from tpwarden.cluster.decide.labels import normalise, top_two
from tpwarden.cluster.durable import JSONObject, JSONValue, default_state_dir
from tpwarden.cluster.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Fitted:
    temperature: float
    margin_gate: float | None  # None: no threshold reached the target accuracy
    target_accuracy: float
    n: int
    config_hash: str | None
    fitted_at: str
    path: str  # completions | chat: a fit is only valid for the path it was fitted on
    source: str | None = None  # run directory or data file

    def to_json(self) -> JSONObject:
        return asdict(self)


def default_path(cluster_name: str) -> Path:
    return default_state_dir() / "decide" / f"{cluster_name}.calibration.json"


def save(path: Path, fitted: Fitted) -> Path:
    write_json(path, fitted.to_json())
    return path


def load(path: Path) -> Fitted | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ConfigError(f"unreadable calibration: {e}", file=str(path)) from None
    try:
        return Fitted(**doc)
    except TypeError as e:
        raise ConfigError(f"not a calibration file: {e}", file=str(path)) from None


def examples_from_docs(docs: Iterable[Mapping[str, JSONValue]]) -> list[Example]:
    """(label logprobs, answer) of every decided, graded item in items.jsonl-shaped docs."""
    out: list[Example] = []
    for d in docs:
        lps, ans = d.get("label_logprobs"), d.get("answer")
        if lps and ans is not None and ans in lps:
            out.append((dict(lps), str(ans)))
    return out


@dataclass(frozen=True)
class FitResult:
    report: CalibrationReport
    gate: CurvePoint | None
    curve: list[CurvePoint]


def fit(examples: list[Example], target_accuracy: float, n_bins: int = 10) -> FitResult:
    """Temperature first, then the gate on the calibrated margins (the gate `decide` applies
    is on calibrated probabilities, so it must be chosen on them)."""
    if len(examples) < 2:
        raise ConfigError(
            f"{len(examples)} graded item(s): calibration needs labelled items (`answer`)",
            hint="100-200 validation items are a reasonable start",
        )
    report = calibrate(examples, n_bins=n_bins)
    margins, correct = [], []
    for lps, ans in examples:
        decision, margin = top_two(normalise(lps, report.temperature))
        margins.append(margin)
        correct.append(decision == ans)
    curve = selective_curve(margins, correct)
    return FitResult(report, choose_gate(margins, correct, target_accuracy), curve)
