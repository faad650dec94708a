"""known_hosts with OpenSSH markers (issue 29): `@revoked` keys are refused, `@cert-authority`
lines are refused with the file and line named, malformed lines name their line; before, both
markers gave a paramiko traceback. The connect tests run an in-process SSH server on 127.0.0.1
(host key exchange only; it accepts no login)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import paramiko
import pytest
from tpwarden.cluster.errors import HostKeyError, NodeUnreachable
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget, connect
from tpwarden.cluster.ssh.known_hosts import KnownHostsError, read_known_hosts

HOST_KEY = paramiko.ECDSAKey.generate()
OTHER_KEY = paramiko.ECDSAKey.generate()


def _line(names: str, key: paramiko.PKey, marker: str = "") -> str:
    return f"{marker + ' ' if marker else ''}{names} {key.get_name()} {key.get_base64()}\n"


class _NoLogin(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED


@pytest.fixture(scope="module")
def sshd():
    """Port of a server offering HOST_KEY; every login fails."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(HOST_KEY)
            transports.append(transport)
            try:
                transport.start_server(server=_NoLogin())
            except (paramiko.SSHException, EOFError, OSError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for transport in transports:
        transport.close()


def _connect(port: int, known_hosts: Path, allow_unknown: bool = False) -> None:
    target = SshTarget("n1", "127.0.0.1", port=port, user="root", key_file=None)
    options = SshOptions(
        known_hosts=str(known_hosts), connect_timeout_s=5, allow_unknown_hosts=allow_unknown
    )
    client, _ = connect(target, options, paramiko.SSHClient)
    client.close()


def _host(port: int) -> str:
    return f"[127.0.0.1]:{port}"


def test_a_listed_key_gets_past_the_host_key_check(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh keys: the login fails, after the kex
    known = tmp_path / "known_hosts"
    known.write_text("# comment\n\n" + _line(_host(sshd), HOST_KEY))
    with pytest.raises(NodeUnreachable) as info:
        _connect(sshd, known)
    assert not isinstance(info.value, HostKeyError), info.value


def test_a_revoked_key_is_refused_even_where_a_plain_line_lists_it(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    known = tmp_path / "known_hosts"
    known.write_text(_line(_host(sshd), HOST_KEY) + _line("*", HOST_KEY, "@revoked"))
    with pytest.raises(HostKeyError, match=f"is marked @revoked in {known}"):
        _connect(sshd, known)
    # allow_unknown_hosts accepts unknown keys, never revoked ones
    with pytest.raises(HostKeyError, match="@revoked"):
        _connect(sshd, known, allow_unknown=True)


def test_a_cert_authority_line_is_refused_naming_its_file_and_line(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    known = tmp_path / "known_hosts"
    known.write_text(
        _line("other.example", OTHER_KEY)
        + _line("*.corp.example", OTHER_KEY, "@cert-authority")
        + _line("127.0.0.*,[127.0.0.1]:*", OTHER_KEY, "@cert-authority")
    )
    with pytest.raises(HostKeyError) as info:
        _connect(sshd, known)
    reason = info.value.reason
    assert reason.startswith(f"{known}:3: @cert-authority vouches for {_host(sshd)}")
    assert "plain host keys only" in reason and "\n" not in reason


def test_an_unrelated_cert_authority_line_does_not_stop_a_listed_key(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    known = tmp_path / "known_hosts"
    known.write_text(
        _line("*.corp.example", OTHER_KEY, "@cert-authority") + _line(_host(sshd), HOST_KEY)
    )
    with pytest.raises(NodeUnreachable) as info:
        _connect(sshd, known)
    assert not isinstance(info.value, HostKeyError), info.value


def test_parse_markers_and_hashed_names(tmp_path):
    hashed = paramiko.HostKeys.hash_host("10.0.0.12")
    known = tmp_path / "kh"
    known.write_text(
        _line(hashed, HOST_KEY)
        + _line("10.0.0.20", HOST_KEY).replace(" ", " \t  ")  # any run of blanks
        + _line("10.0.0.13", OTHER_KEY, "@revoked")
        + _line("!10.0.0.14,10.0.0.*", OTHER_KEY, "@cert-authority")
    )
    parsed = read_known_hosts(str(known))
    keys = paramiko.HostKeys()
    parsed.load_into(keys)
    assert keys.lookup("10.0.0.12")["ecdsa-sha2-nistp256"] == HOST_KEY
    assert keys.lookup("10.0.0.20")["ecdsa-sha2-nistp256"] == HOST_KEY
    assert parsed.is_revoked(OTHER_KEY) and not parsed.is_revoked(HOST_KEY)
    assert parsed.authority_for("10.0.0.15").line == 4
    assert parsed.authority_for("10.0.0.14") is None  # negated
    assert parsed.authority_for("10.0.0.15", 2222) is None  # [host]:port does not match


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("@marker 10.0.0.1 ssh-ed25519 AAAA\n", "2: unknown marker @marker"),
        ("10.0.0.1 ssh-ed25519\n", "2: not a known_hosts line"),
        ("10.0.0.1 ecdsa-sha2-nistp256 not*base64!\n", "2: not a known_hosts line"),
    ],
)
def test_a_malformed_line_is_named(tmp_path, text, message):
    known = tmp_path / "kh"
    known.write_text("# first\n" + text)
    with pytest.raises(KnownHostsError, match=f"^{known}:{message}"):
        read_known_hosts(str(known))


def test_a_malformed_line_refuses_the_connection_in_one_line(tmp_path):
    known = tmp_path / "kh"
    known.write_text("@cert-authority\n")
    with pytest.raises(HostKeyError, match=f"{known}:1: not a known_hosts line"):
        _connect(1, known)  # refused before any connection is tried
