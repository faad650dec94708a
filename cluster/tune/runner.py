"""`tune drafter`'s measurement: one bench sweep at the server's current k, with the /metrics
page kept from before and after every level (the sweep itself reads only the totals), turned
into per-level `LevelMeasure`s and written beside the run as `tune.json`; for `--apply`, the
rollout's measuring port (the same sweep at the new k) and the tune runs of a runs directory.
I/O through `bench.runner.BenchRunner`; everything it computes is in the pure modules."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tpwarden.cluster.bench.plan import BenchError, BenchOptions
from tpwarden.cluster.bench.runner import BenchRun, BenchRunner, Progress, write_json
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.rollout.ports import measurement_rows
from tpwarden.cluster.rollout.sequence import Measurement
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.tune.measure import NoSpecCounters, window
from tpwarden.cluster.tune.model import LevelMeasure


class RecordingRunner(BenchRunner):
    """A BenchRunner that keeps every /metrics page it reads (two per level, in order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pages: list[str | None] = []

    def _metrics(self) -> str | None:
        text = super()._metrics()
        self.pages.append(text)
        return text


def measure(
    runner: RecordingRunner, opts: BenchOptions, pre: Mapping[str, Any]
) -> tuple[BenchRun, list[LevelMeasure]]:
    runner.pages = []
    run = runner.run(opts, pre)
    return run, levels_from(run, runner.pages)


def levels_from(run: BenchRun, pages: Sequence[str | None]) -> list[LevelMeasure]:
    if len(pages) != 2 * len(run.outcomes):
        raise BenchError(f"{len(pages)} /metrics pages for {len(run.outcomes)} levels")
    out = []
    for i, o in enumerate(run.outcomes):
        before, after = pages[2 * i], pages[2 * i + 1]
        if before is None or after is None:
            raise BenchError(f"c{o.level}: /metrics unreadable before or after the level")
        try:
            counts = window(before, after)
        except NoSpecCounters:
            raise BenchError(
                "the server exports no spec-decode counters: no drafter to tune"
            ) from None
        except ValueError as e:
            raise BenchError(f"c{o.level}: {e}") from None
        itl = o.result.itl_p50_ms
        if itl is None or counts.drafts <= 0:
            raise BenchError(f"c{o.level}: no median ITL or no drafts in the level")
        out.append(LevelMeasure(o.level, counts, itl, o.result.aggregate_tok_s))
    return out


def level_json(lv: LevelMeasure) -> dict[str, Any]:
    c = lv.counts
    return {
        "concurrency": lv.concurrency,
        "drafts": c.drafts,
        "draft_tokens": c.draft_tokens,
        "accepted_per_pos": list(c.accepted_per_pos),
        "itl_p50_ms": lv.itl_ms,
        "aggregate_tok_s": lv.aggregate_tok_s,
    }


def save(run_dir: Path, doc: Mapping[str, Any]) -> None:
    """`tune.json` beside the sweep's manifest and table: what `--from-run` reads back."""
    write_json(run_dir / "tune.json", doc)


def tune_docs(runs_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """(run id, tune.json) of every tune run under `runs_dir`, oldest first; unreadable ones
    are skipped (a run still being written)."""
    if not runs_dir.is_dir():
        return []
    out = []
    for d in sorted(p for p in runs_dir.iterdir() if (p / "tune.json").is_file()):
        try:
            out.append((d.name, json.loads((d / "tune.json").read_text())))
        except (OSError, ValueError):
            continue
    return out


def as_measurement(run: BenchRun, spec: ClusterSpec) -> Measurement:
    """The tune sweep as the rollout's baseline (so --apply does not sweep the old k twice)."""
    return Measurement(
        measurement_rows(run.rows()),
        run_dir=str(run.dir),
        config_hash=spec.config_hash(),
        taken_at=time.time(),
    )


class SweepMeasurer:
    """The rollout's measuring port for `--apply`: the tune run's own sweep (levels, prompts,
    lengths) on the new config, recording /metrics so the new k's per-position counts are kept
    too (`levels`; None at k=0, where the server has no drafter and no counters)."""

    def __init__(
        self, opts: BenchOptions, runs_dir: Path | None, on_progress: Progress | None = None
    ) -> None:
        self.opts = opts
        self.runs_dir = runs_dir
        self.on_progress = on_progress
        self.levels: list[LevelMeasure] | None = None

    def __call__(self, spec: ClusterSpec, label: str) -> Measurement:
        with Controller(spec) as ctl:
            runner = RecordingRunner(ctl, self.runs_dir, on_progress=self.on_progress)
            run = runner.run(self.opts, runner.preflight())
        try:
            self.levels = levels_from(run, runner.pages)
        except BenchError:
            self.levels = None
        return as_measurement(run, spec)
