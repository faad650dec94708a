"""Issue 52 item 4: the CPU-only clients stay CPU-only. CUDA and NGC images set
NVIDIA_VISIBLE_DEVICES=all, so where `nvidia` is Docker's default runtime a container of them sees
every GPU without asking for one. The bench and eval client containers are planned with
NVIDIA_VISIBLE_DEVICES=void and no device request; here the real engine runs them (over the
verified SSH gateway, as on a node) from an image that sets `all`, and the container itself
says what it got."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from pathlib import Path

import pytest
from tpwarden.cluster.bench.plan import BenchOptions, client_plan
from tpwarden.cluster.bench.runner import run_client
from tpwarden.cluster.eval.catalog import PRESETS
from tpwarden.cluster.eval.plan import EvalOptions, ServerFacts, task_plan
from tpwarden.cluster.eval.runner import container_plan
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import ContainerPlan

from .test_docker_gw import _context, gateway  # noqa: F401 - the fixture

GOOD = Path(__file__).resolve().parents[1] / "unit" / "inventories" / "good.yml"


@pytest.fixture
def ngc_like_image(gateway, tiny_image):  # noqa: F811 - the fixture above
    """The tiny image with the environment every CUDA/NGC image carries."""
    tag = f"tpwarden-test/ngc-like:{uuid.uuid4().hex[:8]}"
    dockerfile = (
        f"FROM {tiny_image}\nENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=all\n"
    )
    gateway.build_image(_context(dockerfile, {}), tag, timeout_s=120)
    try:
        yield tag
    finally:
        with contextlib.suppress(Exception):
            gateway.api.remove_image(tag, force=True)


def _printing_env(plan: ContainerPlan, image: str) -> ContainerPlan:
    # the planned container as it is (env, device requests, devices, network, labels), with an
    # image and command this machine has: `env` prints what the process inside was given
    return dataclasses.replace(plan, image=image, entrypoint=("/bin/env",), command=(), mounts=())


def _plans(image: str) -> dict[str, ContainerPlan]:
    spec = load_inventory(GOOD)
    bench = client_plan(spec, BenchOptions(kind="sweep", levels=(1,)), 1, 0, uuid.uuid4().hex[:6])
    srv = ServerFacts(
        base_url="http://127.0.0.1:8000", model="m", tokenizer="/models/m",
        max_model_len=4096, version="0.33.0",
    )  # fmt: skip
    tp = task_plan("gsm8k", PRESETS["gsm8k"], srv, EvalOptions(tasks=("gsm8k",)))
    evaluation = container_plan(spec, tp, image, uuid.uuid4().hex[:6])
    return {"bench": _printing_env(bench, image), "eval": _printing_env(evaluation, image)}


def test_client_containers_read_back_void_and_no_device_request(gateway, ngc_like_image):  # noqa: F811
    for role, plan in _plans(ngc_like_image).items():
        rc, logs, _results, facts = run_client(gateway, plan, {}, {}, timeout_s=60)
        env = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
        assert rc == 0, (role, logs)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void", (role, logs)  # not the image's "all"
        assert not facts["device_requests"] and not facts["devices"], (role, facts)
        assert facts["network_mode"] == "host"
