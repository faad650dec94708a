"""Opening one verified SSH connection to a node, through its jump hosts if it has any.

Split from `tpwarden.cluster.ssh.gateway` (which runs commands and moves files over the connection):
where to connect (`SshTarget`, `SshOptions`), how host keys are checked, and the route a
connection takes (ProxyJump hops as direct-tcpip channels, or a ProxyCommand).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shlex
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, NoReturn

import paramiko
from tpwarden.cluster.errors import HostKeyError, NodeUnreachable
from tpwarden.cluster.ssh.known_hosts import KnownHosts, KnownHostsError, read_known_hosts
from tpwarden.cluster.ssh.route import Hop, Route, proxy_argv, route_for

if TYPE_CHECKING:
    from tpwarden.cluster.settings import SshSpec
    from tpwarden.cluster.spec import NodeSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SshTarget:
    """Where and how to reach one node; built from a `NodeSpec`."""

    node: str
    host: str
    _: KW_ONLY  # the rest by name
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    become: bool = False
    route: Route = Route()  # jump hosts / ProxyCommand, as Ansible's ssh would use them

    @classmethod
    def from_node(cls, node: NodeSpec) -> SshTarget:
        return cls(
            node=node.name,
            host=node.ssh_host,
            port=int(node.ssh_port or 22),
            user=node.ssh_user or "root",
            key_file=node.ssh_key_file,
            become=bool(getattr(node, "become", False)),
            route=route_for(node.ssh_host, getattr(node, "ssh_args", None)),
        )


@dataclass(frozen=True)
class SshOptions:
    """Connection policy shared by all nodes (the inventory's `SshSpec`)."""

    known_hosts: str | None = None
    connect_timeout_s: float = 10.0
    allow_unknown_hosts: bool = False

    @classmethod
    def from_spec(cls, spec: SshSpec | None) -> SshOptions:
        if spec is None:
            return cls()
        return cls(
            known_hosts=spec.known_hosts,
            connect_timeout_s=float(spec.connect_timeout_s),
            allow_unknown_hosts=bool(getattr(spec, "allow_unknown_hosts", False)),
        )


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, e.g. `SHA256:4Fq...`."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _host_entry(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, key: paramiko.PKey, revoked: bool = False) -> None:
        super().__init__("revoked host key" if revoked else "unknown host key")
        self.key = key
        self.revoked = revoked


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, keeping the offered key so the error can show its fingerprint.
    A revoked key is never listed as known (`KnownHosts.load_into`), so it always lands here."""

    def __init__(self, known: KnownHosts) -> None:
        self.known = known

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> NoReturn:
        raise _UnknownHostKey(key, self.known.is_revoked(key))


class _AcceptUnknownInMemory(_RejectUnknown):
    """`allow_unknown_hosts`: accept for this process only; never write the known_hosts file.
    A revoked key is still refused."""

    def missing_host_key(  # type: ignore[override]
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.known.is_revoked(key):
            raise _UnknownHostKey(key, revoked=True)
        log.warning(
            "accepting unknown host key %s %s (allow_unknown_hosts)", hostname, fingerprint(key)
        )
        client.get_host_keys().add(hostname, key.get_name(), key)


def _fix_hint(target: SshTarget, known_hosts: str) -> str:
    port = f"-p {target.port} " if target.port != 22 else ""
    return (
        f"verify the node's key out of band (on its console: ssh-keygen -lf "
        f"/etc/ssh/ssh_host_ed25519_key.pub), then add it: ssh-keyscan {port}{target.host} "
        f">> {known_hosts}"
    )


def connect(
    t: SshTarget, options: SshOptions, factory: type[paramiko.SSHClient]
) -> tuple[paramiko.SSHClient, list[paramiko.SSHClient]]:
    """Connect through each jump host in turn (each one's key verified like the node's), then
    to the node over a direct-tcpip channel of the last hop, or a ProxyCommand. Returns the
    node's client and the jump clients (close them after it)."""
    jumps: list[paramiko.SSHClient] = []
    sock: paramiko.Channel | paramiko.ProxyCommand | None = None
    try:
        for hop in t.route.jumps:
            via = f"jump host {hop.host}:{hop.port} for {t.node}"
            jump = _connect_one(
                SshTarget(
                    node=via,
                    host=hop.host,
                    port=hop.port,
                    user=hop.user or t.user,
                    key_file=hop.key_file or t.key_file,
                ),
                sock,
                options,
                factory,
                t.route.known_hosts,
            )
            jumps.append(jump)
            sock = _channel_through(jump, hop, t, options.connect_timeout_s)
        if sock is None and t.route.proxy_command:
            argv = proxy_argv(t.route.proxy_command, t.host, t.port, t.user)
            # paramiko splits its command line with shlex: joined quoted, it splits back to argv
            sock = paramiko.ProxyCommand(shlex.join(argv))
        return _connect_one(t, sock, options, factory, t.route.known_hosts), jumps
    except BaseException:
        for jump in reversed(jumps):
            jump.close()
        raise


def _channel_through(
    jump: paramiko.SSHClient, hop: Hop, t: SshTarget, timeout_s: float
) -> paramiko.Channel:
    """A direct-tcpip channel from the jump host to the node: the socket of the next hop."""
    transport = jump.get_transport()
    try:
        assert transport is not None
        return transport.open_channel(
            "direct-tcpip", (t.host, t.port), ("127.0.0.1", 0), timeout=timeout_s,
        )  # fmt: skip
    except (paramiko.SSHException, EOFError, OSError, AssertionError) as e:
        raise NodeUnreachable(
            t.node, f"jump host {hop.host}:{hop.port} cannot reach {t.host}:{t.port}: {e}"
        ) from None


def _connect_one(
    t: SshTarget,
    sock: paramiko.Channel | paramiko.ProxyCommand | None,
    o: SshOptions,
    factory: type[paramiko.SSHClient],
    route_known_hosts: str | None,
) -> paramiko.SSHClient:
    client = factory()
    # one setting: tpwarden.ssh.known_hosts, else UserKnownHostsFile from the ssh args, else
    # the user's ~/.ssh/known_hosts
    chosen = o.known_hosts or route_known_hosts
    known_hosts = chosen or os.path.expanduser("~/.ssh/known_hosts")
    if chosen and not os.path.exists(chosen):
        raise HostKeyError(
            t.node,
            f"known_hosts file {chosen} does not exist ({_fix_hint(t, chosen)})",
        )
    known = _read_known_hosts(t, known_hosts)
    known.load_into(client.get_host_keys())
    client.set_missing_host_key_policy(
        _AcceptUnknownInMemory(known) if o.allow_unknown_hosts else _RejectUnknown(known)
    )
    timeout = o.connect_timeout_s
    try:
        client.connect(
            t.host,
            port=t.port,
            username=t.user,
            key_filename=t.key_file,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=True,
            look_for_keys=t.key_file is None,
            sock=sock,
        )
    except _UnknownHostKey as e:
        client.close()
        raise HostKeyError(t.node, _unknown_key_message(t, known, e)) from None
    except paramiko.BadHostKeyException as e:
        client.close()
        if known.is_revoked(e.key):
            raise HostKeyError(t.node, _revoked_message(t, known, e.key)) from None
        raise HostKeyError(
            t.node,
            f"HOST KEY CHANGED for {_host_entry(t.host, t.port)}: {known_hosts} has "
            f"{fingerprint(e.expected_key)}, the server offered {fingerprint(e.key)}. This "
            f"may be an attack or a reinstalled node; if the node was reinstalled, remove "
            f"the old entry (ssh-keygen -R '{_host_entry(t.host, t.port)}' -f "
            f"{known_hosts}) and {_fix_hint(t, known_hosts)}",
        ) from None
    except paramiko.AuthenticationException as e:
        client.close()
        raise NodeUnreachable(t.node, f"authentication failed for {t.user}@{t.host}: {e}") from None
    except TimeoutError:
        client.close()
        raise NodeUnreachable(
            t.node, f"connect to {t.host}:{t.port} timed out after {timeout:g} s"
        ) from None
    except paramiko.ssh_exception.NoValidConnectionsError as e:
        client.close()
        reason = "; ".join(sorted({str(_strerror(err) or err) for err in e.errors.values()}))
        raise NodeUnreachable(t.node, f"{t.host}:{t.port}: {reason}") from None
    except (paramiko.SSHException, OSError, EOFError) as e:
        client.close()
        raise NodeUnreachable(t.node, f"{t.host}:{t.port}: {e or type(e).__name__}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return client


def _read_known_hosts(t: SshTarget, path: str) -> KnownHosts:
    """The known_hosts file as tpwarden trusts it; a missing default file trusts nothing."""
    try:
        return read_known_hosts(path)
    except FileNotFoundError:
        return KnownHosts(path)
    except KnownHostsError as exc:
        raise HostKeyError(t.node, f"{exc}; fix or remove that line") from None
    except OSError as exc:
        raise HostKeyError(
            t.node, f"cannot read known_hosts file {path}: {exc.strerror or exc}"
        ) from None


def _revoked_message(t: SshTarget, known: KnownHosts, key: paramiko.PKey) -> str:
    return (
        f"host key {key.get_name()} {fingerprint(key)} offered by {_host_entry(t.host, t.port)} "
        f"is marked @revoked in {known.path}; refusing to connect (a revoked key is never "
        f"accepted: give the node a new host key, then {_fix_hint(t, known.path)})"
    )


def _unknown_key_message(t: SshTarget, known: KnownHosts, e: _UnknownHostKey) -> str:
    if e.revoked:
        return _revoked_message(t, known, e.key)
    offered = f"offered {e.key.get_name()} {fingerprint(e.key)}"
    authority = known.authority_for(t.host, t.port)
    if authority is not None:
        return (
            f"{known.path}:{authority.line}: @cert-authority vouches for "
            f"{_host_entry(t.host, t.port)}, but tpwarden's SSH client checks plain host keys "
            f"only, not host certificates ({offered}); refusing to connect: list the node's "
            f"own key: {_fix_hint(t, known.path)}"
        )
    return (
        f"host key for {_host_entry(t.host, t.port)} is not in {known.path} ({offered}); "
        f"refusing to connect: {_fix_hint(t, known.path)}"
    )


def _strerror(err: Exception) -> str | None:
    """The OS's words for a failed connect (paramiko collects the socket errors per address)."""
    return err.strerror if isinstance(err, OSError) else None
