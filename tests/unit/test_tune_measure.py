"""Two /metrics pages -> a level's per-position counts (cluster.tune.measure), on the fixtures
in fixtures/tune (README: generated with vLLM's counter definitions, not captured) and on real
captured pages without spec decode (fixtures/real/metrics, reference samples)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.tune.measure import NoSpecCounters, per_position, window

TUNE = Path(__file__).parent / "fixtures" / "tune"
REAL = Path(__file__).parents[1] / "fixtures" / "real" / "metrics"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_window_reads_the_level_counts_from_two_pages():
    before = _read(TUNE / "v1-layout_k3_ngram_before.prom.txt")
    after = _read(TUNE / "v1-layout_k3_ngram_after.prom.txt")
    counts = window(before, after)
    assert counts == DraftCounts(4000, (2600, 1500, 800), draft_tokens=11000)
    assert counts.k == 3 and counts.fill == pytest.approx(11000 / 12000)
    # the *_created gauges (epoch seconds) never leak into a position
    assert per_position(after) == {0: 3300.0, 1: 1920.0, 2: 1030.0}


def test_window_refuses_pages_in_the_wrong_order():
    before = _read(TUNE / "v1-layout_k3_ngram_before.prom.txt")
    after = _read(TUNE / "v1-layout_k3_ngram_after.prom.txt")
    with pytest.raises(ValueError, match="restarted"):
        window(after, before)


@pytest.mark.parametrize(
    "name",
    [
        "v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt",
        "v0.2-era_aioprometheus_gpu-cache-usage.prom.txt",
    ],
)
def test_real_pages_without_a_drafter_say_so(name):
    text = _read(REAL / name)
    with pytest.raises(NoSpecCounters):
        window(text, text)


def _page(drafts: dict[str, float], per_pos: dict[tuple[str, int], float]) -> str:
    lines = ["# TYPE vllm:spec_decode_num_drafts counter"]
    lines += [f'vllm:spec_decode_num_drafts_total{{engine="{e}"}} {v}' for e, v in drafts.items()]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",position="{p}"}} {v}'
        for (e, p), v in per_pos.items()
    ]
    return "\n".join(lines) + "\n"


def test_engines_are_summed_and_a_missing_proposed_counter_is_none():
    before = _page({"0": 0, "1": 0}, {("0", 0): 0, ("1", 0): 0, ("0", 1): 0, ("1", 1): 0})
    after = _page({"0": 100, "1": 50}, {("0", 0): 60, ("1", 0): 30, ("0", 1): 20, ("1", 1): 10})
    assert window(before, after) == DraftCounts(150, (90, 30), draft_tokens=None)


def test_a_changed_k_between_pages_is_refused():
    before = _page({"0": 0}, {("0", 0): 0, ("0", 1): 0})
    after = _page({"0": 10}, {("0", 0): 5, ("0", 1): 2, ("0", 2): 1})
    with pytest.raises(ValueError, match="k changed"):
        window(before, after)


def test_not_a_metrics_page():
    with pytest.raises(ValueError):
        window("not exposition {{{", "x")
