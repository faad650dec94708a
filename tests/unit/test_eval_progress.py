"""A night-long eval that reports itself (issue 34, item 4): lm-eval's "Requesting API" bar
parsed from the client's log, the request rate measured over a sliding window, the ETA from it,
the one-line renderer, the client watched while it runs, and the suite summary that names a
task resumed after a server restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.containers.gateway import wait_watching
from tpwarden.cluster.containers.platform import ImagePlatform, go_arch
from tpwarden.cluster.errors import DockerError
from tpwarden.cluster.eval.progress import (
    Sample,
    TaskWatch,
    estimate,
    fmt_duration,
    measured_rate,
    parse_bar,
    render_progress,
    render_summary,
    suite_summary,
)

# what tqdm writes to a non-terminal: carriage returns, no newline until the bar closes
LOG = (
    "2026-12-04:08:00:01 INFO [evaluator.py:305] Building contexts for gsm8k on rank 0...\n"
    "Requesting API:   0%|          | 0/1319 [00:00<?, ?it/s]\r"
    "Requesting API:   3%|▎         | 40/1319 [00:12<06:24,  3.33it/s]\r"
    "Requesting API:   6%|▋         | 82/1319 [00:24<06:10,  3.34it/s]"
)


def test_the_bar_is_read_from_the_last_update():
    assert parse_bar(LOG) == (82, 1319)
    assert parse_bar("Building contexts for gsm8k\n") is None
    # another tqdm bar (lm-eval's own) is not the request counter
    assert parse_bar("Running loglikelihood requests:  50%|█| 5/10 [00:01<00:01]") is None


def test_rate_is_measured_over_the_window_so_the_eta_follows_the_server_now():
    fast = [Sample(t, 10 * t) for t in range(0, 600, 60)]  # 10 req/s for ten minutes
    slow = [Sample(600 + t, fast[-1].done + 2 * t) for t in range(60, 660, 60)]  # then 2 req/s
    samples = fast + slow
    assert measured_rate(samples, window_s=300) == pytest.approx(2.0)
    assert measured_rate(samples, window_s=10_000) > 2.0  # the whole night would flatter it
    assert measured_rate(samples[:1]) is None
    assert measured_rate([Sample(5, 1), Sample(5, 9)]) is None  # no time passed


def test_eta_is_the_remaining_requests_at_the_measured_rate():
    p = estimate("mmlu", 1, 9, 1, [Sample(0, 0), Sample(100, 500)], total=56168)
    assert p.rate_rps == pytest.approx(5.0) and p.eta_s == pytest.approx((56168 - 500) / 5.0)
    stalled = estimate("mmlu", 1, 9, 1, [Sample(0, 500), Sample(100, 500)], total=56168)
    assert stalled.rate_rps == 0.0 and stalled.eta_s is None  # no honest ETA for a stall
    assert estimate("mmlu", 1, 9, 1, [], None).eta_s is None


def test_the_progress_line():
    p = estimate("gsm8k", 8, 9, 1, [Sample(0, 0), Sample(30, 96)], total=1319)
    assert render_progress(p) == "gsm8k [8/9]: 96/1319 requests (7%), 3.2 req/s, ETA 6m22s"
    p2 = estimate("gsm8k", 8, 9, 2, [], None)
    assert render_progress(p2) == "gsm8k [8/9] attempt 2: preparing (no requests answered yet)"
    assert fmt_duration(9 * 3600 + 30 * 60) == "9h30m" and fmt_duration(None) == "?"


def test_the_watch_keeps_samples_and_starts_over_on_a_new_bar():
    w = TaskWatch("gsm8k", 8, 9, 1, start_s=1000.0)
    assert w.observe("Building contexts\n", 1010.0).done is None
    w.observe(LOG, 1030.0)
    p = w.observe("Requesting API:  10%|█ | 132/1319 [00:40<06:00, 3.3it/s]", 1045.0)
    assert (p.done, p.total) == (132, 1319) and p.rate_rps == pytest.approx(50 / 15)
    p = w.observe("no bar in this chunk", 1050.0)  # the last count stands
    assert p.done == 132
    p = w.observe("Requesting API:   1%| | 3/20 [00:01<00:05, 3it/s]", 1060.0)
    assert (p.done, p.total, p.rate_rps) == (3, 20, None)


class FakeApi:
    def __init__(self, running_polls: int):
        self.running = running_polls
        self.since: list[int] = []

    def inspect_container(self, cid):
        self.running -= 1
        return {"State": {"Running": self.running >= 0}}

    def logs(self, cid, stdout, stderr, since):
        self.since.append(since)
        return LOG.encode()

    def wait(self, cid, timeout):
        return {"StatusCode": 0}


def test_the_client_is_watched_while_it_runs_then_waited_on():
    api, seen = FakeApi(running_polls=3), []
    rc = wait_watching(api, "c" * 64, 60, seen.append, poll_s=0, sleep=lambda s: None)
    assert rc == 0 and len(seen) == 3 and parse_bar(seen[-1]) == (82, 1319)
    assert api.since == sorted(api.since)  # each poll asks only for what is new
    with pytest.raises(DockerError, match="still running"):
        wait_watching(FakeApi(10**6), "c" * 64, 0, seen.append, poll_s=0, sleep=lambda s: None)
    unwatched = FakeApi(0)
    assert wait_watching(unwatched, "c" * 64, 60, None) == 0 and unwatched.since == []


def test_an_exit_is_seen_within_a_second_while_the_log_is_read_every_poll():
    # a suite of short tasks lost up to a whole poll (30 s) per task waiting for the next look
    t = [0.0]
    api, seen, slept = FakeApi(running_polls=65), [], []

    def sleep(s):
        slept.append(s)
        t[0] += s

    rc = wait_watching(api, "c" * 64, 600, seen.append, poll_s=30, sleep=sleep, clock=lambda: t[0])
    assert rc == 0 and set(slept) == {1.0} and len(slept) == 65  # exit seen at the next second
    assert len(seen) == 3 and api.since == sorted(api.since)  # log read at 0, 30 and 60 s


MANIFEST = {
    "attempts": [
        {"task": "mmlu", "attempt": 1, "rc": 0},
        {"task": "kmmlu", "attempt": 1, "rc": 1},
        {"task": "kmmlu", "attempt": 2, "rc": 0},
    ],
    "restarts": [{"task": "kmmlu", "attempt": 1, "resume": True, "server_down_seen": True}],
    "kept": ["mmlu"],
}
ROWS = [
    {"task": "mmlu", "path": "loglikelihood/completions", "score": 0.879, "metric": "acc,none",
     "n": 14042},
    {"task": "kmmlu", "path": "loglikelihood/completions", "score": 0.645, "metric": "acc,none",
     "n": 35030},
    {"task": "gsm8k", "path": "generate/chat", "score": 0.945,
     "metric": "exact_match,strict-match", "n": 1319},
]  # fmt: skip


def test_the_suite_summary_names_the_resumed_and_the_kept_tasks():
    summary = suite_summary({**MANIFEST, "attempts": [*MANIFEST["attempts"],
                                                      {"task": "gsm8k", "attempt": 1}]}, ROWS)  # fmt: skip
    how = {s["task"]: (s["how"], s["attempts"], s["resumes"]) for s in summary}
    assert how == {"mmlu": ("kept", 1, 0), "kmmlu": ("resumed", 2, 1), "gsm8k": ("ran", 1, 0)}
    lines = render_summary("field", summary)
    assert lines[0] == "suite field:"
    assert "  kmmlu: 64.5 (acc,none, n=35030) resumed" in lines
    assert "resumed after a failure (server restart): kmmlu" in lines
    assert "kept from an earlier invocation (--resume): mmlu" in lines


def test_the_runner_reports_progress_and_writes_it_beside_the_run(tmp_path, monkeypatch):
    import httpx
    from tpwarden.cluster.eval import runner as rmod
    from tpwarden.cluster.eval.plan import EvalOptions
    from tpwarden.cluster.inventory.load import load_inventory

    spec = load_inventory(Path(__file__).parent / "inventories" / "good.yml")
    results = {
        "results": {"tpwarden_mc": {"acc,none": 0.5}},
        "n-samples": {"tpwarden_mc": {"original": 6, "effective": 6}},
    }

    def fake_run(gw, plan, files, secrets, timeout_s, watch):
        watch("Requesting API:  50%|█ | 12/24 [00:01<00:01, 12it/s]")
        watch("Requesting API: 100%|█ | 24/24 [00:02<00:00, 12it/s]\n")
        return 0, "ok", {"results_x.json": json.dumps(results).encode()}, {}

    monkeypatch.setattr(rmod, "run_container", fake_run)

    class FakeCtl:
        def __init__(self):
            self.spec = spec

        def docker(self, node):
            return ClientEngine()  # the client image is here, built for this node

        def api_key(self):
            return None

    seen = []
    ok = httpx.MockTransport(lambda req: httpx.Response(200, json={}))
    runner = rmod.EvalRunner(
        FakeCtl(), tmp_path / "runs", http=httpx.Client(transport=ok), on_task_progress=seen.append
    )
    pre = {
        "ok": True, "verdict": "ready", "notes": [], "probe_ok": True,
        "server": {"max_model_len": 4096, "version": "0.33.0"},
        "server_defaults": {"thinking": False, "chat_template_kwargs": {}},
    }  # fmt: skip
    tasks = str(Path(__file__).parents[1] / "lab" / "eval_tasks")
    opts = EvalOptions(tasks=("tpwarden_mc",), include_path=tasks, client_image="img")
    run_dir, manifest, rows = runner.run(opts, pre)
    assert [(p.task, p.position, p.count, p.done, p.total) for p in seen] == [
        ("tpwarden_mc", 1, 1, 12, 24),
        ("tpwarden_mc", 1, 1, 24, 24),
    ]
    assert json.loads((run_dir / "progress.json").read_text())["done"] == 24
    assert manifest["summary"][0]["how"] == "ran" and rows[0]["score"] == 0.5


def _fake_runner(tmp_path, monkeypatch, outcomes):
    """An EvalRunner over a fake client: `outcomes` maps task -> (rc, log, results doc)."""
    import httpx
    from tpwarden.cluster.eval import runner as rmod
    from tpwarden.cluster.inventory.load import load_inventory

    spec = load_inventory(Path(__file__).parent / "inventories" / "good.yml")

    def fake_run(gw, plan, files, secrets, timeout_s, watch):
        task = next(t for t in outcomes if plan.name.endswith(t.replace("_", "-")))
        rc, log, doc = outcomes[task]
        return rc, log, ({"results_x.json": json.dumps(doc).encode()} if doc else {}), {}

    monkeypatch.setattr(rmod, "run_container", fake_run)

    class FakeCtl:
        def __init__(self):
            self.spec = spec

        def docker(self, node):
            return ClientEngine()  # the client image is here, built for this node

        def api_key(self):
            return None

    ok = httpx.MockTransport(lambda req: httpx.Response(200, json={"version": "0.33.0"}))
    return rmod.EvalRunner(FakeCtl(), tmp_path / "runs", http=httpx.Client(transport=ok))


PRE = {
    "ok": True, "verdict": "ready", "notes": [], "probe_ok": True,
    "server": {"max_model_len": 4096, "version": "0.33.0"},
    "server_defaults": {"thinking": False, "chat_template_kwargs": {}},
}  # fmt: skip


def test_a_suite_goes_on_past_a_failed_task_and_says_so(tmp_path, monkeypatch):
    from tpwarden.cluster.eval.plan import EvalOptions

    good = {"results": {"gsm8k": {"exact_match,strict-match": 0.9}},
            "n-samples": {"gsm8k": {"original": 5, "effective": 5}}}  # fmt: skip
    runner = _fake_runner(tmp_path, monkeypatch, {
        "mmlu_pro": (2, "Traceback ...\nKeyError: 'question'", None),  # not the server's fault
        "gsm8k": (0, "ok", good),
    })  # fmt: skip
    opts = EvalOptions(tasks=("mmlu_pro", "gsm8k"), client_image="img", keep_going=True)
    run_dir, manifest, rows = runner.run(opts, PRE)
    assert [r["task"] for r in rows] == ["mmlu_pro", "gsm8k"]
    assert rows[0]["score"] is None and rows[0]["error"] == "KeyError: 'question'"
    assert rows[1]["score"] == 0.9
    assert [f["task"] for f in manifest["failed"]] == ["mmlu_pro"]
    assert [s["how"] for s in manifest["summary"]] == ["failed", "ran"]
    assert "FAILED (no score; the run went on): mmlu_pro" in render_summary(
        "x", manifest["summary"]
    )
    runner.runs_dir = tmp_path / "runs2"  # run ids are per second
    with pytest.raises(Exception, match="exited 2"):  # without keep_going: stops (as before)
        runner.run(EvalOptions(tasks=("mmlu_pro", "gsm8k"), client_image="img"), PRE)


def test_the_cli_exits_1_with_the_rows_when_a_suite_task_failed(tmp_path, monkeypatch):
    from tpwarden.cluster.cli import app
    from tpwarden.cluster.cli import eval as cli_eval
    from typer.testing import CliRunner

    seen = {}

    class FakeRunner:
        def __init__(self, ctl, runs_dir, **kw):
            pass

        def preflight(self):
            return PRE

        def run(self, opts, pre, resume=None):
            seen["opts"] = opts
            manifest = {"failed": [{"task": "humaneval", "error": "x"}], "summary": []}
            rows = [{"task": "humaneval", "score": None, "error": "x"},
                    {"task": "gsm8k", "score": 0.9}]  # fmt: skip
            return tmp_path / "run", manifest, rows

    class NoCluster:
        def __init__(self, spec, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cli_eval, "EvalRunner", FakeRunner)
    monkeypatch.setattr(cli_eval, "Controller", NoCluster)
    monkeypatch.setattr(cli_eval, "_missing_data", lambda *a: None)
    inv = str(Path(__file__).parent / "inventories" / "good.yml")
    result = CliRunner().invoke(app, ["eval", "run", "-i", inv, "--suite", "field", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["exit_code"] == 1 and len(doc["rows"]) == 2
    assert doc["error"]["hint"].startswith(f"tpwarden eval run -i {inv} --suite field --resume")
    assert seen["opts"].keep_going and seen["opts"].suite == "field"


class ClientEngine:
    """The head's engine as the runner's client-image check sees it (run_container is faked)."""

    def image_platform(self, image):
        return ImagePlatform(id="sha256:" + "e" * 64, architecture=go_arch(self.architecture()))

    def architecture(self):
        return "aarch64"
