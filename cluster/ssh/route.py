"""How to reach a node, as Ansible's ssh connection would: ProxyJump, ProxyCommand, known_hosts.

Ansible runs OpenSSH, which honours `-o ProxyJump=...` in `ansible_ssh_common_args` and the
user's `~/.ssh/config`; paramiko reads neither. This module turns both into a `Route` (pure
parsing, tested without a network); `tpwarden.cluster.ssh.gateway` then opens each jump host's verified
connection and a `direct-tcpip` channel through it as the socket of the next hop.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where an ssh_config is read: not for `inventory check` (issue 30)
    import paramiko


@dataclass(frozen=True)
class Hop:
    """One jump host: `[user@]host[:port]` (user and key default to the target's)."""

    host: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None


@dataclass(frozen=True)
class Route:
    jumps: tuple[Hop, ...] = ()
    proxy_command: str | None = None
    known_hosts: str | None = None  # UserKnownHostsFile given in the ssh args


def parse_ssh_args(text: str | None) -> dict[str, str]:
    """`-o Key=Value`, `-oKey=Value`, `-o "Key Value"` and `-J hops` -> {lowercase key: value}.
    Other options are ignored (tpwarden does not pass them to anything)."""
    options: dict[str, str] = {}
    if not text:
        return options
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split ssh args {text!r}: {exc}") from None
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word in ("-o", "-J") and i + 1 < len(words):
            value, i = words[i + 1], i + 2
        elif word.startswith(("-o", "-J")) and len(word) > 2:
            value, i = word[2:], i + 1
        else:
            i += 1
            continue
        if word.startswith("-J"):
            options["proxyjump"] = value
            continue
        key, sep, rest = value.partition("=")
        if not sep:
            key, _, rest = value.partition(" ")
        options[key.strip().lower()] = rest.strip()
    return options


_PROXY_TOKEN = re.compile(r"%[hpr%]")


def proxy_argv(command: str, host: str, port: int, user: str) -> list[str]:
    """A ProxyCommand's argv: split first, then `%h`, `%p`, `%r` and `%%` replaced inside each
    word, so a host value can never add arguments or shell syntax (substituting before the
    split would let `10.0.0.11:22 -oProxyCommand=...` become options of the command)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot split ProxyCommand {command!r}: {exc}") from None
    values = {"%h": host, "%p": str(port), "%r": user, "%%": "%"}
    return [_PROXY_TOKEN.sub(lambda m: values[m.group(0)], word) for word in words]


def parse_hop(text: str) -> Hop:
    """`user@host:port`, `host:port`, `[v6::addr]:port` or `ssh://user@host:port`."""
    text = text.strip().removeprefix("ssh://")
    user = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
    port = 22
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = int(port_text)
    else:
        host = text
    if not host or not 1 <= port <= 65535:
        raise ValueError(f"{text!r} is not [user@]host[:port]")
    return Hop(host=host, port=port, user=user or None)


def route_for(
    host: str, ssh_args: str | None, ssh_config_path: str | None = "~/.ssh/config"
) -> Route:
    """The inventory's ssh args win; otherwise the user's ssh_config entry for `host`."""
    options = parse_ssh_args(ssh_args)
    config = _ssh_config(ssh_config_path)
    if "proxyjump" not in options and "proxycommand" not in options and config is not None:
        entry = config.lookup(host)
        for key in ("proxyjump", "proxycommand"):
            if key in entry:
                options[key] = entry[key]
    known_hosts = options.get("userknownhostsfile")
    if known_hosts:
        known_hosts = os.path.expanduser(known_hosts.split()[0])
    command = options.get("proxycommand")
    if command and command.lower() == "none":
        command = None
    jumps: tuple[Hop, ...] = ()
    jump_text = options.get("proxyjump")
    if jump_text and jump_text.lower() != "none":
        jumps = tuple(_resolve(parse_hop(part), config) for part in jump_text.split(","))
    return Route(jumps=jumps, proxy_command=command, known_hosts=known_hosts or None)


def _resolve(hop: Hop, config: paramiko.SSHConfig | None) -> Hop:
    """A jump host named by an ssh_config alias gets that entry's HostName, Port, User, key."""
    if config is None:
        return hop
    entry = config.lookup(hop.host)
    found = entry.get("identityfile")  # paramiko collects every IdentityFile line in a list
    keys = [found] if isinstance(found, str) else found or []
    return Hop(
        host=entry.get("hostname", hop.host),
        port=hop.port if hop.port != 22 else int(entry.get("port", 22)),
        user=hop.user or entry.get("user"),
        key_file=os.path.expanduser(keys[0]) if keys else None,
    )


def _ssh_config(path: str | None) -> paramiko.SSHConfig | None:
    if not path:
        return None
    full = os.path.expanduser(path)
    if not os.path.isfile(full):
        return None
    import paramiko  # deferred: 0.1-0.5 s, not for `inventory check` (issue 30)

    try:
        return paramiko.SSHConfig.from_path(full)
    except (OSError, paramiko.SSHException, ValueError):
        return None
