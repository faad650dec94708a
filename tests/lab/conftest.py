"""The lab fixture: ``lab up`` once per pytest run, ``lab down`` at the end.

Other lab tests reuse it::

    def test_something(lab):
        lab.inventory          # path of the lab's Ansible inventory
        lab.ssh("node2", ["hostname"])   # real SSH, host key verified

Set TPWARDEN_LAB_KEEP=1 to leave the lab up after the run (faster reruns while developing).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.provision.wheelhouse import source_items
from tpwarden.lab import lab as lablib
from tpwarden.lab import sshc
from tpwarden.lab.images import ensure_images
from tpwarden.lab.paths import NODE_NAMES, LabPaths

from tests.lab.provisioning import listing, provision, stop_head_watchdog


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: needs the simulated lab (root, docker, nspawn)")


def host_snapshot(paths: LabPaths) -> dict[str, set[str]]:
    """The host facts lab down must restore: this lane's listeners, containers, mounts and
    processes (another lane may come and go meanwhile)."""
    pattern = paths.host_pattern()

    def lines(argv: list[str]) -> set[str]:
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return {line for line in out.splitlines() if pattern.search(line)}

    return {
        "listeners": lines(["ss", "-ltn"]),
        "containers": lines(["docker", "ps", "-a", "--format", "{{.ID}} {{.Names}} {{.Labels}}"]),
        "mounts": lines(["mount"]),
        "processes": {
            p.split(None, 1)[1]
            for p in lines(["ps", "-eo", "stat,args"])
            if not p.startswith("Z") and "ps -eo" not in p
        },  # zombies: being reaped
    }


@dataclass
class Lab:
    paths: LabPaths
    before_up: dict[str, set[str]]
    first_up_s: float

    @property
    def inventory(self) -> Path:
        return self.paths.inventory

    @property
    def key(self) -> Path:
        return self.paths.key

    @property
    def known_hosts(self) -> Path:
        return self.paths.known_hosts

    @property
    def ssh_home(self) -> Path:
        """A HOME for docker-py's ssh:// transport (lab key + lab known_hosts)."""
        return self.paths.ssh_home

    def snapshot(self) -> dict[str, set[str]]:
        return host_snapshot(self.paths)

    def node_ip(self, node: str) -> str:
        return self.paths.node_ip(node)

    def ssh(self, node: str, argv: list[str], timeout_s: float = 30) -> sshc.Completed:
        return sshc.run_once(self.node_ip(node), self.key, self.known_hosts, argv, timeout_s)

    def up(self) -> float:
        start = time.monotonic()
        lablib.up(self.paths)
        return time.monotonic() - start

    def down(self) -> None:
        lablib.down(self.paths)


# One run per lane: a pytest run holds its lane's lock (LabPaths.lock) from lab up to lab down,
# so two runs (or a person rehearsing with `flock /run/lock/tpwarden-lab.lock tpwarden lab up`)
# never share a lane. TPWARDEN_LAB_LANE picks the lane (scripts/test.sh: the engine tier on 2).


@pytest.fixture(scope="session")
def lab() -> Lab:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (mounts, systemd-nspawn)")
    paths = LabPaths.from_env()
    paths.lock.parent.mkdir(parents=True, exist_ok=True)
    lock = open(paths.lock, "w")  # noqa: SIM115 - held for the whole session
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield from _lab_session(paths)
    finally:
        lock.close()


def _lab_session(paths: LabPaths):
    if lablib.status(paths).up:
        # A lab left running (a rehearsal, an earlier demo): start this run from a clean host,
        # so "lab down leaves the host as before" compares against a host without a lab.
        lablib.down(paths)
    before = host_snapshot(paths)
    handle = Lab(paths, before, 0.0)
    handle.first_up_s = handle.up()
    try:
        yield handle
    finally:
        if not os.environ.get("TPWARDEN_LAB_KEEP"):
            handle.down()


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> Path:
    """A snapshot of the source tree the nodes' wheel is built from (the tree may be edited while
    the lab tests run): what provisioning hashes and packs, plus the constraints."""
    snap = tmp_path_factory.mktemp("tpwarden-src")
    root = Path(__file__).resolve().parents[2]
    for item in (*source_items(root), "requirements"):
        src = root / item
        if src.is_dir():
            shutil.copytree(src, snap / item, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, snap / item)
    return snap


@pytest.fixture(scope="session")
def provisioned_lab(lab, source):
    """The lab provisioned from `source` with the watchdog on node1, once per run
    (tests/lab/provisioning.py says who shares it): the nodes' listings from before, and the
    first run's JSON. Removed again at the session's end unless
    tests/lab/test_provision_removal.py removed it (and said so: "removed")."""
    before = {n: listing(lab, n) for n in NODE_NAMES}
    state = {"before": before, "first": provision(lab, source), "removed": False}
    yield state
    if not state["removed"]:
        stop_head_watchdog(lab)
        provision(lab, source, "--remove")


# The installed CLI, as an operator runs it: a child process of this Python
CLI = (sys.executable, "-m", "tpwarden.cluster.cli")


def canary_inventory(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, canary: dict
) -> Path:
    """A private copy of the lab inventory with the ledger's canary set to `canary`, serving
    this checkout's simulator by its content tag: `:latest` is one tag on a Docker engine other
    worktrees share, and one retagged it mid-test once (the ledger named "serving image").
    The state and the runs go to `tmp_path` (the environment the CLI it runs inherits)."""
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "inventory.yml"
    doc = yaml.safe_load(Path(lab.inventory).read_text())
    doc["all"]["vars"]["tpwarden"]["ledger"] = {"canary": canary}
    doc["all"]["vars"]["tpwarden"]["image"] = ensure_images(lab.paths.cache).sim
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# the nights' small canaries (tests/lab/test_experiment*.py): the lab's client loads vLLM once per
# repeat
NIGHT_CANARY = {"levels": [1], "repeats": 2, "warmups": 1, "num_prompts": 4, "output_len": 32,
                "idle_window_s": 2.0, "quiet_hours": []}  # fmt: skip


@pytest.fixture
def night_inv(lab, tmp_path, monkeypatch):
    """A private copy of the lab inventory with the nights' small canaries, the state and runs
    in tmp; the server it brought up is taken down at the end."""
    path = canary_inventory(lab, tmp_path, monkeypatch, NIGHT_CANARY)
    yield path
    with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
        ctl.down()


def tpwarden(*args: str, timeout_s: float = 600, env: dict[str, str] | None = None):
    """One CLI command, waited for (stdout and stderr kept)."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="session")
def eval_image_build(lab) -> dict:
    """`tpwarden eval image build -i <lab inventory> --json`, once per run: the lm-eval client
    the lab's eval tests use, built by the product's own command on the head (FROM the bench
    client image, with wheels chosen for the head's architecture and Python; the first build
    downloads them, later ones find the image by its input digest)."""
    done = tpwarden("eval", "image", "build", "-i", str(lab.inventory), "--json", timeout_s=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)
