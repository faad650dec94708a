"""Where the bench client runs, what it sends, and what a rollout keeps of its figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tpwarden.cluster.bench.plan import BenchOptions, bench_argv, client_base_url, client_plan
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.rollout.edit import check_guard, parse_guard
from tpwarden.cluster.rollout.ports import QUICK_LEVELS, measurement_rows


@pytest.fixture
def spec():
    return load_inventory(Path(__file__).parent / "inventories" / "good.yml")


def test_client_off_the_head_reaches_the_head_by_its_cluster_address(spec):
    spec = dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, host="0.0.0.0"))
    worker = spec.workers[-1]
    opts = BenchOptions(kind="sweep", levels=(8,), client_node=worker.name)
    plan = client_plan(spec, opts, 8, 0, "r1")
    assert plan.node == worker.name and plan.gpus is None
    argv = bench_argv(spec, opts, 8, 0)
    url = argv[argv.index("--base-url") + 1]
    assert url == client_base_url(spec, worker)
    assert url == f"http://{spec.head.vllm_host_ip}:{spec.serving.port}"
    on_head = bench_argv(spec, BenchOptions(kind="sweep", levels=(8,)), 8, 0)
    assert client_plan(spec, BenchOptions(kind="sweep", levels=(8,)), 8, 0, "r").node == (
        spec.head.name
    )
    assert on_head[on_head.index("--base-url") + 1] == client_base_url(spec)


def test_unknown_client_node_or_unreachable_api_is_bad_input(spec):
    with pytest.raises(ConfigError):
        client_plan(spec, BenchOptions(kind="sweep", levels=(1,), client_node="node9"), 1, 0, "r")
    local = dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, host="127.0.0.1"))
    with pytest.raises(ConfigError, match="cannot reach"):
        bench_argv(local, BenchOptions(kind="sweep", levels=(1,), client_node="node2"), 1, 0)


def test_sweep_with_random_tokens(spec):
    opts = BenchOptions(kind="sweep", levels=(1, 32), dataset="random", random_input_len=512)
    argv = bench_argv(spec, opts, 32, 1)
    assert argv[argv.index("--dataset-name") + 1] == "random"
    assert argv[argv.index("--random-input-len") + 1] == "512"
    assert argv[argv.index("--max-concurrency") + 1] == "32"
    assert opts.to_json()["prompts"] is None


def test_rollout_rows_keep_acceptance_and_tokens_per_step_and_guards_name_them():
    bench_rows = [
        {"level": 1, "aggregate_tok_s": 12.6, "per_stream_tok_s": 12.7, "ttft_p50_ms": 427.0,
         "itl_p50_ms": 185.0, "acceptance_pct": 20.0, "tokens_per_step": 2.39},
        {"level": 8, "aggregate_tok_s": 72.2, "acceptance_pct": None, "tokens_per_step": 2.3},
    ]  # fmt: skip
    rows = measurement_rows(bench_rows)
    assert rows[1]["acceptance"] == 20.0 and rows[1]["tokens_per_step"] == 2.39
    assert "acceptance" not in rows[8] and rows[8]["tokens_per_step"] == 2.3
    assert QUICK_LEVELS == (1, 8, 32)  # the field report's rollout table
    after = {1: {"acceptance": 41.0, "tokens_per_step": 2.23}}
    assert check_guard(parse_guard("c=1 acceptance >= +50%"), rows, after).ok
    assert not check_guard(parse_guard("c=1 tokens_per_step >= -5%"), rows, after).ok
