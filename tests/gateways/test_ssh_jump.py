"""ProxyJump through a second real sshd (127.0.0.2): the route Ansible's ssh would take, with
the host key of every hop verified."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tpwarden.cluster.errors import HostKeyError, NodeUnreachable
from tpwarden.cluster.spec import NodeSpec
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget
from tpwarden.cluster.ssh.gateway import SshPool

from .conftest import SSHD, _free_port, _keygen, _wait_listening


def _start_jump(tmp: Path, client_pub: str, forwarding: bool) -> tuple[subprocess.Popen, int]:
    tmp.mkdir(mode=0o700)
    _keygen(tmp / "host_key")
    (tmp / "authorized_keys").write_text(client_pub)
    port = _free_port()
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.2\nHostKey {tmp / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile {tmp / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
        f"StrictModes no\nLogLevel ERROR\nAllowTcpForwarding {'yes' if forwarding else 'no'}\n"
    )
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "sshd.log", "wb"),  # noqa: SIM115 - lives as long as the sshd
    )
    _wait_listening("127.0.0.2", port)
    return proc, port


@pytest.fixture(scope="module")
def jumps(sshd, tmp_path_factory) -> Iterator[dict[str, object]]:
    """Two jump hosts in front of the `sshd` fixture: one forwards, one refuses to."""
    tmp = tmp_path_factory.mktemp("jump")
    client_pub = Path(sshd.client_key + ".pub").read_text()
    procs = []
    try:
        ok, ok_port = _start_jump(tmp / "ok", client_pub, True)
        procs.append(ok)
        closed, closed_port = _start_jump(tmp / "closed", client_pub, False)
        procs.append(closed)
        lines = [Path(sshd.known_hosts).read_text().strip()]
        for name, port in (("ok", ok_port), ("closed", closed_port)):
            kind, key = (tmp / name / "host_key.pub").read_text().split()[:2]
            lines.append(f"[127.0.0.2]:{port} {kind} {key}")
        both = tmp / "known_hosts"
        both.write_text("\n".join(lines) + "\n")
        only_target = tmp / "known_hosts_target_only"
        only_target.write_text(lines[0] + "\n")
        only_jump = tmp / "known_hosts_jump_only"
        only_jump.write_text(lines[1] + "\n")
        yield {
            "ok": ok_port,
            "closed": closed_port,
            "known_hosts": str(both),
            "target_only": str(only_target),
            "jump_only": str(only_jump),
        }
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=5)


def _node(sshd, ssh_args: str) -> NodeSpec:
    return NodeSpec(
        name="node2",
        role="worker",
        rank=1,
        ssh_host=sshd.host,
        ssh_port=sshd.port,
        ssh_user=sshd.user,
        ssh_key_file=sshd.client_key,
        vllm_host_ip="127.0.0.1",
        ssh_args=ssh_args,
    )


def test_proxyjump_from_ansible_ssh_common_args(sshd, jumps):
    node = _node(sshd, f"-o ProxyJump=root@127.0.0.2:{jumps['ok']}")
    with SshPool(SshOptions(known_hosts=jumps["known_hosts"], connect_timeout_s=5)) as pool:
        session = pool.session(node)
        assert session.run(["id", "-u"], timeout=10).stdout.strip() == "0"
        assert len(session._jumps) == 1  # the connection went through the jump host


def test_the_route_really_goes_through_the_jump_host(sshd, jumps):
    """A jump host that refuses forwarding makes the node unreachable: no direct shortcut."""
    node = _node(sshd, f"-J root@127.0.0.2:{jumps['closed']}")
    with SshPool(SshOptions(known_hosts=jumps["known_hosts"], connect_timeout_s=5)) as pool:
        with pytest.raises(NodeUnreachable, match="cannot reach"):
            pool.session(node).run(["true"])


def test_jump_host_key_is_verified(sshd, jumps):
    node = _node(sshd, f"-o ProxyJump=root@127.0.0.2:{jumps['ok']}")
    with SshPool(SshOptions(known_hosts=jumps["target_only"], connect_timeout_s=5)) as pool:
        with pytest.raises(HostKeyError, match=r"jump host 127\.0\.0\.2"):
            pool.session(node).run(["true"])


def test_node_key_is_verified_behind_a_trusted_jump_host(sshd, jumps):
    node = _node(sshd, f"-o ProxyJump=root@127.0.0.2:{jumps['ok']}")
    with SshPool(SshOptions(known_hosts=jumps["jump_only"], connect_timeout_s=5)) as pool:
        with pytest.raises(HostKeyError, match=rf"node2: .*\[127\.0\.0\.1\]:{sshd.port}"):
            pool.session(node).run(["true"])


def test_user_known_hosts_file_in_the_ssh_args_is_the_known_hosts_setting(sshd, jumps):
    args = f"-o ProxyJump=root@127.0.0.2:{jumps['ok']} -o UserKnownHostsFile={jumps['known_hosts']}"
    with SshPool(SshOptions(connect_timeout_s=5)) as pool:
        assert pool.session(_node(sshd, args)).run(["true"]).ok


def test_proxy_command(sshd, jumps):
    command = (
        f"ssh -i {sshd.client_key} -o UserKnownHostsFile={jumps['known_hosts']} "
        f"-o StrictHostKeyChecking=yes -p {jumps['ok']} -W %h:%p root@127.0.0.2"
    )
    target = SshTarget.from_node(_node(sshd, f"-o 'ProxyCommand={command}'"))
    assert target.route.proxy_command == command
    with SshPool(SshOptions(known_hosts=jumps["known_hosts"], connect_timeout_s=5)) as pool:
        assert pool.session(target).run(["true"], timeout=10).ok


def test_no_jump_without_args(sshd):
    assert SshTarget.from_node(_node(sshd, "")).route.jumps == ()
    assert os.path.exists(sshd.known_hosts)
