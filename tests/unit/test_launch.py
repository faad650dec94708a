"""Launch plans: the argv carries every field setting; secrets never appear in a plan."""

from __future__ import annotations

import json
from pathlib import Path

from tpwarden.cluster.cli import app
from tpwarden.cluster.inventory.load import load_inventory, parse_inventory
from tpwarden.cluster.labels import LABEL_CONFIG_HASH, LABEL_ROLE
from tpwarden.cluster.launch import plan_cluster
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yml"
runner = CliRunner()


def _argv_value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_plan_has_four_nodes_with_field_settings():
    plan = plan_cluster(load_inventory(EXAMPLE))
    assert [c.node for c in plan.containers] == ["node1", "node2", "node3", "node4"]
    for c in plan.containers:
        argv = list(c.vllm_argv)
        assert argv[:3] == ["vllm", "serve", "/models/GLM-5.3-Flash-NVFP4"]
        assert _argv_value(argv, "--tensor-parallel-size") == "4"
        assert _argv_value(argv, "--nnodes") == "4"
        assert _argv_value(argv, "--node-rank") == str(c.rank)
        assert _argv_value(argv, "--master-addr") == "192.168.100.11"
        assert _argv_value(argv, "--master-port") == "29501"
        spec_cfg = json.loads(_argv_value(argv, "--speculative-config"))
        assert spec_cfg == {
            "method": "dflash",
            "model": "/models/GLM-5.3-Flash-DFlash2",
            "num_speculative_tokens": 3,
        }
        assert _argv_value(argv, "--kv-cache-dtype") == "fp8"
        assert _argv_value(argv, "--kv-cache-memory-bytes") == str(16 * 2**30)
        assert _argv_value(argv, "--max-model-len") == "1048576"
        assert "--enforce-eager" in argv
        assert ("--headless" in argv) == (c.role == "worker")
        assert c.env["VLLM_HOST_IP"] == f"192.168.100.1{c.rank + 1}"
        assert c.network_mode == "host" and c.ipc_mode == "host" and c.gpus == "all"
        assert c.labels[LABEL_ROLE] == c.role and c.labels[LABEL_CONFIG_HASH] == plan.config_hash
        assert c.restart_policy == "no"
    head = list(plan.containers[0].vllm_argv)
    assert json.loads(_argv_value(head, "--default-chat-template-kwargs")) == {
        "enable_thinking": False
    }
    assert _argv_value(head, "--served-model-name") == "glm-5.3-flash"
    assert _argv_value(head, "--port") == "8000"


def test_ray_backend_plans_ray_start_then_vllm_on_head():
    text = EXAMPLE.read_text().replace("backend: native ", "backend: ray    ")
    plan = plan_cluster(parse_inventory(text, "ray.yml"))
    head, worker = plan.containers[0], plan.containers[1]
    assert head.command[:3] == ("ray", "start", "--block") and "--head" in head.command
    assert "--address=192.168.100.11:29501" in worker.command and worker.exec_after_start is None
    assert "--distributed-executor-backend" in head.exec_after_start
    assert "--nnodes" not in head.exec_after_start


def test_secrets_never_reach_the_plan(tmp_path, monkeypatch):
    sentinel = "SENTINEL-not-a-real-key-7f3a9c"
    token_file = tmp_path / "hf_token"
    token_file.write_text(sentinel)
    monkeypatch.setenv("TPWARDEN_API_KEY", sentinel)
    text = EXAMPLE.read_text().replace("/etc/tpwarden/secrets/hf_token", str(token_file))
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    for args in (["plan", "-i", str(inv), "--json"], ["plan", "-i", str(inv)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert sentinel not in result.output
    data = json.loads(runner.invoke(app, ["plan", "-i", str(inv), "--json"]).output)
    head_env = data["nodes"][0]["env"]
    # the API key is a file on the head (issue 29 item 8), never a container env var
    assert "VLLM_API_KEY" not in head_env
    assert data["nodes"][0]["secret_files"] == [
        {"path": "/run/tpwarden/tpwarden-api_key", "from": "<secret from env TPWARDEN_API_KEY>"}
    ]
    assert head_env["HF_TOKEN_PATH"] == "/run/secrets/hf_token"
    assert data["nodes"][1]["secret_files"] == []  # only the head serves the API
    assert all("--api-key" not in n["argv"] for n in data["nodes"])


def test_cli_plan_json_and_check():
    result = runner.invoke(app, ["plan", "-i", str(EXAMPLE), "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert len(data["nodes"]) == 4
    assert data["nodes"][3]["argv"][-1] == "--headless" or "--headless" in data["nodes"][3]["argv"]
    assert runner.invoke(app, ["inventory", "check", "-i", str(EXAMPLE)]).exit_code == 0


def test_cli_bad_inventory_exits_2_with_location(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(EXAMPLE.read_text().replace("tensor: 4", "tensor: 3"))
    result = runner.invoke(app, ["inventory", "check", "-i", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:" in result.output and "tpwarden.parallel.tensor" in result.output
    missing = runner.invoke(app, ["plan", "-i", str(tmp_path / "nope.yml")])
    assert missing.exit_code == 2 and "file not found" in missing.output


def test_extra_args_checked_against_the_flag_table(tmp_path):
    from tpwarden.cluster.flag_tables import shipped

    if shipped("0.33.0") is None:
        raise AssertionError("cluster/data/vllm_serve_flags_0.33.0.json is missing")
    text = EXAMPLE.read_text().replace(
        "      port: 8000\n", '      port: 8000\n      extra_args: ["--max-num-seqs", "32"]\n'
    )
    assert "--max-num-seqs" in plan_cluster(parse_inventory(text)).containers[0].vllm_argv
    bad = text.replace("--max-num-seqs", "--max-num-seqz")
    result = runner.invoke(app, ["plan", "-i", str(_write(tmp_path, bad))])
    assert result.exit_code == 2 and "--max-num-seqz" in result.output


def _write(tmp_path, text):
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return path
