"""SSH gateway against a real sshd: host-key policy, literal argv, SFTP, scripts, timeouts."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
from tpwarden.cluster.errors import CommandFailed, HostKeyError, NodeUnreachable
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget
from tpwarden.cluster.ssh.gateway import CommandTimeout, SshPool


def _target(sshd, node: str = "node1") -> SshTarget:
    return SshTarget(node, sshd.host, port=sshd.port, user=sshd.user, key_file=sshd.client_key)


def test_known_host_key_verifies_and_runs(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts, connect_timeout_s=5)) as pool:
        r = pool.session(_target(sshd)).run(["id", "-u"], timeout=10)
    assert r.rc == 0 and r.stdout.strip() == "0"


def test_one_connection_is_reused(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        s = pool.session(_target(sshd))
        s.run(["true"])
        first = s.client()
        s.run(["true"])
        assert pool.session(_target(sshd)).client() is first


def test_unknown_host_key_is_refused_with_fix(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with SshPool(SshOptions(known_hosts=str(empty))) as pool:
        with pytest.raises(HostKeyError) as ei:
            pool.session(_target(sshd, "node3")).run(["true"])
    msg = str(ei.value)
    assert "node3" in msg and "ssh-keyscan" in msg and "SHA256:" in msg
    assert empty.read_text() == ""  # nothing was written back


def test_unknown_host_key_allowed_only_when_configured(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with SshPool(SshOptions(known_hosts=str(empty), allow_unknown_hosts=True)) as pool:
        assert pool.session(_target(sshd)).run(["true"]).ok
    assert empty.read_text() == ""  # accepted in memory only


def test_changed_host_key_is_refused(sshd, tmp_path):
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    kind, blob = (tmp_path / "other.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[{sshd.host}]:{sshd.port} {kind} {blob}\n")
    with SshPool(SshOptions(known_hosts=str(kh))) as pool:
        with pytest.raises(HostKeyError) as ei:
            pool.session(_target(sshd, "node2")).run(["true"])
    assert "CHANGED" in str(ei.value) and "node2" in str(ei.value)


def test_argv_passes_through_literally(sshd, tmp_path):
    tricky = [
        "a b",
        "it's",
        '"dq"',
        "$(touch /tmp/tpwarden-pwned)",
        "`id`",
        "; rm -rf /x",
        "*",
        "\\n",
        "",
    ]
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        r = pool.session(_target(sshd)).run(["printf", "%s\\n", *tricky], check=True)
    assert r.stdout.split("\n")[:-1] == tricky
    assert not Path("/tmp/tpwarden-pwned").exists()


def test_nonzero_exit_and_check(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        s = pool.session(_target(sshd))
        r = s.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.rc, r.stdout, r.stderr) == (3, "out\n", "err\n")
        with pytest.raises(CommandFailed) as ei:
            s.run(["false"], check=True)
        assert ei.value.rc == 1 and ei.value.node == "node1"


def test_large_stderr_and_stdout_do_not_deadlock(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        r = pool.session(_target(sshd)).run(
            ["sh", "-c", "head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero"], timeout=30
        )
    assert len(r.stderr) == 3_000_000 and len(r.stdout) == 3_000_000


def test_command_timeout(sshd):
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout):
            pool.session(_target(sshd)).run(["sleep", "5"], timeout=0.5)
    assert time.monotonic() - t0 < 3


def test_sftp_put_get_and_mode(sshd, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 100)
    remote = f"/tmp/tpwarden-test-{sshd.port}.bin"
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        s = pool.session(_target(sshd))
        s.put(str(src), remote, mode=0o600)
        assert s.run(["stat", "-c", "%a", remote]).stdout.strip() == "600"
        s.get(remote, str(tmp_path / "back.bin"))
        s.run(["rm", "-f", remote])
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_put_atomic_replaces_the_file_and_leaves_no_temp(sshd, tmp_path):
    directory = tmp_path / "wd"
    directory.mkdir()
    remote = str(directory / "hold.json")  # sshd runs on this machine: the same file system
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        s = pool.session(_target(sshd))
        s.put_atomic(b'{"v": 1}\n', remote)
        s.put_atomic(b'{"v": 2}\n', remote, mode=0o640)
        assert s.run(["stat", "-c", "%a", remote]).stdout.strip() == "640"
    assert (directory / "hold.json").read_bytes() == b'{"v": 2}\n'
    assert [p.name for p in directory.iterdir()] == ["hold.json"]


def test_run_script_copies_file_and_cleans_up(sshd, tmp_path):
    script = tmp_path / "probe.sh"
    script.write_text('#!/bin/sh\necho "dir=$(dirname "$0")"\nprintf "[%s]" "$@"\n')
    with SshPool(SshOptions(known_hosts=sshd.known_hosts)) as pool:
        s = pool.session(_target(sshd))
        r = s.run_script(str(script), ["x y", "$(id)"], check=True)
        tmpdir = r.stdout.splitlines()[0].removeprefix("dir=")
        assert tmpdir.startswith("/tmp/tpwarden.")
        assert r.stdout.splitlines()[1] == "[x y][$(id)]"
        assert s.run(["test", "-e", tmpdir]).rc == 1


def test_unreachable_port_is_node_unreachable_fast(sshd):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with SshPool(SshOptions(known_hosts=sshd.known_hosts, connect_timeout_s=2)) as pool:
        t0 = time.monotonic()
        with pytest.raises(NodeUnreachable) as ei:
            pool.session(
                SshTarget("node4", "127.0.0.1", port=port, user="root", key_file=sshd.client_key)
            ).run(["true"])
    assert time.monotonic() - t0 < 2.5
    assert ei.value.node == "node4" and not isinstance(ei.value, HostKeyError)


def test_silent_port_times_out_within_connect_timeout(sshd):
    # a listening socket that never answers the SSH banner
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        with SshPool(SshOptions(known_hosts=sshd.known_hosts, connect_timeout_s=1)) as pool:
            t0 = time.monotonic()
            with pytest.raises(NodeUnreachable):
                pool.session(
                    SshTarget(
                        "node4", "127.0.0.1", port=port, user="root", key_file=sshd.client_key
                    )
                ).run(["true"])
        assert time.monotonic() - t0 < 3
