"""tpwarden's vLLM argv against vLLM 0.33.0's real `vllm serve` parser (tools/vllm/check_argv.py).

Needs the venv made by tools/vllm/install-cpu.sh; its path comes from TPWARDEN_VLLM_VENV
(default /opt/tpwarden-vllm-0.33.0). A missing venv is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.vllm_parser

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "vllm" / "check_argv.py"
DUMP = ROOT / "cluster" / "vllm" / "dump_serve_flags.py"
TABLE = ROOT / "cluster" / "data" / "vllm_serve_flags_0.33.0.json"
EXAMPLES = json.loads((Path(__file__).parent / "argv_examples.json").read_text(encoding="utf-8"))
BY_NAME = {case["name"]: case for case in EXAMPLES}
TIMEOUT_S = 300


def _venv_python() -> Path:
    venv = Path(os.environ.get("TPWARDEN_VLLM_VENV", "/opt/tpwarden-vllm-0.33.0"))
    python = venv / "bin" / "python"
    if not python.is_file():
        pytest.fail(
            f"vLLM venv not found at {venv} (TPWARDEN_VLLM_VENV); "
            "run tools/vllm/install-cpu.sh first (VLLM_VENV=... to choose the path)"
        )
    return python


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    return env


def _check(cases: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [str(_venv_python()), str(CHECK)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, Any]]:
    rc, out = _check(EXAMPLES)
    assert rc == 1, "the invalid examples must make check_argv exit 1"
    assert out["vllm_version"] == "0.33.0"
    return {r["name"]: r for r in out["results"]}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_example_verdict(verdicts: dict[str, dict[str, Any]], name: str) -> None:
    case, verdict = BY_NAME[name], verdicts[name]
    if case["expect"] == "ok":
        assert verdict["ok"], f"{name}: {verdict['stage']}: {verdict['error']}"
    else:
        assert not verdict["ok"], f"{name} should fail at {case['expect']}"
        assert verdict["stage"] == case["expect"], verdict["error"]


def test_head_values(verdicts: dict[str, dict[str, Any]]) -> None:
    head = verdicts["head-rank0"]
    assert head["launch_mode"] == "api_server"
    assert head["values"] == {
        "model_tag": "/models/GLM-5.3-Flash-NVFP4",
        "tensor_parallel_size": 4,
        "nnodes": 4,
        "node_rank": 0,
        "master_addr": "192.168.100.11",
        "master_port": 29501,
        "headless": False,
        "api_server_count": None,
        "host": "0.0.0.0",
        "port": 8000,
        "speculative_config": {
            "method": "dflash",
            "model": "/models/GLM-5.3-Flash-DFlash2",
            "num_speculative_tokens": 3,
        },
        "kv_cache_dtype": "fp8",
        "kv_cache_memory_bytes": 17179869184,
        "max_model_len": 1048576,
        "enforce_eager": True,
        "default_chat_template_kwargs": {"enable_thinking": False},
        "served_model_name": ["glm-5.3-flash"],
        "distributed_executor_backend": None,
        "quantization": "compressed-tensors",
    }


def test_worker_runs_headless(verdicts: dict[str, dict[str, Any]]) -> None:
    worker = verdicts["worker-rank1-headless"]
    assert worker["launch_mode"] == "headless"
    assert worker["values"]["headless"] is True
    assert worker["values"]["node_rank"] == 1


def test_valid_only_exits_zero() -> None:
    valid = [c["argv"] for c in EXAMPLES if c["expect"] == "ok"]
    rc, out = _check(valid)
    assert rc == 0 and out["all_ok"], out


def test_flag_table_matches_real_parser(tmp_path: Path) -> None:
    fresh = tmp_path / "flags.json"
    subprocess.run(
        [str(_venv_python()), str(DUMP), "--output", str(fresh)],
        env=_env(),
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    checked_in = json.loads(TABLE.read_text(encoding="utf-8"))
    generated = json.loads(fresh.read_text(encoding="utf-8"))
    assert generated["positional"] == checked_in["positional"] == ["model_tag"]
    assert generated["options"] == checked_in["options"], (
        "cluster/data/vllm_serve_flags_0.33.0.json is stale: rerun cluster/vllm/dump_serve_flags.py"
    )
