"""tpwarden.container (issue 28 item 3) and the API key as a file (issue 29 item 8): settings,
the per-node plan, `plan`'s output, the config hash, the Docker gateway's create request, and
the key wrapper run by a real POSIX sh."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
from pydantic import ValidationError
from tpwarden.cluster.cli import app
from tpwarden.cluster.container_settings import ContainerSpec
from tpwarden.cluster.containers.gateway import DockerGateway, create_kwargs
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import API_KEY_MOUNT, KEY_WRAPPER, plan_cluster
from typer.testing import CliRunner

from tests.unit.fake_nodes import good_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yml"
RDMA = {
    "devices": ["/dev/infiniband", "/dev/null:/dev/fake0:rw"],
    "cap_add": ["cap_ipc_lock"],
    "ulimits": {"memlock": -1, "nofile": "65536:1048576", "stack": 67108864},
    "mounts": [{"source": "/data/cache", "target": "/cache", "read_only": False}],
}


def _spec(container: dict[str, Any], spec=None):
    spec = spec or good_spec()
    opts = ContainerSpec.model_validate(container)
    return dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, container=opts))


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "soft", "hard"),
    [
        (-1, -1, -1),
        ("unlimited", -1, -1),
        ("-1:-1", -1, -1),
        (1048576, 1048576, 1048576),
        ("1024:unlimited", 1024, -1),
        ({"soft": 8, "hard": 16}, 8, 16),
    ],
)
def test_ulimit_forms(given, soft, hard):
    limit = ContainerSpec.model_validate({"ulimits": {"memlock": given}}).ulimits["memlock"]
    assert (limit.soft, limit.hard) == (soft, hard)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({"ulimits": {"memlock": "unlimited:1024"}}, "exceeds hard limit 1024"),
        ({"ulimits": {"nofile": "unlimited"}}, "nofile cannot be unlimited"),
        ({"ulimits": {"memlock": -2}}, "is not a limit"),
        ({"ulimits": {"memlock": "1:2:3"}}, "is not a limit"),
        ({"ulimits": {"memlok": 1}}, "'memlock'"),
        ({"cap_add": ["ALL"]}, "privileged: true"),
        ({"devices": ["/dev/a:/dev/b:rwx"]}, "not a device permission"),
        ({"devices": ["/dev/a:dev/b"]}, "not an absolute device path"),
        ({"devices": ["/dev/a::rw"]}, "is not HOST[:CONTAINER[:PERMISSIONS]]"),
        ({"mounts": [{"source": "/a", "target": "/run/tpwarden"}]}, "would cover /run/tpwarden"),
        (
            {"mounts": [{"source": "/a", "target": "/x"}, {"source": "/b", "target": "/x/"}]},
            "twice",
        ),
        ({"mounts": [{"source": "data", "target": "/x"}]}, "not an absolute path"),
        ({"privileged": "yes"}, "valid boolean"),
        ({"secrets_dir": "run/tpwarden"}, "not an absolute path"),
    ],
)
def test_malformed_options_are_refused(given, fragment):
    with pytest.raises(ValidationError) as info:
        ContainerSpec.model_validate(given)
    assert fragment in str(info.value)


def test_capabilities_are_normalised_and_a_dump_validates_again():
    opts = ContainerSpec.model_validate(RDMA)
    assert opts.cap_add == ["IPC_LOCK"]
    assert [str(d) for d in opts.devices] == [
        "/dev/infiniband:/dev/infiniband:rwm",
        "/dev/null:/dev/fake0:rw",
    ]
    # the applied plan and the directory layout re-read a JSON dump of the settings
    assert ContainerSpec.model_validate(json.loads(opts.model_dump_json())) == opts


def test_the_example_carries_the_rdma_set():
    opts = load_inventory(EXAMPLE).serving.container
    assert [d.host for d in opts.devices] == ["/dev/infiniband"]
    assert opts.cap_add == ["IPC_LOCK"]
    assert (opts.ulimits["memlock"].soft, opts.ulimits["memlock"].hard) == (-1, -1)
    assert opts.ulimits["nofile"].hard == 1048576 and not opts.privileged


# --- plan, `plan`, hash --------------------------------------------------------------------


def test_every_rank_gets_the_options_and_the_json_shows_them():
    plan = plan_cluster(_spec(RDMA))
    for c in plan.containers:
        doc = c.to_json()
        assert doc["devices"] == ["/dev/infiniband:/dev/infiniband:rwm", "/dev/null:/dev/fake0:rw"]
        assert doc["cap_add"] == ["IPC_LOCK"]
        assert doc["ulimits"] == {
            "memlock": "unlimited:unlimited",
            "nofile": "65536:1048576",
            "stack": "67108864:67108864",
        }
        assert {"source": "/data/cache", "target": "/cache", "read_only": False} in doc["mounts"]
        assert doc["privileged"] is False
    assert not plan.warnings or all("privileged" not in w for w in plan.warnings)


def test_privileged_is_warned_about():
    plan = plan_cluster(_spec({"privileged": True}))
    assert all(c.privileged for c in plan.containers)
    assert any(w.startswith("container.privileged:") for w in plan.warnings)


def test_an_extra_mount_over_the_model_is_refused_with_the_file():
    spec = _spec({"mounts": [{"source": "/x", "target": good_spec().serving.model.path}]})
    with pytest.raises(ConfigError) as info:
        plan_cluster(spec)
    assert info.value.key == "tpwarden.container.mounts"
    assert spec.source_file in info.value.render()


def test_cli_plan_shows_the_options_the_key_file_and_the_privileged_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = EXAMPLE.read_text().replace(
        "        # privileged: true ", "        privileged: true   #", 1
    )
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    result = CliRunner().invoke(app, ["plan", "-i", str(inv)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "devices: /dev/infiniband:/dev/infiniband:rwm" in out
    assert "cap_add: IPC_LOCK" in out
    assert "ulimits: memlock=unlimited:unlimited, nofile=1048576:1048576" in out
    assert "privileged: true" in out
    assert "warning: container.privileged:" in out
    assert "node1: the API key written to /run/tpwarden/tpwarden-api_key (0600)" in out


def test_the_hash_covers_each_option_and_is_unchanged_without_them():
    base = good_spec()
    assert _spec({}, base).config_hash() == base.config_hash()
    seen = {base.config_hash()}
    for options in (
        {"devices": ["/dev/infiniband"]},
        {"cap_add": ["IPC_LOCK"]},
        {"ulimits": {"memlock": -1}},
        {"ulimits": {"memlock": "1024:-1"}},
        {"mounts": [{"source": "/a", "target": "/b"}]},
        {"mounts": [{"source": "/a", "target": "/b", "read_only": False}]},
        {"privileged": True},
        {"secrets_dir": "/var/lib/tpwarden/run"},
        {"stop_timeout_s": 30},
    ):
        digest = _spec(options, base).config_hash()
        assert digest not in seen, options
        seen.add(digest)


# --- the Docker gateway ---------------------------------------------------------------------


class FakeAPI:
    """The docker APIClient calls the gateway makes; host configs built by docker-py itself."""

    def __init__(self) -> None:
        self.real = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41")
        self.created: list[dict[str, Any]] = []

    def create_host_config(self, **kwargs: Any) -> Any:
        return self.real.create_host_config(**kwargs)

    def create_container(self, **kwargs: Any) -> dict[str, str]:
        self.created.append(kwargs)
        return {"Id": "c0ffee"}

    def start(self, container: str) -> None:
        pass

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"Id": container, "Name": "/x", "State": {"Status": "running"}, "Config": {}}


def test_gateway_translates_the_options_to_the_engines_host_config():
    plan = plan_cluster(_spec(RDMA)).for_node("node2")
    hc = create_kwargs(plan, plan.env, FakeAPI())["host_config"]  # type: ignore[arg-type]
    assert hc["Devices"] == [
        {"PathOnHost": "/dev/infiniband", "PathInContainer": "/dev/infiniband", "CgroupPermissions": "rwm"},
        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/fake0", "CgroupPermissions": "rw"},
    ]  # fmt: skip
    assert hc["CapAdd"] == ["IPC_LOCK"]
    assert hc["Ulimits"] == [
        {"Name": "memlock", "Soft": -1, "Hard": -1},
        {"Name": "nofile", "Soft": 65536, "Hard": 1048576},
        {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
    ]
    assert {"Target": "/cache", "Source": "/data/cache", "Type": "bind", "ReadOnly": False} in hc[
        "Mounts"
    ]
    assert "Privileged" not in hc
    privileged = plan_cluster(_spec({"privileged": True})).for_node("node2")
    assert create_kwargs(privileged, {}, FakeAPI())["host_config"]["Privileged"] is True  # type: ignore[arg-type]


def test_without_options_the_create_request_is_as_before():
    plan = plan_cluster(good_spec()).for_node("node2")
    kwargs = create_kwargs(plan, plan.env, FakeAPI())  # type: ignore[arg-type]
    for key in ("Devices", "CapAdd", "Ulimits", "Privileged"):
        assert key not in kwargs["host_config"]
    assert kwargs["command"] == list(plan.command)  # a worker: no key, no wrapper


def test_the_container_carries_its_stop_timeout_which_remove_uses():
    """docker's StopTimeout, set at create: the gateway's remove() then stops without its own
    timeout, so the daemon applies the container's (2 s by default, issue 30: a restart no
    longer waits out vLLM's 11-14 s shutdown on every rank)."""
    assert (
        create_kwargs(plan_cluster(good_spec()).for_node("node2"), {}, FakeAPI())[  # type: ignore[arg-type]
            "stop_timeout"
        ]
        == 2
    )
    plan = plan_cluster(_spec({"stop_timeout_s": 30})).for_node("node1")
    assert create_kwargs(plan, {}, FakeAPI())["stop_timeout"] == 30  # type: ignore[arg-type]
    assert plan.to_json()["stop_timeout_s"] == 30

    stopped: list[tuple[str, dict[str, Any]]] = []

    class Api(FakeAPI):
        def stop(self, container: str, **kw: Any) -> None:
            stopped.append((container, kw))

        def remove_container(self, container: str, force: bool) -> None:
            pass

    gw = DockerGateway("node1", Api())  # type: ignore[arg-type]
    assert gw.remove("srv") and gw.remove("job", stop_timeout=5)
    assert stopped == [("srv", {}), ("job", {"timeout": 5})]


def test_the_api_key_is_a_mounted_file_never_env_or_argv(monkeypatch):
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-SENTINEL-0123456789abcdefghij")
    spec = good_spec()
    head = plan_cluster(spec).for_node("node1")
    api = FakeAPI()
    DockerGateway("node1", api).run(head, {})  # type: ignore[arg-type]
    request = api.created[0]
    assert not any(e.startswith("VLLM_API_KEY=") for e in request["environment"])
    assert "SENTINEL" not in json.dumps(request, default=str)
    assert request["command"][: len(KEY_WRAPPER)] == list(KEY_WRAPPER)
    assert request["command"][len(KEY_WRAPPER) :] == list(head.command)
    assert request["entrypoint"] is None  # the image's own entrypoint still runs first
    key_mount = {
        "Target": API_KEY_MOUNT,
        "Source": f"/run/tpwarden/{spec.name}-api_key",
        "Type": "bind",
        "ReadOnly": True,
    }
    assert key_mount in request["host_config"]["Mounts"]
    assert head.vllm_argv[:2] == ("vllm", "serve")  # flag checks and rollout diffs see vLLM's argv


def test_ray_head_execs_vllm_behind_the_wrapper():
    spec = good_spec()
    parallel = spec.serving.parallel.model_copy(update={"backend": "ray"})
    ray = dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, parallel=parallel))
    head = plan_cluster(ray).for_node("node1")
    assert head.container_command == head.command and head.command[0] == "ray"
    assert head.exec_argv == KEY_WRAPPER + head.exec_after_start


# --- the wrapper, run by sh -------------------------------------------------------------------


def _run_wrapper(key_file: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    script = KEY_WRAPPER[2].replace(API_KEY_MOUNT, str(key_file))
    return subprocess.run(
        ["sh", "-c", script, *KEY_WRAPPER[3:], *argv],
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_wrapper_exports_the_key_and_execs_the_argv_unchanged(tmp_path):
    key = tmp_path / "api_key"
    key.write_text("sk-abc def")
    done = _run_wrapper(
        key, ["sh", "-c", 'printf "%s|%s|%s" "$VLLM_API_KEY" "$#" "$1"', "x", "a b"]
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sk-abc def|1|a b"


@pytest.mark.parametrize("content", [None, ""])
def test_wrapper_refuses_to_serve_without_a_key(tmp_path, content):
    key = tmp_path / "api_key"
    if content is not None:
        key.write_text(content)
    done = _run_wrapper(key, ["echo", "served"])
    assert done.returncode == 78 and "served" not in done.stdout
    assert "tpwarden: no API key" in done.stderr
