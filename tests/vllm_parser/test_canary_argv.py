"""The canary's `vllm bench serve` command lines against vLLM 0.33.0's real bench parser
(`vllm.benchmarks.serve.add_cli_args`): every warm-up and repeat parses, with the canary's
request-id prefix, fixed seed and --ignore-eos as the client will read them."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from tpwarden.cluster.bench.canary_plan import CanaryOptions, level_plan
from tpwarden.cluster.inventory.load import load_inventory

from .test_real_parser import _env, _venv_python

pytestmark = pytest.mark.vllm_parser

ROOT = Path(__file__).resolve().parents[2]
PARSE = """
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args
p = argparse.ArgumentParser()
add_cli_args(p)
out = []
for argv in json.load(sys.stdin):
    a = p.parse_args(argv)
    out.append({"prefix": a.request_id_prefix, "seed": a.seed, "ignore_eos": a.ignore_eos,
                "max_concurrency": a.max_concurrency, "result_filename": a.result_filename})
print(json.dumps(out))
"""


def test_every_canary_run_parses_with_the_real_bench_parser() -> None:
    spec = load_inventory(ROOT / "inventory.example.yml")
    opts = CanaryOptions(levels=(1, 4), repeats=2, warmups=1)
    cases = []
    for level in opts.levels:
        script = level_plan(spec, opts, level, "r1").command[0]
        cases += [shlex.split(x)[3:] for x in script.splitlines() if x.startswith("vllm bench")]
    proc = subprocess.run(
        [str(_venv_python()), "-c", PARSE], input=json.dumps(cases), capture_output=True,
        text=True, env=_env(), timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == 6
    assert got[0]["prefix"] == "tpwarden-canary-r1-c1-r0-" and got[-1]["max_concurrency"] == 4
    assert {g["seed"] for g in got} == {0} and all(g["ignore_eos"] for g in got)
    assert got[4]["result_filename"] == "c4-r1.json"
