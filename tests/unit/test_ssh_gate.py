"""The watchdog key's forced command (tpwarden.node.ssh_gate, issue 29 item 7): the commands the
toolkit really sends over SSH pass, as they are built (NodeSession's own argv and quoting);
shells, other programs, other scripts and look-alikes are refused; the gate runs for real as
sshd would run it (SSH_ORIGINAL_COMMAND), and a missing config refuses everything."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
from tpwarden.cluster.node_zipapp import COLLECTOR, COLLECTOR_FILE, build_node_zipapp
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget
from tpwarden.cluster.ssh.gateway import NodeSession
from tpwarden.node.ssh_gate import COLLECTOR_NAME, REFUSED_RC, GateConfig, decide

DIGEST = "ab" * 32
CONFIG = GateConfig(collector_sha256=frozenset({DIGEST}))
SFTP = "/usr/lib/openssh/sftp-server"
TMPDIR = "/tmp/tpwarden.Ab3dE6gH"


def _digest(path: str) -> str | None:
    return DIGEST if path == f"{TMPDIR}/{COLLECTOR_NAME}" else "cd" * 32


def _verdict(argv_or_command: list[str] | str | None):
    command = shlex.join(argv_or_command) if isinstance(argv_or_command, list) else argv_or_command
    return decide(command, CONFIG, _digest, sftp_server=SFTP)


def _session(user: str) -> NodeSession:
    return NodeSession(SshTarget("node2", "127.0.0.2", user=user), SshOptions())


def test_the_names_agree() -> None:
    assert COLLECTOR_NAME == COLLECTOR_FILE


@pytest.mark.parametrize("user", ["root", "ops"])
@pytest.mark.parametrize(
    "argv",
    [
        ["docker", "system", "dial-stdio"],
        ["mktemp", "-d", "/tmp/tpwarden.XXXXXXXX"],
        ["rm", "-rf", "--", TMPDIR],
        ["test", "-d", "/var/lib/tpwarden/watchdog"],
        ["mkdir", "-p", "-m", "0700", "/etc/tpwarden/secrets"],
        [
            "mv",
            "-f",
            f"/etc/tpwarden/secrets/.api key.{secrets.token_hex(6)}.tmp",
            "/etc/tpwarden/secrets/api key",
        ],  # fmt: skip
        ["python3", f"{TMPDIR}/{COLLECTOR_NAME}", "cap", "2000"],
        ["python3", f"{TMPDIR}/{COLLECTOR_NAME}", "--nvml-lib", "/x/libnvidia-ml.so.1", "show"],
    ],
)
def test_what_the_watchdog_sends_is_allowed_as_sent(user: str, argv: list[str]) -> None:
    session = _session(user)
    full = session.wrap_sudo(argv, sudo=True)  # `sudo -n --` for a non-root SSH user
    verdict = _verdict(full)
    assert verdict.allowed, verdict.reason
    assert verdict.argv == tuple(full)


@pytest.mark.parametrize("asked", ["internal-sftp", "/usr/lib/openssh/sftp-server"])
def test_sftp_runs_this_systems_sftp_server(asked: str) -> None:
    assert _verdict(asked).argv == (SFTP,)
    assert not decide(asked, CONFIG, _digest, sftp_server=None).allowed


@pytest.mark.parametrize(
    "command",
    [
        None,  # `ssh node`: an interactive login
        "",
        "hostname",
        "id",
        "sh -c id",
        "bash -i",
        "docker system dial-stdio; id",
        "docker system dial-stdio && id",
        "docker run --rm -v /:/host alpine cat /host/etc/shadow",
        "docker exec -it tpwarden-vllm sh",
        "sudo -n -- sh -c id",
        "sudo sh",
        "python3 -c 'import os; os.system(\"id\")'",
        f"python3 {TMPDIR}/evil.py",
        f"python3 {TMPDIR}/{COLLECTOR_NAME}.bak",
        f"python3 /tmp/elsewhere/{COLLECTOR_NAME}",
        f"python3 {TMPDIR}/../tpwarden.Zz9yY8xX/{COLLECTOR_NAME}",
        "rm -rf -- /",
        "rm -rf -- /tmp/tpwarden.Ab3dE6gH/../..",
        "rm -rf /tmp/tpwarden.Ab3dE6gH",
        "mkdir -p /root/.ssh",
        "mkdir -p -m 0700 relative/dir",
        "test -d /etc/../etc",
        "mv -f /tmp/evil /root/.ssh/authorized_keys",
        "mv -f /etc/x/.y.0123456789ab.tmp /etc/x/z",
        "mktemp -d /tmp/mine.XXXX",
        "scp -t /root",
        "'unterminated",
    ],
)
def test_everything_else_is_refused(command: str | None) -> None:
    verdict = _verdict(command)
    assert not verdict.allowed, verdict
    assert verdict.reason


def test_the_collector_is_refused_when_its_bytes_are_not_this_nodes_build() -> None:
    script = f"{TMPDIR}/{COLLECTOR_NAME}"
    other = decide(f"python3 {script} show", CONFIG, lambda _p: "cd" * 32, sftp_server=SFTP)
    assert not other.allowed and "not the collector" in other.reason
    missing = decide(f"python3 {script} show", CONFIG, lambda _p: None, sftp_server=SFTP)
    assert not missing.allowed


# -- the gate as sshd runs it -------------------------------------------------------------------
def _gate(config: Path, command: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SSH_ORIGINAL_COMMAND"}
    if command is not None:
        env["SSH_ORIGINAL_COMMAND"] = command
    env["SSH_CLIENT"] = "127.0.0.1 40000 22"
    return subprocess.run(
        [sys.executable, "-I", "-m", "tpwarden.node.ssh_gate", str(config)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


@pytest.fixture
def uploaded(tmp_path: Path):
    """The collector this tpwarden builds, uploaded where run_script puts it, and the gate's
    config as provisioning writes it (`python -m tpwarden.cluster.node_zipapp digest`)."""
    digest = subprocess.run(
        [sys.executable, "-I", "-m", "tpwarden.cluster.node_zipapp", "digest"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    config = tmp_path / "ssh-gate.json"
    config.write_text(digest)
    name = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(8))
    directory = Path(f"/tmp/tpwarden.{name}")
    directory.mkdir(mode=0o700)
    try:
        built = build_node_zipapp(COLLECTOR, directory / COLLECTOR_FILE)
        assert json.loads(digest) == {"collector_sha256": [built.sha256]}
        yield config, built.path
    finally:
        shutil.rmtree(directory)


def test_the_real_gate_runs_the_collector_and_refuses_a_shell(uploaded) -> None:
    config, script = uploaded
    done = _gate(config, f"python3 {script} ports 0")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["action"] == "ports"
    assert _gate(config, f"test -d {script.parent}").returncode == 0
    assert _gate(config, f"test -d {script.parent}/nothing").returncode == 1

    refused = _gate(config, "hostname")
    assert refused.returncode == REFUSED_RC and refused.stdout == ""
    assert refused.stderr.startswith("tpwarden-ssh-gate: refused: 'hostname'")
    assert _gate(config, None).returncode == REFUSED_RC  # `ssh node`, no command

    script.write_bytes(script.read_bytes() + b"\n")  # one byte more: not this node's build
    changed = _gate(config, f"python3 {script} ports 0")
    assert changed.returncode == REFUSED_RC and "not the collector" in changed.stderr


def test_without_its_config_the_gate_refuses_everything(tmp_path: Path) -> None:
    done = _gate(tmp_path / "missing.json", "test -d /")
    assert done.returncode == REFUSED_RC
    assert "provision the node again" in done.stderr
