"""`DockerGateway.run_to_completion` (issue 31): the bench and eval clients' one Docker call,
against a fake low-level API client that records every request (no engine)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import docker
import pytest
import requests
from docker.types import Mount
from tpwarden.cluster.bench.plan import BenchOptions, client_plan
from tpwarden.cluster.bench.runner import run_client
from tpwarden.cluster.containers.gateway import DockerGateway, restart_policy
from tpwarden.cluster.containers.job import tar_files
from tpwarden.cluster.errors import DockerError
from tpwarden.cluster.eval.catalog import PRESETS
from tpwarden.cluster.eval.client import run_container
from tpwarden.cluster.eval.plan import EvalOptions, ServerFacts, task_plan
from tpwarden.cluster.eval.runner import RUN_SH, container_plan
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.labels import LABEL_COMPONENT, LABEL_CONFIG_HASH

SPEC = load_inventory(Path(__file__).parent / "inventories" / "good.yml")
# a real APIClient with a fixed version builds host configs without a request (as over_ssh)
REAL = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41")
CID = "c" * 64


class FakeApi:
    """The low-level calls a client job makes, recorded; `fail` names one that raises."""

    def __init__(self, results: dict[str, bytes] | None = None, fail: str = ""):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.results, self.fail, self.removed = results, fail, False

    def _rec(self, call: str, /, *a, **kw):
        self.calls.append((call, a, kw))
        if call == self.fail:
            raise requests.ReadTimeout("read timed out")

    def create_host_config(self, **kw):
        return REAL.create_host_config(**kw)

    def create_container(self, **kw):
        self._rec("create_container", **kw)
        return {"Id": CID}

    def put_archive(self, cid, path, data):
        self._rec("put_archive", cid, path, data)

    def inspect_container(self, cid):
        self._rec("inspect_container", cid)
        if self.removed:
            raise docker.errors.NotFound("gone")
        return {"Name": "/x", "Config": {"Image": "img"}, "HostConfig": {"NetworkMode": "host"}}

    def start(self, cid):
        self._rec("start", cid)

    def wait(self, cid, timeout):
        self._rec("wait", cid, timeout=timeout)
        return {"StatusCode": 0}

    def logs(self, cid, stdout, stderr):
        self._rec("logs", cid)
        return b"done\n"

    def get_archive(self, cid, path):
        self._rec("get_archive", cid, path)
        if self.results is None:
            raise docker.errors.NotFound("no such path")
        return [tar_files(self.results, "bench/results")], {}

    def stop(self, cid, timeout):
        self._rec("stop", cid, timeout=timeout)

    def remove_container(self, cid, force):
        self._rec("remove_container", cid, force=force)
        self.removed = True

    def named(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]


def _tar_modes(data: bytes) -> dict[str, int]:
    return {m.name: m.mode for m in tarfile.open(fileobj=io.BytesIO(data)).getmembers()}


def test_a_bench_job_creates_the_container_the_bench_client_always_created():
    opts = BenchOptions(kind="sweep", levels=(8,))
    plan = client_plan(SPEC, opts, 8, 0, "r1")
    api = FakeApi(results={"c8.json": b"{}"})
    files = {"prompts.json": b"[]"}
    rc, logs, results, facts = run_client(
        DockerGateway("head", api), plan, files, {"OPENAI_API_KEY": "k"}, 600
    )
    (_, _, kw), *_ = api.named("create_container")
    # what bench's own create_container call sent before issue 31, argument by argument
    env = [f"{k}={v}" for k, v in {**plan.env, "OPENAI_API_KEY": "k"}.items()]
    assert kw == {
        "image": plan.image,
        "name": plan.name,
        "command": list(plan.container_command),
        "entrypoint": list(plan.entrypoint) if plan.entrypoint is not None else None,
        "environment": env,
        "labels": dict(plan.labels),
        "host_config": kw["host_config"],
        "stop_timeout": plan.stop_timeout_s,
        "detach": True,
    }
    hc = kw["host_config"]
    assert hc["NetworkMode"] == plan.network_mode and "DeviceRequests" not in hc
    assert [(m["Target"], m["ReadOnly"]) for m in hc["Mounts"]] == [
        (m.target, m.read_only) for m in plan.mounts
    ]
    assert kw["labels"][LABEL_COMPONENT] != "vllm" and LABEL_CONFIG_HASH not in kw["labels"]
    (_, (cid, path, data), _), *_ = api.named("put_archive")
    assert path == "/" and _tar_modes(data) == {"bench": 0o755, "bench/prompts.json": 0o644}
    assert api.named("wait")[0][2] == {"timeout": 600}
    assert api.named("get_archive")[0][1] == (CID, "/bench/results")
    assert (rc, logs, results) == (0, "done\n", {"c8.json": b"{}"})
    assert facts["network_mode"] == "host" and facts["exit_code"] == 0
    assert [c[0] for c in api.calls][-3:] == ["inspect_container", "stop", "remove_container"]


def test_an_eval_job_fills_bench_world_writable_and_keeps_a_missing_result_empty():
    srv = ServerFacts(
        base_url="http://127.0.0.1:8000",
        model="glm",
        tokenizer="/models/glm",
        max_model_len=131072,
        version="0.33.0",
    )
    tp = task_plan("mmlu", PRESETS["mmlu"], srv, EvalOptions(tasks=("mmlu",)))
    plan = container_plan(SPEC, tp, "client:1", "run1")
    api = FakeApi(results=None)
    files = {"run.sh": RUN_SH, "results/cache/t_rank0.db": b"y"}
    rc, _, results, facts = run_container(DockerGateway("head", api), plan, files, {}, 60)
    (_, _, kw), *_ = api.named("create_container")
    assert kw["environment"] == [f"{k}={v}" for k, v in plan.env.items()]
    assert kw["entrypoint"] == ["sh", "/bench/run.sh"] and kw["labels"] == dict(plan.labels)
    assert kw["host_config"] == REAL.create_host_config(
        network_mode=plan.network_mode,
        ipc_mode=plan.ipc_mode,
        shm_size=plan.shm_size,
        mounts=[
            Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            for m in plan.mounts
        ],
        restart_policy=restart_policy(plan.restart_policy),
        privileged=plan.privileged,
    )
    (_, (_, _, data), _), *_ = api.named("put_archive")
    modes = _tar_modes(data)
    assert modes["bench"] == modes["bench/results"] == modes["bench/results/cache"] == 0o777
    assert modes["bench/run.sh"] == 0o644
    assert (rc, results, facts["exit_code"]) == (0, {}, 0)
    assert api.named("remove_container")


def test_the_container_is_removed_when_the_wait_times_out_and_the_error_names_the_job():
    plan = client_plan(SPEC, BenchOptions(kind="sweep", levels=(8,)), 8, 0, "r1")
    api = FakeApi(fail="wait")
    with pytest.raises(DockerError, match=f"head: bench client {plan.name}: read timed out"):
        run_client(DockerGateway("head", api), plan, {}, {}, 5)
    assert not api.named("put_archive")  # no files: nothing put
    assert api.named("remove_container") == [("remove_container", (CID,), {"force": True})]
