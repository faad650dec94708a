"""Bench, eval and the morning report read typed spec fields (issue 31, item 3): the inventory's
`tpwarden.bench`, `.eval` and `.report` reach `ClusterSpec.bench/.eval/.report` as validated
models, and the jobs read them there (no `getattr` on the raw settings, no second default)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tpwarden.cluster.bench.plan import client_image as bench_image
from tpwarden.cluster.eval.presets import DEFAULT_NUM_CONCURRENT
from tpwarden.cluster.eval.runner import client_image as eval_image
from tpwarden.cluster.inventory.load import parse_inventory
from tpwarden.cluster.settings import BenchSpec, EvalSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example.yml"
THERMAL = "        dir: /var/log/tpwarden/thermal\n"
JOBS = """      bench:
        client_image: bench-client:1
        num_prompts: 7
      eval:
        client_image: eval-client:1
        hf_cache: /srv/hf
        num_concurrent: 4
      report:
        deliver_at: "07:30"
        tz: Asia/Seoul
"""


def test_the_jobs_settings_are_typed_spec_fields() -> None:
    text = EXAMPLE.read_text()
    assert THERMAL in text
    spec = parse_inventory(text.replace(THERMAL, THERMAL + JOBS))
    assert isinstance(spec.bench, BenchSpec) and isinstance(spec.eval, EvalSpec)
    assert (spec.bench.client_image, spec.bench.num_prompts, spec.bench.output_len) == (
        "bench-client:1",
        7,
        512,
    )
    assert (spec.eval.hf_cache, spec.eval.num_concurrent) == ("/srv/hf", 4)
    assert (spec.report.deliver_at, spec.report.tz) == ("07:30", "Asia/Seoul")
    assert bench_image(spec) == "bench-client:1" and eval_image(spec, None) == "eval-client:1"
    assert eval_image(spec, "cli:1") == "cli:1" and bench_image(spec, "cli:2") == "cli:2"
    # eval's client defaults to the bench client, which defaults to the serving image
    no_eval_image = dataclasses.replace(spec, eval=EvalSpec())
    assert eval_image(no_eval_image, None) == "bench-client:1"
    plain = parse_inventory(text)
    assert eval_image(plain, None) == bench_image(plain) == plain.serving.image


def test_eval_concurrency_has_one_default_the_fields() -> None:
    assert DEFAULT_NUM_CONCURRENT == EvalSpec().num_concurrent == 16
