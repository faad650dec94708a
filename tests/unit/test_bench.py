"""Benchmark parsing, planning and compare, on recorded `vllm bench serve` files (see
fixtures/bench/README.md for which are captured and which reconstructed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tpwarden.cluster.bench.dataset import sharegpt_json
from tpwarden.cluster.bench.manifest import manifest_diff, summary_facts
from tpwarden.cluster.bench.parse import (
    ResultFormatError,
    kv_cache_facts,
    load_result_text,
    parse_result,
    parse_size_token,
    spec_counters,
    spec_delta,
)
from tpwarden.cluster.bench.plan import (
    DEFAULT_PROMPTS,
    BenchOptions,
    bench_argv,
    client_image,
    client_plan,
    parse_chat_template_kwargs,
)
from tpwarden.cluster.bench.runner import compare_rows
from tpwarden.cluster.containers.job import container_facts
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.secrets import redact_argv

FIX = Path(__file__).parent / "fixtures" / "bench"
PROMPTS = DEFAULT_PROMPTS


def _load(name: str) -> dict:
    return load_result_text((FIX / name).read_text())


@pytest.mark.parametrize(
    "name, conc, agg, ttft, itl",
    [
        (
            "vllm-0.33.0-captured-sweep-c4.json",
            4,
            591.8046795510322,
            48.50318200010406,
            11.963829500018619,
        ),
        ("vllm-0.11.1-reconstructed-sweep-c8.json", 8, 72.2143864598025, 805.0, 226.0),
        ("benchmark_serving-pre0.9-reconstructed-c1.json", 1, 12.7, 427.0, 185.0),
    ],
)
def test_parse_result_across_versions(name, conc, agg, ttft, itl):
    doc = _load(name)
    r = parse_result(doc)
    assert (r.concurrency, r.aggregate_tok_s, r.ttft_p50_ms, r.itl_p50_ms) == (conc, agg, ttft, itl)
    assert r.per_stream_tok_s == pytest.approx(1000 / doc["median_tpot_ms"])
    assert r.completed == doc["completed"]


def test_version_differences_are_tolerated():
    v033, v011 = (
        _load("vllm-0.33.0-captured-sweep-c4.json"),
        _load("vllm-0.11.1-reconstructed-sweep-c8.json"),
    )
    assert "rtfx" in v033 and "latencies" in v033 and "rtfx" not in v011 and "latencies" not in v011
    assert parse_result(v033).schema != parse_result(v011).schema
    old = parse_result(_load("benchmark_serving-pre0.9-reconstructed-c1.json"))
    assert old.failed is None and old.request_goodput is None and old.acceptance_pct is None
    # the result file's own spec-decode keys when no /metrics delta is given
    r = parse_result(v011)
    assert (r.acceptance_pct, r.tokens_per_step, r.spec_source) == (20.0, 2.39, "result")


def test_append_result_file_takes_last_line_and_rejects_other_json():
    one = (FIX / "vllm-0.33.0-captured-sweep-c1.json").read_text()
    two = (FIX / "vllm-0.33.0-captured-sweep-c4.json").read_text()
    lines = json.dumps(json.loads(one)) + "\n" + json.dumps(json.loads(two)) + "\n"
    assert load_result_text(lines)["max_concurrency"] == 4
    with pytest.raises(ResultFormatError):
        load_result_text('{"hello": 1}')


METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{{engine="0",model_name="glm"}} {d}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="glm"}} {t}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="glm"}} {a}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="glm",position="0"}} 5
"""


def test_metrics_deltas_give_acceptance_and_tokens_per_step():
    before = spec_counters(METRICS.format(d=100, t=700, a=140))
    after = spec_counters(METRICS.format(d=1100, t=7700, a=1540))
    delta = spec_delta(before, after)
    assert delta.acceptance_pct == pytest.approx(20.0)  # the report's k=7 Korean prose
    assert delta.tokens_per_step == pytest.approx(2.4)
    r = parse_result(_load("vllm-0.33.0-captured-sweep-c1.json"), delta)
    assert r.spec_source == "metrics" and r.acceptance_pct == pytest.approx(20.0)
    assert spec_counters("vllm:num_requests_running 0\n") is None


def test_kv_cache_line_both_spellings():
    new = "INFO [kv_cache_utils.py:1149] GPU KV cache size: 643,232 tokens, Maximum concurrency for 40,960 tokens per request: 15.70x"
    facts = kv_cache_facts("Available KV cache memory: 16.0 GiB\n" + new)
    assert facts["kv_cache_tokens"] == 643232 and facts["kv_cache_gib"] == 16.0
    assert facts["max_concurrency"] == {"tokens_per_request": 40960, "x": 15.7}
    old = "GPU KV cache size: 1,000 tokens\nMaximum concurrency for 2,048 tokens per request: 0.49x"
    assert kv_cache_facts(old)["kv_cache_tokens"] == 1000
    assert kv_cache_facts("nothing")["reason"]


def test_sizes():
    assert [parse_size_token(x) for x in ("32k", "128K", "4096")] == [32768, 131072, 4096]


@pytest.fixture
def spec():
    return load_inventory(Path(__file__).parent / "inventories" / "good.yml")


def test_the_default_prompts_ship_with_the_package():
    # package data next to the module: a wheel install has them too (tests/packaging checks)
    assert BenchOptions(kind="sweep", levels=(1,)).prompts == PROMPTS and PROMPTS.is_file()
    assert PROMPTS.is_relative_to(Path(__file__).parents[2] / "cluster" / "bench")


def test_client_plan_is_cpu_only_host_network_readonly_model(spec):
    opts = BenchOptions(kind="sweep", levels=(1, 4), prompts=PROMPTS)
    plans = [client_plan(spec, opts, lvl, i, "r1") for i, lvl in enumerate(opts.levels)]
    for p in plans:
        assert p.gpus is None and p.network_mode == "host" and p.restart_policy == "no"
        assert not p.devices and p.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # issue 52 item 4
        assert p.image == spec.serving.image  # the serving image unless overridden
        assert all(m.read_only for m in p.mounts)
        assert spec.serving.model.path in {m.source for m in p.mounts}
        assert p.entrypoint == ("vllm",) and p.command[:2] == ("bench", "serve")
    seeds = [p.command[p.command.index("--seed") + 1] for p in plans]
    assert len(set(seeds)) == 2  # a different seed per level
    argv = bench_argv(spec, opts, 4, 1)
    assert argv[argv.index("--max-concurrency") + 1] == "4" and "--ignore-eos" in argv
    assert argv[argv.index("--tokenizer") + 1] == spec.serving.model.path
    assert client_image(spec, "other:1") == "other:1"


def test_chat_template_kwargs_ride_every_request_and_the_manifest(spec):
    # issue 52 item 8: `vllm bench serve --extra-body` puts them in each request's body
    on = {"enable_thinking": True}
    opts = BenchOptions(kind="sweep", levels=(1,), prompts=PROMPTS, chat_template_kwargs=on)
    argv = bench_argv(spec, opts, 1, 0)
    assert json.loads(argv[argv.index("--extra-body") + 1]) == {"chat_template_kwargs": on}
    assert opts.to_json()["chat_template_kwargs"] == on
    assert "--extra-body" not in bench_argv(spec, BenchOptions(kind="sweep", levels=(1,)), 1, 0)
    completions = BenchOptions(kind="sweep", levels=(1,), backend="openai", chat_template_kwargs=on)
    with pytest.raises(ConfigError, match="chat endpoint only"):
        bench_argv(spec, completions, 1, 0)
    a, b = {"options": {}}, {"options": opts.to_json()}
    diffs = {d.fact: d for d in manifest_diff(a, b)}
    fact = diffs["option per-request chat kwargs"]
    assert fact.likely_cause and fact.b == '{"enable_thinking": true}'
    for bad, why in (("{enable_thinking: true}", "not JSON"), ("[1]", "not a JSON object")):
        with pytest.raises(ValueError, match=why):
            parse_chat_template_kwargs(bad)
    assert parse_chat_template_kwargs('{"enable_thinking": false}') == {"enable_thinking": False}


def test_a_change_of_nccl_network_is_a_likely_cause():
    a = {"nccl_transport": {"summary": "NCCL: IB on 4/4 rank(s) (rocep1s0f1:1/RoCE)"}}
    b = {"nccl_transport": {"summary": "NCCL: IB on 3/4 rank(s), Socket on 1/4 rank(s)"}}
    (diff,) = [d for d in manifest_diff(a, b) if d.fact == "NCCL network"]
    assert diff.likely_cause and "Socket" in diff.b


def test_prefill_argv(spec):
    opts = BenchOptions(
        kind="prefill", levels=(32768,), output_len=1, num_prompts=1, backend="openai"
    )
    argv = bench_argv(spec, opts, 32768, 0)
    assert argv[argv.index("--random-input-len") + 1] == "32768"
    assert argv[argv.index("--dataset-name") + 1] == "random"


def test_sharegpt_conversion_keeps_every_prompt():
    convs = json.loads(sharegpt_json(PROMPTS.read_text(encoding="utf-8")))
    assert len(convs) == 20 and all(len(c["conversations"]) == 2 for c in convs)
    hangul = sum(
        any("\uac00" <= ch <= "\ud7a3" for ch in c["conversations"][0]["value"]) for c in convs
    )
    assert hangul == 20


def test_container_facts_from_inspect():
    attrs = {
        "Name": "/lab-bench-x-c1",
        "Config": {"Image": "img", "Labels": {"a": "b"}, "Cmd": ["bench"]},
        "HostConfig": {
            "NetworkMode": "host",
            "DeviceRequests": None,
            "Mounts": [{"Source": "/m", "Target": "/m", "ReadOnly": True}],
        },
    }
    f = container_facts(attrs)
    assert f["network_mode"] == "host" and f["device_requests"] is None
    assert f["mounts"] == [{"source": "/m", "target": "/m", "read_only": True}]


def test_redaction():
    argv = [
        "python",
        "x",
        "--api-key",
        "abc",
        "--token=zzz",
        "HF_TOKEN=hf_" + "a" * 30,
        "hf_" + "b" * 30,
        "--model",
        "m",
    ]
    out = redact_argv(argv)
    assert out == [
        "python",
        "x",
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "HF_TOKEN=<redacted>",
        "<redacted>",
        "--model",
        "m",
    ]


def test_compare_names_a_clock_cap_change():
    a = json.loads((FIX / "manifest-captured-lab.json").read_text())
    b = copy.deepcopy(a)
    for node in b["nodes"].values():
        for g in node["gpus"]:
            g["locked_clock_max_mhz"] = 1500
    b["server_defaults"]["drafter_k"] = 7
    diffs = manifest_diff(a, b)
    facts = {d.fact: d for d in diffs}
    cap = facts["node1 GPU clock cap (MHz)"]
    assert (cap.a, cap.b, cap.likely_cause) == ("2000", "1500", True)
    assert facts["drafter k"].a == 3 and facts["drafter k"].b == 7
    assert all(d.likely_cause for d in diffs[:2])
    assert manifest_diff(a, a) == []
    assert summary_facts(a)["thinking"] is False


def test_compare_rows_percentages():
    a = [{"level": 1, "aggregate_tok_s": 12.6}, {"level": 32, "aggregate_tok_s": 144.8}]
    b = [{"level": 1, "aggregate_tok_s": 11.1}, {"level": 32, "aggregate_tok_s": 171.0}]
    rows = compare_rows(a, b, ["aggregate_tok_s"])
    assert rows[1]["aggregate_tok_s"]["pct"] == pytest.approx(18.09, abs=0.01)  # the k=3 row
    assert rows[0]["aggregate_tok_s"]["pct"] < 0
