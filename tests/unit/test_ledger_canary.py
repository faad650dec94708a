"""The canary: its plan (warm-ups and repeats in one client, fixed seed, --ignore-eos, request ids
that say canary), the user-load rule (a probe's blip is not a user), and the runner against a
fake cluster: measured and recorded, deferred before any request, stopped by user load mid-run,
failed on a server that is down; the lease the watchdog reads is taken and given back."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tpwarden.cluster.bench.canary import CanaryRunner, CanaryStatus, Lease
from tpwarden.cluster.bench.canary_plan import (
    CanaryOptions,
    LoadSample,
    level_plan,
    result_name,
    user_load,
)
from tpwarden.cluster.canary_lease import (
    cleared_document,
    lease_document,
    lease_path,
    read_lease,
    write_lease,
)
from tpwarden.cluster.containers.job import JobResult
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.store import Ledger

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yml"
REAL_RESULT = (
    ROOT / "tests/fixtures/real/bench/vllm-ascend-0.18.0_qwen2.5-vl-3b_rate1_199-of-200.json.txt"
)
OPTS = CanaryOptions(levels=(1, 4), repeats=3, warmups=1, num_prompts=4, output_len=64,
                     idle_window_s=2.0)  # fmt: skip


def test_one_client_per_level_runs_warmups_then_repeats_with_canary_request_ids() -> None:
    spec = load_inventory(EXAMPLE)
    plan = level_plan(spec, OPTS, 4, "20260101T000000Z-canary")
    assert plan.entrypoint == ("sh", "-c") and plan.gpus is None and plan.network_mode == "host"
    lines = [shlex.split(x) for x in plan.command[0].splitlines() if x.startswith("vllm")]
    assert len(lines) == 4  # 1 warm-up + 3 repeats
    for i, argv in enumerate(lines):
        assert argv[:3] == ["vllm", "bench", "serve"] and "--ignore-eos" in argv
        assert argv[argv.index("--result-filename") + 1] == result_name(4, i)
        assert (
            argv[argv.index("--seed") + 1] == "0"
            and argv[argv.index("--max-concurrency") + 1] == "4"
        )
        prefix = argv[argv.index("--request-id-prefix") + 1]
        assert prefix == f"tpwarden-canary-20260101T000000Z-canary-c4-r{i}-"
    assert plan.command[0].startswith("set -e\n")


def test_the_definition_names_what_makes_canaries_comparable_not_their_levels() -> None:
    spec = load_inventory(EXAMPLE)
    d = OPTS.definition(spec)
    assert d.startswith("canary:")
    assert CanaryOptions(levels=(1, 8), repeats=7).definition(spec) == CanaryOptions().definition(
        spec
    )
    assert CanaryOptions(output_len=128).definition(spec) != CanaryOptions().definition(spec)


def test_the_shipped_prompts_include_korean_prose() -> None:
    prompts = [json.loads(x)["prompt"] for x in OPTS.prompts.read_text().splitlines()]
    assert any("\uac00" <= ch <= "\ud7a3" for p in prompts for ch in p)  # Hangul syllables
    assert len(prompts) >= OPTS.num_prompts


def S(running: float, waiting: float = 0) -> LoadSample:  # noqa: N802
    return LoadSample(0.0, running, waiting)


@pytest.mark.parametrize(
    ("samples", "own", "busy"),
    [
        ([S(0), S(1), S(0)], 0, False),  # the watchdog's 1-token probe: one sample
        ([S(0), S(1), S(1)], 0, True),  # a user's stream: two in a row
        ([S(0), S(0, 2)], 0, True),  # two at once
        ([S(4), S(4), S(3)], 4, False),  # the canary's own four
        ([S(4), S(5), S(5, 1)], 4, True),  # one more than its own, twice
    ],
)
def test_user_load_rule(samples: list[LoadSample], own: int, busy: bool) -> None:
    assert (user_load(samples, own) is not None) is busy


def test_the_lease_expires_and_malformed_is_none(tmp_path: Path) -> None:
    path = lease_path(str(tmp_path))
    write_lease(path, lease_document(run_id="r1", levels=(1, 4), until=200.0, by="t", now=100.0))
    lease = read_lease(path, 150.0)
    assert lease is not None and lease.run_id == "r1" and lease.levels == (1, 4)
    assert read_lease(path, 200.0) is None  # past its until (a canary killed with -9)
    write_lease(path, cleared_document(run_id="r1", now=160.0))
    assert read_lease(path, 150.0) is None
    Path(path).write_text('{"canary": {"until": "soon", "set_at": 1}}')
    assert read_lease(path, 150.0) is None


# --- the runner against a fake cluster --------------------------------------------------------

PAGE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0"}} 0.02
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{engine="0"}} 0
"""


def _result(tok_s: float) -> bytes:
    line = REAL_RESULT.read_text().splitlines()[-1]
    doc = json.loads(line)
    doc["output_throughput"] = tok_s
    return json.dumps(doc).encode()


@dataclass
class FakeDocker:
    cluster: FakeCtl

    def run_to_completion(self, job) -> JobResult:  # noqa: ANN001
        self.cluster.containers.append(job.plan.name)
        level = int(job.plan.name.rsplit("-c", 1)[1])
        self.cluster.running = level
        runs = OPTS.warmups + OPTS.repeats
        for _ in range(runs):
            self.cluster.drafts += 100
            job.watch("============ Serving Benchmark Result ============\n")  # may raise
        self.cluster.running = 0
        results = {result_name(level, i): _result(12.0 * level + i * 0.1) for i in range(runs)}
        return JobResult(0, "logs", results, {}, 5.0)

    def inspect(self, name: str):  # noqa: ANN201
        return None

    def list_tpwarden(self, cluster: str) -> list:
        return []

    def repo_digests(self, image: str) -> tuple:
        return ()


@dataclass
class FakeCtl:
    spec: object
    state_dir: Path
    healthy: bool = True
    users: Callable[[FakeCtl], float] = lambda ctl: 0.0  # foreign requests now
    running: int = 0
    drafts: int = 0
    reads: int = 0
    probes: int = 0
    containers: list[str] = field(default_factory=list)

    def probe(self, timeout: float = 30.0):  # noqa: ANN201
        self.probes += 1
        return (True, 3.0, None) if self.healthy else (False, None, "refused: connect failed")

    def metrics_page(self, timeout_s: float = 5.0) -> tuple[int, str]:
        self.reads += 1
        page = PAGE.format(running=self.running + self.users(self), waiting=0,
                           drafts=self.drafts, draft_tokens=self.drafts * 3,
                           accepted=self.drafts * 1.2)  # fmt: skip
        return 200, page

    def docker(self, node) -> FakeDocker:  # noqa: ANN001
        return FakeDocker(self)

    def observe(self) -> dict:
        return {n.name: [] for n in self.spec.nodes}

    def api_key(self) -> None:
        return None

    def collector(self, node, args, sudo=False, timeout=60.0) -> dict:  # noqa: ANN001
        if args[0] == "state":
            return {"state": {"cotenants": [], "gpu_users": {"others": []}, "loadavg": [0.1]},
                    "gpus": []}  # fmt: skip
        return {"nvml": {"available": False, "reason": "no driver"}, "gpus": [], "kernel": "k"}

    def fan_out(self, nodes, fn, timeout=None) -> dict:  # noqa: ANN001
        return {n.name: fn(n) for n in nodes}


class RecordingLease(Lease):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def begin(self, run_id: str, levels: tuple[int, ...], until: float) -> None:
        self.calls.append(("begin", run_id))

    def end(self, run_id: str) -> None:
        self.calls.append(("end", run_id))


def _runner(tmp_path: Path, ctl: FakeCtl, lease: Lease) -> CanaryRunner:
    import httpx

    http = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"version": "0.33.0"}))
    )
    clock = iter(range(1_000_000, 2_000_000, 1))
    return CanaryRunner(
        ctl, OPTS, ledger_path=tmp_path / "ledger.sqlite", runs_dir=tmp_path / "runs",  # type: ignore[arg-type]
        http=http, lease=lease, clock=lambda: float(next(clock)), sleep=lambda s: None,
    )  # fmt: skip


def test_an_idle_server_is_measured_and_recorded(tmp_path: Path) -> None:
    ctl = FakeCtl(load_inventory(EXAMPLE), tmp_path)
    lease = RecordingLease()
    out = _runner(tmp_path, ctl, lease).run()
    assert out.status is CanaryStatus.OK, out.reason
    assert [lv.level for lv in out.levels] == [1, 4]
    assert out.levels[0].output_tok_s == pytest.approx(12.2)  # median of the 3 measured
    assert out.levels[0].acceptance_pct == pytest.approx(40.0)  # 1.2 / 3 from the counters
    assert out.recorded_drift and out.record_id is not None  # the first record: by the canary
    assert lease.calls == [("begin", out.run_id), ("end", out.run_id)]
    with Ledger.open(tmp_path / "ledger.sqlite", readonly=True) as led:
        (c,) = led.canaries()
        assert c.status == "ok" and c.levels[4].repeats == 3 and c.run_dir == out.run_dir
        reps = led.repeats(c.id, 1)
        assert [r.warmup for r in reps] == [True, False, False, False]  # every repeat kept
        assert {k.key for k in led.state(c.id)} >= {"gpu_users.others", "load1"}
    assert (Path(out.run_dir) / "canary.json").is_file()
    assert (Path(out.run_dir) / "results" / "c4-r3.json").is_file()


def test_user_load_before_the_canary_defers_it_and_no_request_is_sent(tmp_path: Path) -> None:
    ctl = FakeCtl(load_inventory(EXAMPLE), tmp_path, users=lambda c: 1.0)
    lease = RecordingLease()
    out = _runner(tmp_path, ctl, lease).run()
    assert out.status is CanaryStatus.DEFERRED
    assert "user load" in (out.reason or "") and "no request sent" in (out.reason or "")
    assert ctl.containers == [] and lease.calls == [] and ctl.probes == 0  # not one request
    with Ledger.open(tmp_path / "ledger.sqlite", readonly=True) as led:
        (c,) = led.canaries()
        assert c.status == "deferred" and not c.levels


def test_user_load_during_a_level_stops_it(tmp_path: Path) -> None:
    # a user arrives while the first level (concurrency 1) runs
    ctl = FakeCtl(load_inventory(EXAMPLE), tmp_path, users=lambda c: 1.0 if c.running else 0.0)
    lease = RecordingLease()
    out = _runner(tmp_path, ctl, lease).run()
    assert out.status is CanaryStatus.DEFERRED and "stopped" in (out.reason or "")
    assert len(ctl.containers) == 1  # the first level's client, stopped; no second level
    assert lease.calls[-1] == ("end", out.run_id)


def test_a_server_that_is_down_fails_the_canary_with_the_reason(tmp_path: Path) -> None:
    ctl = FakeCtl(load_inventory(EXAMPLE), tmp_path, healthy=False)
    out = _runner(tmp_path, ctl, RecordingLease()).run()
    assert out.status is CanaryStatus.FAILED and "connect failed" in (out.reason or "")
    assert ctl.containers == []
