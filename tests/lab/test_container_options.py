"""Container options and the API key file on the lab (issue 28 item 3, issue 29 item 8).

One `up` of the session lab's server (the simulator image already built), with the lab
inventory's own options (IPC_LOCK, memlock unlimited and nofile 1048576 as far as the host's
engine can honour them: `lab_ulimits`) plus a device (/dev/zero
seen as /dev/fake0) and an API key. Then, for every rank: `docker inspect` shows the capability,
the ulimits and the device, and no key anywhere; inside the running rank, PID 1 (vLLM, exec'd by
the key wrapper on the head) has CAP_IPC_LOCK in CapEff, the limits in /proc/1/limits and the
device node. The key file on the head is 0600, and only an authenticated request is served.
Uses the session-scoped `lab` fixture (tests/lab/conftest.py).
"""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest
import yaml
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster

pytestmark = pytest.mark.lab

KEY_ENV = "TPWARDEN_LAB_CONTAINER_OPTS_KEY"
KEY = "lab-container-opts-key-5c1e0a"
CAP_IPC_LOCK = 14  # linux/capability.h
DEVICE = "/dev/zero:/dev/fake0:rw"


def _docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def served(lab, tmp_path_factory):
    """The lab's server, up on a private copy of the lab inventory with a device and an API
    key added; down afterwards."""
    tmp = tmp_path_factory.mktemp("container-opts")
    doc = yaml.safe_load(lab.inventory.read_text())
    settings = doc["all"]["vars"]["tpwarden"]
    assert settings["container"]["cap_add"] == ["IPC_LOCK"]  # what the lab inventory sets
    settings["container"]["devices"] = [DEVICE]
    settings["secrets"]["api_key"] = {"env": KEY_ENV}
    inventory = tmp / "inventory.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        spec = load_inventory(inventory)
        with Controller(spec, state_dir=tmp / "state", node_timeout_s=5) as ctl:
            try:
                result = ctl.up(replace=True, timeout_s=300)
                assert result.ok, (result.outcomes, result.boot and result.boot.reason)
                yield spec
            finally:
                ctl.down()
                # the (dummy) key file lives under the lab's models/ (identity-mapped)
                for f in plan_cluster(spec).for_node(spec.head.name).secret_files:
                    lab.ssh(spec.head.name, ["rm", "-f", f.path])


def _expected(spec, name: str) -> tuple[int, int]:
    """(soft, hard) of a ulimit as the inventory asked, -1 for unlimited."""
    limit = spec.serving.container.ulimits[name]
    return limit.soft, limit.hard


def _proc_value(value: int) -> str:
    return "unlimited" if value == -1 else str(value)


def _ranks(spec):
    return plan_cluster(spec).containers


def test_docker_inspect_shows_the_options_on_every_rank(served):
    for c in _ranks(served):
        attrs = json.loads(_docker("inspect", c.name))[0]
        host = attrs["HostConfig"]
        assert "IPC_LOCK" in host["CapAdd"], c.name
        limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
        assert limits["memlock"] == _expected(served, "memlock")
        assert limits["nofile"] == _expected(served, "nofile")
        assert {"PathOnHost": "/dev/zero", "PathInContainer": "/dev/fake0"}.items() <= (
            host["Devices"][0].items()
        )
        assert not host.get("Privileged")


def test_a_running_rank_reads_the_options_back(served):
    for c in _ranks(served):
        status = _docker("exec", c.name, "cat", "/proc/1/status")
        cap_eff = int(
            next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16
        )
        assert cap_eff & (1 << CAP_IPC_LOCK), (c.name, hex(cap_eff))
        limits = _docker("exec", c.name, "cat", "/proc/1/limits")
        locked = next(line for line in limits.splitlines() if line.startswith("Max locked memory"))
        assert locked.split()[3:5] == [_proc_value(v) for v in _expected(served, "memlock")], locked
        files = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert files.split()[3:5] == [_proc_value(v) for v in _expected(served, "nofile")], files
        # /dev/zero's node (char 1:5) under the new name, readable
        assert _docker("exec", c.name, "stat", "-c", "%F %t:%T", "/dev/fake0").split("\n")[0] == (
            "character special file 1:5"
        )
        assert _docker("exec", c.name, "head", "-c", "4", "/dev/fake0") == "\0" * 4


def test_the_api_key_is_nowhere_in_docker_inspect_and_auth_works(served, lab):
    head = plan_cluster(served).for_node(served.head.name)
    raw = _docker("inspect", head.name)
    assert KEY not in raw
    config = json.loads(raw)[0]["Config"]
    assert not any(e.startswith("VLLM_API_KEY=") for e in config["Env"])
    # the key file on the head: root only, and what vLLM (PID 1) was given
    key_file = head.secret_files[0].path
    done = lab.ssh(served.head.name, ["stat", "-c", "%a %U", key_file])
    assert done.stdout.strip() == "600 root", done
    assert KEY not in _docker("exec", head.name, "cat", "/proc/1/cmdline")
    url = f"{served.api_base}/v1/models"
    assert httpx.get(url, timeout=10).status_code == 401
    ok = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert ok.status_code == 200, ok.text
    assert ok.json()["data"][0]["id"] == served.serving.model.served_name
