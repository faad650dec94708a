"""Batch runs: every item N times (optionally also with the choices reversed), with concurrency;
the summary (accuracy on answered items with a Wilson CI, coverage, holds, flips, latency,
position bias) and the run directory with its manifest.

The manifest reuses `tpwarden.cluster.bench.manifest` (cluster section with the config hash, the server's
effective defaults from the plan, what the server reports) so decide runs and bench runs are
explained by the same facts.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tpwarden.cluster import __version__
from tpwarden.cluster.bench import manifest as bm
from tpwarden.cluster.bench.plan import run_id_for
from tpwarden.cluster.bench.runner import write_json
from tpwarden.cluster.decide import stats
from tpwarden.cluster.decide.core import Decider, Decision, Item
from tpwarden.cluster.decide.labels import DecideError
from tpwarden.cluster.durable import atomic_write_text
from tpwarden.cluster.spec import ClusterSpec


@dataclass(frozen=True)
class Failed:
    """An item that got no decision (label missing, split labels, server error)."""

    id: str
    error: str
    kind: str
    latency_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": "error", "error": self.error, "error_kind": self.kind}


ItemResult = Decision | Failed  # one item's result: a decision, or why there is none


@dataclass(frozen=True)
class RunOptions:
    path: str
    k: int
    temperature: float
    margin_gate: float
    cue: str
    thinking: bool
    runs: int = 1
    concurrency: int = 4
    permute: bool = False
    calibration_file: str | None = None
    data_file: str | None = None
    data_sha256: str | None = None


@dataclass
class BatchResult:
    items: list[Item]
    runs: list[dict[str, ItemResult]]  # per run: id -> outcome
    permuted: dict[str, ItemResult] = field(default_factory=dict)
    mappings: dict[str, dict[str, str]] = field(default_factory=dict)


def ask_all(
    decider: Decider,
    items: Sequence[Item],
    concurrency: int,
    on_done: Callable[[ItemResult], None] | None = None,
) -> dict[str, ItemResult]:
    def one(item: Item) -> ItemResult:
        try:
            out: ItemResult = decider.decide(item)
        except DecideError as e:
            out = Failed(item.id, str(e), type(e).__name__, getattr(e, "latency_ms", None))
        if on_done:
            on_done(out)
        return out

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return {o.id: o for o in pool.map(one, items)}


def run_batch(
    decider: Decider,
    items: Sequence[Item],
    opts: RunOptions,
    on_progress: Callable[[str], None] | None = None,
) -> BatchResult:
    say = on_progress or (lambda m: None)
    result = BatchResult(list(items), [])
    for n in range(opts.runs):
        say(f"run {n + 1}/{opts.runs}: {len(items)} items, concurrency {opts.concurrency}")
        result.runs.append(ask_all(decider, items, opts.concurrency))
    if opts.permute:
        swapped = []
        for it in items:
            if it.kind == "choice":
                new, mapping = it.reordered(list(reversed(list(it.choices))))
                swapped.append(new)
                result.mappings[it.id] = mapping
        say(f"reversed choice order: {len(swapped)} items")
        result.permuted = ask_all(decider, swapped, opts.concurrency)
    return result


# --- summary (pure) -----------------------------------------------------------------------------


def item_docs(result: BatchResult) -> list[dict[str, Any]]:
    docs = []
    for it in result.items:
        first = result.runs[0][it.id]
        doc = first.to_json()
        if it.answer is not None:
            doc.setdefault("answer", it.answer)
        if len(result.runs) > 1:
            doc["runs"] = [
                {"decision": o.decision, "margin": o.margin, "verdict": o.verdict}
                if isinstance(o, Decision)
                else {"error": o.error}
                for o in (r[it.id] for r in result.runs)
            ]
        if it.id in result.permuted:
            p = result.permuted[it.id]
            doc["reversed_order"] = (
                {"decision": result.mappings[it.id][p.decision], "margin": p.margin}
                if isinstance(p, Decision)
                else {"error": p.error}
            )
        docs.append(doc)
    return docs


def summarize(result: BatchResult) -> dict[str, Any]:
    first = [result.runs[0][it.id] for it in result.items]
    decided = [o for o in first if isinstance(o, Decision)]
    answered = [d for d in decided if d.verdict == "answer"]
    graded_answered = [d for d in answered if d.answer is not None]
    graded_all = [d for d in decided if d.answer is not None]
    right = sum(bool(d.correct) for d in graded_answered)
    right_all = sum(bool(d.correct) for d in graded_all)
    latencies = [
        o.latency_ms for run in result.runs for o in run.values() if o.latency_ms is not None
    ]  # a Decision always has one; a failure, when the server answered
    runs_margins = [
        {i: (o.decision, o.margin) for i, o in run.items() if isinstance(o, Decision)}
        for run in result.runs
    ]
    flips, mean_margin = stats.find_flips(runs_margins)
    labels = sorted({lab for it in result.items if it.kind == "choice" for lab in it.choices})
    table = stats.position_table(
        [d.decision for d in decided if d.decision in labels],
        [d.answer for d in decided if d.decision in labels],
        labels,
    )
    doc: dict[str, Any] = {
        "items": len(result.items),
        "decided": len(decided),
        "errors": len(first) - len(decided),
        "answered": len(answered),
        "held": len(decided) - len(answered),
        "coverage": len(answered) / len(decided) if decided else None,
        "accuracy": right / len(graded_answered) if graded_answered else None,
        "accuracy_ci95": stats.wilson(right, len(graded_answered)),
        "accuracy_all": right_all / len(graded_all) if graded_all else None,
        "accuracy_all_ci95": stats.wilson(right_all, len(graded_all)),
        "graded_answered": len(graded_answered),
        "runs": len(result.runs),
        "flips": len(flips) if len(result.runs) > 1 else None,
        "flipped": [asdict(f) for f in flips],
        "flips_by_margin": stats.flips_by_margin(flips, mean_margin)
        if len(result.runs) > 1
        else [],
        "latency_ms": stats.latency_summary(latencies),
        "position": {
            "table": table,
            "chi_square_predicted_vs_uniform": stats.chi_square_uniform(
                [r["predicted"] for r in table]
            ),
        },
    }
    if result.permuted:
        original = {d.id: d.decision for d in decided}
        permuted = {i: o.decision for i, o in result.permuted.items() if isinstance(o, Decision)}
        doc["position"]["reversed_order"] = stats.order_consistency(
            original, permuted, result.mappings
        )
    return doc


# --- run directory ------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(
    spec: ClusterSpec,
    opts: RunOptions,
    run_id: str,
    started_at: datetime,
    http: httpx.Client | None = None,
) -> dict[str, Any]:
    """What explains this run later: cluster + config hash, the server's defaults (thinking, k),
    what the server reports (version, model, max_model_len), our options and versions."""
    if http is None:
        with httpx.Client(timeout=10.0) as own:
            server = bm.collect_server(own, spec.api_base)
    else:
        server = bm.collect_server(http, spec.api_base)
    defaults = bm.defaults_from_plan(spec)
    return {
        "manifest_version": bm.MANIFEST_VERSION,
        "run_id": run_id,
        "kind": "decide",
        "started_at": started_at.isoformat(),
        "tpwarden_version": __version__,
        "versions": {
            "python": platform.python_version(),
            "httpx": httpx.__version__,
            "vllm_server": server.get("version"),
        },
        "options": asdict(opts),
        "cluster": bm.cluster_section(spec),
        "server": server,
        "server_defaults": defaults,
        "thinking_sent": opts.thinking,
        "drafter_k": defaults.get("drafter_k"),
        "top_logprobs_k": opts.k,
    }


def new_run_dir(runs_dir: Path, now: datetime | None = None) -> tuple[str, Path]:
    run_id = run_id_for("decide", now or datetime.now(UTC))
    path = runs_dir / run_id
    n = 1
    while path.exists():  # two runs in one second (tests, scripts) must not collide
        n += 1
        path = runs_dir / f"{run_id}-{n}"
    path.mkdir(parents=True)
    return path.name, path


def write_results(run_dir: Path, docs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    atomic_write_text(run_dir / "items.jsonl", "".join(_jsonl(d) for d in docs), mode=0o644)
    write_json(run_dir / "summary.json", summary)


def _jsonl(doc: dict[str, Any]) -> str:
    return json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n"
