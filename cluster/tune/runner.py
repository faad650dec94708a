"""`tune drafter`'s measurement: one bench sweep at the server's current k, with the /metrics
page kept from before and after every level (the sweep itself reads only the totals), turned
into per-level `LevelMeasure`s and written beside the run as `tune.json`. I/O through
`bench.runner.BenchRunner`; everything it computes is in the pure modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tpwarden.cluster.bench.plan import BenchError, BenchOptions
from tpwarden.cluster.bench.runner import BenchRun, BenchRunner, write_json
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
