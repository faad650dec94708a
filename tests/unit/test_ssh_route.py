"""Where Ansible's ssh would go: ProxyJump/ProxyCommand from the ssh args or the ssh_config."""

from __future__ import annotations

import shlex

import paramiko
import pytest
from tpwarden.cluster.errors import NodeUnreachable
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget, connect
from tpwarden.cluster.ssh.route import Hop, Route, parse_hop, parse_ssh_args, proxy_argv, route_for


@pytest.mark.parametrize(
    ("args", "jump"),
    [
        ("-o ProxyJump=bastion", "bastion"),
        ("-oProxyJump=ops@bastion:2222", "ops@bastion:2222"),
        ("-o 'ProxyJump ops@bastion'", "ops@bastion"),
        ("-J a,b -o StrictHostKeyChecking=yes", "a,b"),
        ("-o proxyjump=x", "x"),
    ],
)
def test_proxyjump_spellings(args, jump):
    assert parse_ssh_args(args)["proxyjump"] == jump


def test_hops():
    assert parse_hop("ops@bastion:2222") == Hop("bastion", 2222, "ops")
    assert parse_hop("bastion") == Hop("bastion", 22, None)
    assert parse_hop("[fd00::1]:2200") == Hop("fd00::1", 2200, None)
    with pytest.raises(ValueError):
        parse_hop("bastion:99999")


def test_route_from_args_wins_over_ssh_config(tmp_path):
    config = tmp_path / "config"
    config.write_text(
        "Host 10.0.0.*\n  ProxyJump gw\nHost gw\n  HostName 192.0.2.1\n  User ops\n  Port 2022\n"
    )
    from_config = route_for("10.0.0.12", None, str(config))
    assert from_config.jumps == (Hop("192.0.2.1", 2022, "ops"),)
    from_args = route_for("10.0.0.12", "-o ProxyJump=root@10.0.0.11", str(config))
    assert from_args.jumps == (Hop("10.0.0.11", 22, "root"),)
    assert route_for("10.9.9.9", None, str(config)).jumps == ()


def test_chain_and_known_hosts():
    route = route_for("n2", "-J a@h1,h2:2200 -o UserKnownHostsFile=/etc/tpwarden/kh", None)
    assert route.jumps == (Hop("h1", 22, "a"), Hop("h2", 2200, None))
    assert route.known_hosts == "/etc/tpwarden/kh"


def test_proxycommand_none_means_none():
    assert route_for("n", "-o ProxyCommand=none", None).proxy_command is None


PWNED = "10.0.0.11:22 -oProxyCommand=touch${IFS}/tmp/pwned"  # issue 29's ansible_host


def test_proxycommand_tokens_are_substituted_after_the_split():
    argv = proxy_argv("ssh -W %h:%p -l %r jump 100%%", PWNED, 22, "ops")
    assert argv == ["ssh", "-W", f"{PWNED}:22", "-l", "ops", "jump", "100%"]
    # substituting before the split (what paramiko would do with the filled-in string) would
    # have made the host's tail an option of the proxy's ssh
    assert "-oProxyCommand=touch${IFS}/tmp/pwned:22" in shlex.split(
        "ssh -W %h:%p".replace("%h", PWNED).replace("%p", "22")
    )


def test_a_host_cannot_add_arguments_to_a_running_proxycommand(tmp_path):
    # The proxy command really runs (touch, then exits: the connection fails, no network);
    # a host with spaces and an option makes one file named after all of it, never two
    node = tmp_path / "made"
    node.mkdir()
    target = SshTarget(
        "n2",
        "a -oProxyCommand=touch b",
        port=22,
        user="root",
        route=Route(proxy_command=f"touch {node}/%h"),
    )
    with pytest.raises(NodeUnreachable):
        connect(target, SshOptions(known_hosts=str(_empty(tmp_path)), connect_timeout_s=2),
                paramiko.SSHClient)  # fmt: skip
    assert sorted(p.name for p in node.iterdir()) == ["a -oProxyCommand=touch b"]


def _empty(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    return known
