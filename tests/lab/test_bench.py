"""`tpwarden bench` on the lab: the real `vllm bench serve` (client image with vLLM 0.33.0)
against the simulated 4-node server. A small sweep produces the table and a run directory whose
numbers equal the saved JSON; a clock-cap change shows up in `compare`; the client container
is CPU-only, on the host network, and gone afterwards."""

from __future__ import annotations

import json
from dataclasses import replace

import docker
import pytest
from tpwarden.cluster.bench.manifest import manifest_diff
from tpwarden.cluster.bench.parse import load_result_text
from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRunner, compare_rows, load_run
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab.client_image import CLIENT_LATEST

pytestmark = pytest.mark.lab


@pytest.fixture
def ctl(lab, tmp_path):
    if not docker.from_env().images.list(name=CLIENT_LATEST):
        pytest.skip(f"{CLIENT_LATEST} not built (no vLLM venv on this machine)")
    spec = load_inventory(lab.inventory)
    # deterministic acceptance so the table's shape is testable
    env = {**spec.serving.env, "VLLM_SIM_SPEC_ACCEPTANCE": "expected"}
    spec = replace(spec, serving=replace(spec.serving, env=env))
    with Controller(spec, state_dir=tmp_path / "state", node_timeout_s=5) as c:
        result = c.up(timeout_s=300, replace=True)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        try:
            yield c
        finally:
            c.clocks("reset")
            c.down()


def _bench_containers(cluster: str) -> list:
    """This lane's bench clients: the other lane's tests run their own (a rollout's --bench)."""
    labels = ["io.tpwarden.component=bench", f"io.tpwarden.cluster={cluster}"]
    return docker.from_env().containers.list(all=True, filters={"label": labels})


@pytest.mark.timeout(600)  # includes the session's lab up and this server's boot
def test_sweep_table_run_dir_and_compare(ctl, tmp_path):
    runner = BenchRunner(ctl, tmp_path / "runs")
    opts = BenchOptions(
        kind="sweep", levels=(1, 4), output_len=48, num_prompts=4, client_image=CLIENT_LATEST
    )
    pre = runner.preflight()
    assert pre["ok"] and pre["server_defaults"]["thinking"] is False
    assert pre["server_defaults"]["drafter_k"] == 3 and pre["server"]["max_model_len"]
    run = runner.run(opts, pre)

    manifest, table = load_run(run.dir)
    rows = {r["level"]: r for r in table["rows"]}
    assert set(rows) == {1, 4}
    for level, row in rows.items():
        raw = load_result_text((run.dir / "results" / f"c{level}.json").read_text())
        assert raw["max_concurrency"] == level and raw["completed"] == 4
        assert row["aggregate_tok_s"] == raw["output_throughput"]
        assert row["ttft_p50_ms"] == raw["median_ttft_ms"]
        assert row["itl_p50_ms"] == raw["median_itl_ms"]
        assert row["per_stream_tok_s"] == pytest.approx(1000 / raw["median_tpot_ms"])
        assert raw["total_output_tokens"] == 4 * 48  # --ignore-eos held
        assert row["acceptance_pct"] and row["tokens_per_step"] > 1  # /metrics deltas
        facts = json.loads((run.dir / "client" / f"c{level}.container.json").read_text())
        assert facts["network_mode"] == "host"
        assert not facts["device_requests"] and not facts["devices"]
        assert all(m["read_only"] for m in facts["mounts"])
        assert facts["exit_code"] == 0
    assert rows[4]["aggregate_tok_s"] > rows[1]["aggregate_tok_s"]
    assert rows[4]["per_stream_tok_s"] < rows[1]["per_stream_tok_s"]
    assert not _bench_containers(ctl.spec.name)  # removed after each level

    # the manifest explains: clocks from every node, KV cache, defaults, processes, temps
    assert set(manifest["nodes"]) == {"node1", "node2", "node3", "node4"}
    for node in manifest["nodes"].values():
        assert node["gpus"][0]["locked_clock_max_mhz"] == 2000
        assert "processes" in node and node["gpus_end"]
    assert manifest["kv_cache"]["kv_cache_tokens"]
    assert manifest["server"]["version"] == "0.33.0"

    # change the clock cap, run again: compare names it
    assert all(r.ok for r in ctl.clocks("cap", 1500))
    run_b = runner.run(replace(opts, levels=(1,)))
    _, table_b = load_run(run_b.dir)
    diffs = manifest_diff(manifest, load_run(run_b.dir)[0])
    caps = [d for d in diffs if "clock cap" in d.fact]
    assert caps and caps[0].a == "2000" and caps[0].b == "1500" and caps[0].likely_cause
    rows_cmp = compare_rows(table["rows"], table_b["rows"], ["aggregate_tok_s"])
    assert rows_cmp[0]["aggregate_tok_s"]["pct"] is not None
    assert not _bench_containers(ctl.spec.name)


def test_refuses_when_server_is_down(lab, tmp_path):
    spec = load_inventory(lab.inventory)
    with Controller(spec, state_dir=tmp_path, node_timeout_s=5) as c:
        c.down()
        runner = BenchRunner(c, tmp_path / "runs")
        from tpwarden.cluster.bench.plan import BenchError

        with pytest.raises(BenchError, match="not healthy"):
            runner.run(BenchOptions(kind="sweep", levels=(1,), client_image=CLIENT_LATEST))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.timeout(600)
def test_prefill_ttft_grows_with_input_length(ctl, tmp_path):
    """`tpwarden bench prefill`: one long random prompt at a time; TTFT and prefill tok/s."""
    runner = BenchRunner(ctl, tmp_path / "runs")
    opts = BenchOptions(
        kind="prefill", levels=(2048, 16384), output_len=1, num_prompts=1,
        backend="openai", client_image=CLIENT_LATEST,
    )  # fmt: skip
    run = runner.run(opts)
    _, table = load_run(run.dir)
    rows = {r["level"]: r for r in table["rows"]}
    assert set(rows) == {2048, 16384}
    for row in rows.values():
        assert row["completed"] == 1 and row["ttft_p50_ms"] > 0 and row["prefill_tok_s"] > 0
    # the simulator charges prefill per prompt token: 8x the input takes clearly longer
    assert rows[16384]["ttft_p50_ms"] > 2 * rows[2048]["ttft_p50_ms"], rows
    assert not _bench_containers(ctl.spec.name)
