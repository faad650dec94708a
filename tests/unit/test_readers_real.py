"""Bench, /metrics and thermal readers on real files (tests/fixtures/real) and the cases issue 16
found: silent zeros, pre-0.10 metric names, disabled trip points."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tpwarden.cluster.bench.parse import (
    NoCompletedRequests,
    ResultFormatError,
    load_result_text,
    parse_result,
    spec_counters,
    spec_delta,
)
from tpwarden.cluster.control.status_model import server_gauges
from tpwarden.cluster.reports.thermal.remote import live_row
from tpwarden.cluster.vllm.metrics import sum_by_sample
from tpwarden.cluster.vllm.probe import metrics_snapshot
from tpwarden.node.thermal.alerts import AlertPolicy
from tpwarden.node.thermal.zones import SysfsZoneReader, zone_to_record
from tpwarden.watchdog.verdict import progress_signal

REAL = Path(__file__).parents[1] / "fixtures" / "real"
CAPTURED = Path(__file__).parent / "fixtures" / "bench" / "vllm-0.33.0-captured-sweep-c1.json"


def _text(*parts: str) -> str:
    return (REAL.joinpath(*parts)).read_text(encoding="utf-8")


# -- bench results -----------------------------------------------------------------------------
def test_real_bench_result_parses():
    r = parse_result(
        load_result_text(
            _text("bench", "vllm-ascend-0.18.0_qwen2.5-vl-3b_rate1_199-of-200.json.txt")
        )
    )
    assert (r.completed, r.failed) == (199, 1)
    assert r.aggregate_tok_s == pytest.approx(124.585, abs=1e-3)
    assert r.ttft_p50_ms == pytest.approx(98.944, abs=1e-3)
    assert r.per_stream_tok_s == pytest.approx(1000 / 34.45028747967261)


def test_a_result_with_no_completed_request_is_an_error_not_zeros():
    with pytest.raises(NoCompletedRequests, match="no request completed"):
        load_result_text(_text("bench", "xpu-tp4_minimax-m2.7_fp8kv_all-failed.json.txt"))
    doc = json.loads(CAPTURED.read_text())
    doc.update(completed=0, failed=4, output_throughput=0.0, median_ttft_ms=0.0)
    with pytest.raises(NoCompletedRequests, match="4 of 4 requests failed") as exc:
        parse_result(doc)
    assert exc.value.failed == 4
    assert isinstance(exc.value, ResultFormatError)  # callers that catch the root still do
    with pytest.raises(NoCompletedRequests):
        load_result_text(json.dumps(doc))


# -- spec-decode counters ------------------------------------------------------------------------
V1_PAGE = """vllm:spec_decode_num_drafts_total{{engine="0"}} {d}
vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {t}
"""
# V0 servers (< 0.10) export draft and accepted tokens but no drafts counter
V0_PAGE = """vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {t}
vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {a}
vllm:spec_decode_num_emitted_tokens_total{{model_name="m"}} 0
"""


def test_a_missing_spec_counter_is_absent_never_zero():
    delta = spec_delta(
        spec_counters(V1_PAGE.format(d=10, t=70)), spec_counters(V1_PAGE.format(d=20, t=140))
    )
    assert delta.accepted_tokens is None
    assert delta.acceptance_pct is None and delta.tokens_per_step is None
    r = parse_result(json.loads(CAPTURED.read_text()), delta)
    assert r.acceptance_pct != 0.0
    delta = spec_delta(
        spec_counters(V0_PAGE.format(t=700, a=140)), spec_counters(V0_PAGE.format(t=1400, a=280))
    )
    assert delta.acceptance_pct == pytest.approx(20.0)
    assert delta.drafts is None and delta.tokens_per_step is None


# -- /metrics ----------------------------------------------------------------------------------
def test_pre_010_kv_gauge_is_read_under_the_current_name():
    page = _text("metrics", "v0.2-era_aioprometheus_gpu-cache-usage.prom.txt")
    snap = metrics_snapshot(page, 0.0)
    assert snap.error is None
    assert snap.get("vllm:kv_cache_usage_perc") == pytest.approx(0.38849487785658)
    assert server_gauges(sum_by_sample(page))["kv_cache_usage_pct"] == pytest.approx(38.85)


def test_kv_growth_is_a_busy_signal_on_old_servers():
    def page(kv: float) -> str:
        return (
            f'vllm:num_requests_running{{model_name="m"}} 1.0\n'
            f'vllm:gpu_cache_usage_perc{{model_name="m"}} {kv}\n'
            f'vllm:generation_tokens_total{{model_name="m"}} 5.0\n'
        )

    assert progress_signal(metrics_snapshot(page(0.1), 0.0), metrics_snapshot(page(0.4), 10.0))


def test_the_no_vllm_metrics_message_only_on_pages_without_them():
    snap = metrics_snapshot('vllm:cache_config_info{block_size="16"} 1.0\n', 0.0)
    assert snap.error and "none of the watched" in snap.error and "cache_config_info" in snap.error
    snap = metrics_snapshot("python_info 1.0\n", 0.0)
    assert snap.error == "no vllm: metrics in /metrics"
    snap = metrics_snapshot(
        _text("metrics", "v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt"), 0
    )
    assert snap.error is None and snap.get("vllm:kv_cache_usage_perc") == 0.0


# -- thermal trip points -------------------------------------------------------------------------
def _zone(tmp_path: Path, trips: list[tuple[str, int]], temp_mc: int = 45000) -> Path:
    z = tmp_path / "class" / "thermal" / "thermal_zone0"
    z.mkdir(parents=True)
    (z / "type").write_text("acpitz\n")
    (z / "temp").write_text(f"{temp_mc}\n")
    for i, (kind, mc) in enumerate(trips):
        (z / f"trip_point_{i}_type").write_text(kind + "\n")
        (z / f"trip_point_{i}_temp").write_text(f"{mc}\n")
    return tmp_path


def test_a_trip_point_of_zero_is_disabled_not_a_zero_degree_trip(tmp_path: Path):
    root = _zone(tmp_path, [("critical", 0), ("passive", 0), ("critical", 104800)])
    (z,) = SysfsZoneReader(root).read_zones()[0]
    assert z.trips[0].temp_c is None and "disabled" in (z.trips[0].reason or "")
    assert z.critical_c == 104.8
    rec = {"zones": [zone_to_record(z)], "gpus": []}
    assert AlertPolicy(zone_margin_c=10).evaluate(rec) == []


def test_records_written_with_a_zero_trip_do_not_fire_or_show_a_margin():
    # records from agents before this fix may still carry the 0 C trip
    rec = {
        "ts": 0.0,
        "zones": [
            {
                "name": "thermal_zone0",
                "type": "acpitz",
                "temp_c": 45.0,
                "trips": [{"type": "critical", "temp_c": 0.0}],
            }
        ],
        "gpus": [],
    }
    assert AlertPolicy(zone_margin_c=10).evaluate(copy.deepcopy(rec)) == []
    assert live_row("node1", rec, 0.0).margin_c is None
