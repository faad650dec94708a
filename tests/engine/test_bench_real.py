"""`tpwarden bench sweep` with the real `vllm bench serve` client container against the real
TP=4 server: figures non-zero, speculative acceptance and tokens per step from the real
vllm:spec_decode_* counters."""

from __future__ import annotations

import pytest
from tpwarden.cluster.bench.parse import load_result_text
from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRunner, load_run
from tpwarden.lab.client_image import CLIENT_LATEST

pytestmark = pytest.mark.engine


@pytest.mark.timeout(900)
def test_real_sweep_has_figures_and_spec_decode_from_real_counters(engine_server, tmp_path):
    with engine_server.controller(node_timeout_s=10) as ctl:
        runner = BenchRunner(ctl, tmp_path / "runs")
        pre = runner.preflight()
        assert pre["ok"] and pre["server_defaults"]["drafter_k"] == 3, pre
        opts = BenchOptions(
            kind="sweep", levels=(1, 4), output_len=32, num_prompts=4, client_image=CLIENT_LATEST
        )
        run = runner.run(opts, pre)
    manifest, table = load_run(run.dir)
    rows = {r["level"]: r for r in table["rows"]}
    assert set(rows) == {1, 4}
    for level, row in rows.items():
        raw = load_result_text((run.dir / "results" / f"c{level}.json").read_text())
        assert raw["completed"] == 4 and raw["total_output_tokens"] == 4 * 32
        assert row["aggregate_tok_s"] > 0 and row["ttft_p50_ms"] > 0, row
        # real counters moved: drafts were proposed and verified during this level
        assert row["acceptance_pct"] is not None and row["tokens_per_step"] >= 1.0, row
    assert manifest["server"]["version"].startswith("0.32.0"), manifest["server"]
