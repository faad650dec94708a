"""`tpwarden eval` planning and comparison, pure: stop capping against vLLM's limit, the path
each task takes, the HumanEval preset, max length, the lm-eval argv and container, result
parsing, and the refusal to compare runs made under different server defaults."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tpwarden.cluster.containers.job import tar_files
from tpwarden.cluster.containers.platform import ImagePlatform, go_arch
from tpwarden.cluster.eval.catalog import PRESETS, preset_for
from tpwarden.cluster.eval.plan import EvalOptions, ServerFacts, task_plan
from tpwarden.cluster.eval.presets import (
    ApiPath,
    EvalError,
    max_length,
    plan_stops,
    scan_task_yaml,
    stop_limit,
)
from tpwarden.cluster.eval.results import (
    comparability,
    compare_scores,
    eval_differences,
    primary_metric,
    score_row,
)
from tpwarden.cluster.eval.runner import RUN_SH, container_plan, local_tasks, presets
from tpwarden.cluster.inventory.load import load_inventory

TASKS = Path(__file__).parents[1] / "lab" / "eval_tasks"
SRV = ServerFacts(
    base_url="http://127.0.0.1:8000",
    model="glm",
    tokenizer="/models/glm",
    max_model_len=131072,
    version="0.33.0",
)


def _wire_stops(until: list[str], eos: str | None) -> list[str]:
    """What lm-eval 0.4.13 sends: `handle_stop_sequences` (lm_eval/models/utils.py) appends
    the EOS string unless it is already in the list."""
    return until + ([eos] if eos is not None and eos not in until else [])


def _argv_json(argv, flag: str) -> dict:
    return json.loads(argv[argv.index(flag) + 1])


# --- the server's stop limit ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "env", "limit"),
    [
        ("0.33.0", {}, 4),  # vllm/envs.py:1157 in 0.33.0: VLLM_MAX_STOP_STRINGS default "4"
        ("0.28.0", {}, 4),  # added by vllm#51447 in 0.28.0
        ("0.27.1", {}, None),  # no limit before
        (None, {}, 4),  # unknown: the strict default
        ("0.33.0", {"VLLM_MAX_STOP_STRINGS": "8"}, 8),  # the server's env changes it
    ],
)
def test_stop_limit_follows_the_server_version_and_env(version, env, limit):
    assert stop_limit(version, env) == limit


def test_five_stops_are_capped_to_four_on_the_wire_and_reported():
    five = ["Q:", "</s>", "<|im_end|>", ".", "\n\n"]
    plan = plan_stops(five, 4)
    assert plan.sent == ("Q:", "</s>", "<|im_end|>", ".") and plan.dropped == ("\n\n",)
    # with any tokenizer EOS, lm-eval would have made it 5 again: the EOS string is a sent stop
    assert len(_wire_stops(list(plan.sent), plan.eos_string or "<|endoftext|>")) == 4
    assert plan.capped and "capped from 5" in plan.describe() and "limit 4" in plan.describe()


def test_short_stop_lists_keep_the_eos_stop_and_stay_under_the_limit():
    plan = plan_stops(["Question:", "</s>", "<|im_end|>"], 4)
    assert not plan.capped and plan.eos_string is None
    assert len(_wire_stops(list(plan.sent), "<|endoftext|>")) == 4


def test_no_limit_on_old_servers_sends_everything():
    plan = plan_stops(["a", "b", "c", "d", "e"], None)
    assert plan.sent == ("a", "b", "c", "d", "e") and not plan.capped


def test_a_preset_that_keeps_more_than_the_limit_is_refused():
    with pytest.raises(EvalError, match="server accepts 2"):
        plan_stops(["a", "b", "c"], 2, keep=["a", "b", "c"])


# --- presets and paths -------------------------------------------------------------------------


def test_each_builtin_task_has_a_path():
    assert PRESETS["mmlu"].path is ApiPath.LOGLIKELIHOOD
    assert PRESETS["kmmlu"].path is ApiPath.LOGLIKELIHOOD
    assert PRESETS["gsm8k"].path is ApiPath.CHAT  # the report's path (issue 34; was completions)
    assert PRESETS["kormedmcqa"].path is ApiPath.CHAT


def test_humaneval_runs_on_raw_completions_with_four_chosen_stops_and_code_eval():
    tp = task_plan("humaneval", PRESETS["humaneval"], SRV, EvalOptions(tasks=("humaneval",)))
    assert tp.preset.path is ApiPath.COMPLETIONS
    assert tp.stops.sent == ("\nclass", "\ndef", "\nif", "\nprint")
    assert tp.stops.dropped == ("\n#",)
    gen = _argv_json(tp.argv, "--gen_kwargs")
    args = _argv_json(tp.argv, "--model_args")
    assert gen["until"] == ["\nclass", "\ndef", "\nif", "\nprint"]
    assert len(_wire_stops(gen["until"], args["eos_string"])) == 4
    assert args["base_url"].endswith("/v1/completions")
    assert "--confirm_run_unsafe_code" in tp.argv and "--apply_chat_template" not in tp.argv
    assert tp.env["HF_ALLOW_CODE_EVAL"] == "1" and tp.env["HF_HUB_OFFLINE"] == "1"


def test_loglikelihood_uses_completions_with_the_local_tokenizer_and_server_max_len():
    opts = EvalOptions(tasks=("mmlu",), limit=20, num_concurrent=16)
    tp = task_plan("mmlu", PRESETS["mmlu"], SRV, opts)
    args = _argv_json(tp.argv, "--model_args")
    assert tp.argv[tp.argv.index("--model") + 1] == "local-completions"
    assert args["tokenizer"] == "/models/glm" and args["tokenizer_backend"] == "huggingface"
    assert args["max_length"] == 131072 and args["num_concurrent"] == 16
    assert "--gen_kwargs" not in tp.argv  # nothing generated
    assert tp.argv[tp.argv.index("--limit") + 1] == "20"
    assert tp.argv[tp.argv.index("--use_cache") + 1] == "/bench/results/cache/mmlu"


def test_chat_path_posts_to_chat_with_the_template_flag():
    tp = task_plan("kormedmcqa", PRESETS["kormedmcqa"], SRV, EvalOptions(tasks=("kormedmcqa",)))
    args = _argv_json(tp.argv, "--model_args")
    assert args["base_url"].endswith("/v1/chat/completions") and "tokenizer" not in args
    assert "--apply_chat_template" in tp.argv
    assert len(_argv_json(tp.argv, "--gen_kwargs")["until"]) == 4


def test_chat_template_kwargs_go_into_chat_requests_and_the_plan_only():
    # issue 52 item 8: thinking on per request, one eval run instead of a restart
    on = {"enable_thinking": True}
    opts = EvalOptions(tasks=("kormedmcqa", "mmlu"), chat_template_kwargs=on)
    chat = task_plan("kormedmcqa", PRESETS["kormedmcqa"], SRV, opts)
    gen = _argv_json(chat.argv, "--gen_kwargs")
    assert gen["chat_template_kwargs"] == on and len(gen["until"]) == 4
    assert chat.to_json()["chat_template_kwargs"] == on
    # a completions-path task renders no chat template: nothing sent, and the plan says so
    ll = task_plan("mmlu", PRESETS["mmlu"], SRV, opts)
    assert "--gen_kwargs" not in ll.argv and ll.to_json()["chat_template_kwargs"] is None
    assert opts.to_json()["chat_template_kwargs"] == on  # the run's manifest records it
    plain = task_plan("kormedmcqa", PRESETS["kormedmcqa"], SRV, EvalOptions(tasks=("x",)))
    assert "chat_template_kwargs" not in _argv_json(plain.argv, "--gen_kwargs")


def test_compare_is_refused_when_the_request_kwargs_differ():
    off, on = _manifest(False), _manifest(False)
    on["options"] = {**on["options"], "chat_template_kwargs": {"enable_thinking": True}}
    refusal = comparability(off, on)
    assert refusal and "request chat template kwargs differ" in refusal.reasons[0]


def test_max_length_never_falls_back_to_lm_evals_2048():
    assert max_length(32768) == 32768
    with pytest.raises(EvalError, match="2048"):
        max_length(None)


def test_local_task_yamls_are_scanned_for_type_stops_and_unsafe_code():
    facts = local_tasks(TASKS)
    assert facts["tpwarden_mc"]["output_type"] == "multiple_choice"
    assert facts["tpwarden_gen5"]["until"] == ("Q:", "</s>", "<|im_end|>", ".", "\n\n")
    assert facts["tpwarden_code"]["unsafe_code"] and len(facts["tpwarden_code"]["until"]) == 5
    assert scan_task_yaml(
        'task: x\noutput_type: generate_until\ngeneration_kwargs:\n  until: ["a", "b"]\n'
    )["until"] == ("a", "b")


def test_local_presets_choose_paths_and_code_never_goes_through_chat():
    opts = EvalOptions(
        tasks=("tpwarden_mc", "tpwarden_gen5", "tpwarden_code"),
        include_path=str(TASKS),
        chat_tasks=("tpwarden_gen5", "tpwarden_code"),
    )
    got = {p.name: p for p in presets(opts, TASKS)}
    assert got["tpwarden_mc"].path is ApiPath.LOGLIKELIHOOD
    assert got["tpwarden_gen5"].path is ApiPath.CHAT
    assert got["tpwarden_code"].path is ApiPath.COMPLETIONS and got["tpwarden_code"].unsafe_code
    assert got["tpwarden_code"].keep == ("\nclass", "\ndef", "\nif", "\nprint")
    with pytest.raises(EvalError, match="no preset"):
        preset_for("nope", None)


# --- container --------------------------------------------------------------------------------


def test_client_container_is_cpu_only_host_network_model_read_only():
    spec = load_inventory(Path(__file__).parent / "inventories" / "good.yml")
    tp = task_plan("mmlu", PRESETS["mmlu"], SRV, EvalOptions(tasks=("mmlu",)))
    plan = container_plan(spec, tp, "client:1", "run1")
    assert plan.gpus is None and plan.network_mode == "host" and not plan.devices
    assert plan.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # the NGC images set "all"
    assert any(m.target == spec.serving.model.path and m.read_only for m in plan.mounts)
    assert plan.entrypoint == ("sh", "/bench/run.sh") and plan.command[:3] == (
        "python", "-m", "lm_eval",
    )  # fmt: skip
    assert plan.labels["io.tpwarden.component"] == "eval"


def test_the_tar_has_parent_directories_for_nested_task_files():
    import io
    import tarfile

    files = {"run.sh": RUN_SH, "tasks/sub/a.yaml": b"x", "results/cache/t_rank0.db": b"y"}
    data = tar_files(files, "/bench", dir_mode=0o777)
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert {"bench/tasks", "bench/tasks/sub", "bench/results/cache"} <= set(names)


# --- results and compare ------------------------------------------------------------------------

LM_EVAL_RESULTS = {  # the shape lm-eval 0.4.13 writes (results_<date>.json)
    "results": {
        "tpwarden_mc": {"alias": "tpwarden_mc", "acc,none": 0.5, "acc_stderr,none": 0.2236},
        "gsm8k": {
            "exact_match,strict-match": 0.9,
            "exact_match_stderr,strict-match": 0.03,
            "exact_match,flexible-extract": 0.92,
        },
    },
    "n-samples": {"tpwarden_mc": {"original": 6, "effective": 6}},
}


def test_primary_metric_and_row():
    assert primary_metric(LM_EVAL_RESULTS["results"]["gsm8k"]) == (
        "exact_match,strict-match", 0.9, 0.03,
    )  # fmt: skip
    row = score_row("tpwarden_mc", "loglikelihood/completions", "-", LM_EVAL_RESULTS)
    assert (row.n, row.score, row.stderr, row.metric) == (6, 0.5, 0.2236, "acc,none")


def _manifest(thinking: bool, path: str = "loglikelihood/completions") -> dict:
    kwargs = {"enable_thinking": thinking}
    return {
        "server_defaults": {"thinking": thinking, "chat_template_kwargs": kwargs},
        "plans": [{"task": "mmlu", "path": path}],
        "options": {"limit": 10, "num_concurrent": 16},
        "lm_eval_version": "0.4.13",
    }


def test_compare_is_refused_when_the_thinking_default_differs():
    refusal = comparability(_manifest(False), _manifest(True))
    assert refusal and any("thinking default differs: A off vs B on" in r for r in refusal.reasons)
    assert comparability(_manifest(False), _manifest(False)) is None
    diffs = {d.fact: d for d in eval_differences(_manifest(False), _manifest(True))}
    assert diffs["thinking"].likely_cause and diffs["thinking"].b is True


def test_compare_is_refused_when_a_task_changed_path():
    refusal = comparability(_manifest(False), _manifest(False, "generate/chat"))
    assert refusal and "mmlu: path" in refusal.reasons[0]


def test_score_deltas_in_points():
    rows = compare_scores(
        [{"task": "mmlu", "path": "p", "score": 0.879, "n": 10}],
        [{"task": "mmlu", "path": "p", "score": 0.85, "n": 10}],
    )
    assert rows[0]["delta_points"] == pytest.approx(-2.9)


def test_compare_cli_refuses_then_names_the_thinking_difference_when_forced(tmp_path):
    from tpwarden.cluster.cli import app
    from typer.testing import CliRunner

    for name, thinking, score in (("a", False, 0.5), ("b", True, 0.6)):
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps(_manifest(thinking)))
        row = {"task": "mmlu", "path": "loglikelihood/completions", "score": score, "n": 6}
        (d / "table.json").write_text(json.dumps({"kind": "eval", "rows": [row]}))
    runner = CliRunner()
    refused = runner.invoke(app, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert refused.exit_code != 0 and "not comparable" in refused.output
    forced = runner.invoke(
        app, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--force", "--json"]
    )
    assert forced.exit_code == 0, forced.output
    doc = json.loads(forced.output)
    assert any(d["fact"] == "thinking" for d in doc["differences"])
    assert doc["rows"][0]["delta_points"] == pytest.approx(10.0)


# --- the lab's HumanEval-style scorer executes code ----------------------------------------------


def test_local_code_task_scores_by_execution(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("code_utils", TASKS / "code_utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = json.loads((TASKS / "code.jsonl").read_text().splitlines()[0])
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    assert mod.process_results(doc, ["    return a + b\n"]) == {"pass@1": 1.0}
    assert mod.process_results(doc, ["    return a - b\n"]) == {"pass@1": 0.0}
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL")
    assert "HF_ALLOW_CODE_EVAL" not in os.environ
    with pytest.raises(RuntimeError, match="HF_ALLOW_CODE_EVAL"):
        mod.process_results(doc, ["    return a + b\n"])


# --- the runner's resume loop, with a fake client container and a fake server ------------------


def test_runner_resumes_a_task_from_its_cache_after_a_server_restart(tmp_path, monkeypatch):
    import httpx
    from tpwarden.cluster.eval import runner as rmod

    spec = load_inventory(Path(__file__).parent / "inventories" / "good.yml")
    health = iter([503, 200])  # down when the client fails, back at the next poll

    def serve(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/health":
            return httpx.Response(next(health, 200))
        if req.url.path == "/version":
            return httpx.Response(200, json={"version": "0.33.0"})
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 4096}]})

    results = json.dumps(LM_EVAL_RESULTS).encode()
    calls: list[dict] = []

    def fake_run(gw, plan, files, secrets, timeout_s, watch):
        assert watch is None  # no progress callback: the client is not watched
        calls.append(dict(files))
        if len(calls) == 1:  # the server went away mid-task: the partial cache comes back
            return 1, "aiohttp ClientConnectorError: Connection refused", {
                "tpwarden_mc_rank0.db": b"partial",
            }, {}  # fmt: skip
        return 0, "ok", {
            "tpwarden_mc_rank0.db": b"full",
            "results_2026.json": results,
            "samples_tpwarden_mc_2026.jsonl": b"{}\n",
        }, {}  # fmt: skip

    monkeypatch.setattr(rmod, "run_container", fake_run)

    class FakeCtl:
        def __init__(self):
            self.spec = spec

        def docker(self, node):
            return ClientEngine()  # the client image is here, built for this node

        def api_key(self):
            return None

    runner = rmod.EvalRunner(
        FakeCtl(),
        tmp_path / "runs",
        http=httpx.Client(transport=httpx.MockTransport(serve)),
        poll_s=0.01,
        restart_wait_s=5,
    )
    pre = {
        "ok": True, "verdict": "ready", "notes": [], "probe_ok": True,
        "server": {"max_model_len": 4096, "version": "0.33.0"},
        "server_defaults": {"thinking": False, "chat_template_kwargs": {}},
    }  # fmt: skip
    opts = EvalOptions(tasks=("tpwarden_mc",), include_path=str(TASKS), client_image="img")
    run_dir, manifest, rows = runner.run(opts, pre)
    assert "results/cache/tpwarden_mc_rank0.db" not in calls[0]
    assert calls[1]["results/cache/tpwarden_mc_rank0.db"] == b"partial"  # resumed from cache
    assert "tasks/tpwarden_mc.yaml" in calls[1] and "run.sh" in calls[1]
    assert [a["rc"] for a in manifest["attempts"]] == [1, 0]
    restart = manifest["restarts"][0]
    assert restart["server_down_seen"] and restart["resume"]
    assert rows[0]["n"] == 6 and rows[0]["path"] == "loglikelihood/completions"
    assert (run_dir / "cache" / "tpwarden_mc_rank0.db").read_bytes() == b"full"
    saved = json.loads((run_dir / "manifest.json").read_text())
    assert saved["restarts"] and saved["plans"][0]["task"] == "tpwarden_mc"

    # resuming a finished run redoes nothing
    runner.run(opts, pre, resume=run_dir)
    assert len(calls) == 2


def test_runner_does_not_resume_a_failure_the_server_did_not_cause(tmp_path, monkeypatch):
    import httpx
    from tpwarden.cluster.eval import runner as rmod

    spec = load_inventory(Path(__file__).parent / "inventories" / "good.yml")
    monkeypatch.setattr(rmod, "run_container", lambda *a: (2, "KeyError: 'question'", {}, {}))

    class FakeCtl:
        def __init__(self):
            self.spec = spec

        def docker(self, node):
            return ClientEngine()  # the client image is here, built for this node

        def api_key(self):
            return None

    ok = httpx.MockTransport(lambda req: httpx.Response(200, json={"version": "0.33.0"}))
    runner = rmod.EvalRunner(FakeCtl(), tmp_path / "runs", http=httpx.Client(transport=ok))
    pre = {
        "ok": True, "verdict": "ready", "notes": [], "probe_ok": True,
        "server": {"max_model_len": 4096, "version": "0.33.0"},
        "server_defaults": {"thinking": False, "chat_template_kwargs": {}},
    }  # fmt: skip
    opts = EvalOptions(tasks=("tpwarden_mc",), include_path=str(TASKS), client_image="img")
    with pytest.raises(EvalError, match="exited 2"):
        runner.run(opts, pre)


class ClientEngine:
    """The head's engine as the runner's client-image check sees it (run_container is faked)."""

    def image_platform(self, image):
        return ImagePlatform(id="sha256:" + "e" * 64, architecture=go_arch(self.architecture()))

    def architecture(self):
        return "aarch64"
