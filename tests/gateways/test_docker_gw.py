"""Docker gateway over ssh:// (through the verified SSH gateway) to the test sshd, whose node
is this machine, so the engine is the local one."""

from __future__ import annotations

import contextlib
import io
import platform
import tarfile
import time
import uuid

import pytest
from tpwarden.cluster.containers.gateway import DockerGateway, ImageBuildFailed
from tpwarden.cluster.containers.job import OneShot
from tpwarden.cluster.errors import HostKeyError
from tpwarden.cluster.launch import ContainerPlan, Mount
from tpwarden.cluster.settings import SecretRef
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget
from tpwarden.cluster.ssh.gateway import SshPool


def _plan(image: str, cluster: str, name: str) -> ContainerPlan:
    return ContainerPlan(
        node="node1",
        role="head",
        rank=0,
        name=name,
        image=image,
        command=(
            "/bin/sh",
            "-c",
            'echo "started $MODE"; echo "has-token ${#HF_TOKEN}"; '
            "cat /mnt/ro/marker; exec sleep 300",
        ),
        entrypoint=None,
        env={"MODE": "test mode"},
        secret_env={"HF_TOKEN": SecretRef(env="TPWARDEN_TEST_TOKEN")},
        mounts=(Mount("/tmp/tpwarden-gw-mount", "/mnt/ro", True),),
        shm_size="64m",
        gpus=None,
        restart_policy="no",
        labels={
            "io.tpwarden.cluster": cluster,
            "io.tpwarden.component": "vllm",
            "io.tpwarden.node": "node1",
            "io.tpwarden.role": "head",
            "io.tpwarden.rank": "0",
            "io.tpwarden.config-hash": "abc123",
        },
    )


def _wait(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


@pytest.fixture
def gateway(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        session = pool.session(
            SshTarget("node1", sshd.host, port=sshd.port, user=sshd.user, key_file=sshd.client_key)
        )
        gw = DockerGateway.over_ssh(session, timeout=30)
        yield gw
        gw.close()


def test_docker_over_ssh_refuses_unknown_host_key(sshd, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text("")
    with SshPool(SshOptions(known_hosts=str(kh))) as pool:
        s = pool.session(
            SshTarget("node1", sshd.host, port=sshd.port, user=sshd.user, key_file=sshd.client_key)
        )
        with pytest.raises(HostKeyError):
            DockerGateway.over_ssh(s)


def test_run_list_logs_pause_remove(gateway, tiny_image, tmp_path):
    import os

    os.makedirs("/tmp/tpwarden-gw-mount", exist_ok=True)
    with open("/tmp/tpwarden-gw-mount/marker", "w") as f:
        f.write("mounted-ok\n")
    cluster = f"gwtest-{uuid.uuid4().hex[:6]}"
    name = f"{cluster}-vllm-node1"
    assert gateway.image_present(tiny_image)
    assert not gateway.image_present("tpwarden-test/absent:0")
    try:
        info = gateway.run(_plan(tiny_image, cluster, name), {"HF_TOKEN": "s3cret-value"})
        assert info.running and info.name == name and info.config_hash == "abc123"
        listed = gateway.list_tpwarden(cluster)
        assert [c.name for c in listed] == [name]
        assert listed[0].started_at is not None
        logs = _wait(lambda: (lambda t: t if "mounted-ok" in t else None)(gateway.logs(name)))
        assert "started test mode" in logs and "has-token 12" in logs
        attrs = gateway.api.inspect_container(name)
        hc = attrs["HostConfig"]
        assert hc["NetworkMode"] == "host" and hc["IpcMode"] == "host"
        assert hc["ShmSize"] == 64 * 1024 * 1024
        assert "s3cret-value" not in " ".join(attrs["Config"]["Cmd"])
        gateway.pause(name)
        assert gateway.inspect(name).paused
        stream = gateway.follow_logs(name, tail=2)
        it = iter(stream)
        assert next(it)
        stream.close()
        assert gateway.remove(name, stop_timeout=1) is True
        assert gateway.list_tpwarden(cluster) == []
        assert gateway.remove(name) is False  # idempotent
    finally:
        gateway.remove(name, stop_timeout=0)


def _context(dockerfile: str, files: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def test_build_image_offline_streams_its_lines_and_says_why_a_step_failed(gateway, tiny_image):
    tag = f"tpwarden-test/built:{uuid.uuid4().hex[:8]}"
    text = f"FROM {tiny_image}\nCOPY hello /hello\nRUN cat /hello\n"
    lines: list[str] = []
    try:
        gateway.build_image(
            _context(text, {"hello": b"hello-from-context\n"}), tag, timeout_s=120,
            on_line=lines.append,
        )  # fmt: skip
        assert gateway.image_id(tag) is not None
        assert any("hello-from-context" in line for line in lines)  # the RUN step's output
        broken = f"FROM {tiny_image}\nRUN cat /absent-file\n"
        with pytest.raises(ImageBuildFailed, match=r"build .*failed: .*(returned a non-zero|exit)"):
            gateway.build_image(_context(broken, {}), tag + "-broken", timeout_s=120)
        assert gateway.image_id(tag + "-broken") is None
    finally:
        with contextlib.suppress(Exception):
            gateway.api.remove_image(tag, force=True)


def test_a_one_shot_joins_a_paused_containers_pid_namespace_and_runs_a_file_it_was_given(
    gateway, tiny_image, sleeper
):
    """What a dossier's diagnostic container needs of the engine (issue 32): `pid_of` shows it
    the target's processes (its PID 1 is the target's init) even while the target is paused,
    a file given as `executable` runs, and the one-shot is gone afterwards."""
    import docker

    client = docker.from_env()
    sleeper.pause()
    before = {c.id for c in client.containers.list(all=True)}
    seen = gateway.run_once(
        OneShot(
            image=tiny_image, argv=("/look",), files={"look": b"#!/bin/sh\ncat /proc/1/cmdline\n"},
            executable=frozenset({"look"}), pid_of=sleeper.id, cap_add=("SYS_PTRACE",), user="0",
            timeout_s=30,
        )
    )  # fmt: skip
    assert (seen.exit_code, seen.stdout) == (0, "/bin/sleep\x00300\x00"), seen
    alone = gateway.run_once(OneShot(image=tiny_image, argv=("/bin/cat", "/proc/1/cmdline")))
    assert alone.stdout == "/bin/cat\x00/proc/1/cmdline\x00"  # its own namespace otherwise
    assert {c.id for c in client.containers.list(all=True)} == before
    assert gateway.architecture() == platform.machine()  # what decides if py-spy fits


def test_a_one_shot_removes_the_exited_one_shots_a_killed_caller_left(gateway, tiny_image):
    """A caller killed with -9 mid-run leaves its one-shot behind, exited (the job's own timeout
    ends it). The next one-shot of the same labels removes it; a running one (maybe another
    caller's) and an exited one of other labels stay."""
    import docker

    client = docker.from_env()
    run = uuid.uuid4().hex[:8]
    labels = {"io.tpwarden.component": "diagnostic", "io.tpwarden.test": run}

    def box(argv: list[str], **extra: str):
        return client.containers.run(tiny_image, argv, labels={**labels, **extra}, detach=True,
                                     network_mode="none")  # fmt: skip

    left, other = (
        box(["/bin/sleep", "0"]),
        box(["/bin/sleep", "0"], **{"io.tpwarden.test": f"{run}-other"}),
    )
    running = box(["/bin/sleep", "300"])
    try:
        left.wait(timeout=30)
        other.wait(timeout=30)
        done = gateway.run_once(OneShot(image=tiny_image, argv=("/bin/sleep", "0"), labels=labels))
        assert done.exit_code == 0
        tested = client.containers.list(all=True, filters={"label": "io.tpwarden.test"})
        mine = {c.id for c in tested if c.labels["io.tpwarden.test"].startswith(run)}
        assert mine == {other.id, running.id}  # the leftover gone, the new one too
    finally:
        for each in (left, other, running):
            with contextlib.suppress(docker.errors.NotFound):
                each.remove(force=True)
