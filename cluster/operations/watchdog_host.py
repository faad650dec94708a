"""Where the watchdog runs, and the two connectors that reach it there (issue 30 item 4, 51).

The watchdog runs on `tpwarden_watchdog_host` (the head by default) and keeps its state (the
hold, its events, its dossiers) in its own state directory there: a hold written on the control
machine would say "restarts held" while the watchdog on the head goes on restarting. So what
acts on that state is chosen as pyinfra's connectors choose: here when the watchdog is on this
machine (in-process), else the same tpwarden command on that node, with the tpwarden that
provisioning installed there, over the verified SSH connection (`cluster.ssh`, as root: the
state dir is root's). A watchdog host that is neither this machine nor a node of the inventory
is refused. `report -i` reads the watchdog's event log from there (`watchdog_events`).

Nothing here prints or exits: `relay` returns what the node answered (`Relayed`), the command
renders it.
"""

from __future__ import annotations

import posixpath
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.settings import SshSpec
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

# provisioning's venv on every node (playbooks/roles/tpwarden/defaults: tpwarden_prefix/venv)
NODE_TPWARDEN = "/opt/tpwarden/venv/bin/tpwarden"
THIS_MACHINE = "control"  # tpwarden_watchdog_host naming the machine that runs tpwarden
REMOTE_TIMEOUT_S = 60.0
EVENTS = "events.jsonl"  # the watchdog's event log in its state dir (watchdog.events)


class FileSession(Protocol):
    """The part of `cluster.ssh.NodeSession` that copies the event log."""

    def exists(self, remote: str) -> bool: ...

    def get(self, remote: str, local: str) -> None: ...


class FilePool(Protocol):
    """The part of `cluster.ssh.SshPool` that copies the event log (a context manager)."""

    def __enter__(self) -> FilePool: ...

    def __exit__(self, *exc: object) -> None: ...

    def session(self, node: NodeSpec) -> FileSession: ...


@dataclass(frozen=True)
class WatchdogPlace:
    """Where the watchdog of an inventory runs: ``node`` None is this machine."""

    host: str
    node: NodeSpec | None

    def describe(self) -> str:
        return "this machine" if self.node is None else f"{self.host} (over SSH)"


def watchdog_place(spec: ClusterSpec, hostname: str | None = None) -> WatchdogPlace:
    """The watchdog's host from the inventory; ConfigError when it cannot be reached from here."""
    from tpwarden.cluster.control.nodes import is_local  # deferred: Docker, not for --help

    host = spec.watchdog_host or spec.head.name
    node = next((n for n in spec.nodes if n.name == host), None)
    if node is not None:
        return WatchdogPlace(host, None if is_local(node) else node)
    if host in (THIS_MACHINE, hostname or socket.gethostname()):
        return WatchdogPlace(host, None)
    raise ConfigError(
        f"the watchdog runs on {host} (tpwarden_watchdog_host), which is neither this machine "
        "nor a node of the inventory",
        key="tpwarden_watchdog_host",
        hint=f"run this command on {host}, or give the watchdog's --state-dir here",
    )


def remote_argv(spec: ClusterSpec, command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The node-side command line: the same command (``["watchdog", "hold"]``, ``["incident",
    "list"]``) on the watchdog's state dir."""
    return [NODE_TPWARDEN, *command, "--state-dir", spec.watchdog.state_dir, *args]


@dataclass(frozen=True)
class Relayed:
    """What the watchdog host answered to a command run there: its exit code and its output,
    for the command here to pass on as its own."""

    rc: int
    stdout: str
    stderr: str

    @property
    def exit_code(self) -> int:
        """The node's exit code as tpwarden's (0, 1 or 2; anything else is a failure)."""
        return self.rc if self.rc in (0, 1, 2) else 1


def relay(spec: ClusterSpec, command: Sequence[str], args: Sequence[str]) -> Relayed | None:
    """Run ``command`` (``("watchdog", "status")``, ``("incident", "list")``...) where the
    inventory's watchdog runs, when that is another machine: its answer. None when the watchdog
    runs here (the caller acts in-process). ConfigError when tpwarden is not installed there."""
    place = watchdog_place(spec)
    if place.node is None:
        return None
    rc, out, err = run_on_watchdog_host(spec, place.node, command, args)
    if rc == 127:  # the shell's "command not found"
        raise ConfigError(
            f"{place.host}: {NODE_TPWARDEN} not found (the watchdog runs there)",
            hint="provision the nodes first (`tpwarden provision`)",
        )
    return Relayed(rc, out, err)


def run_on_watchdog_host(
    spec: ClusterSpec, node: NodeSpec, command: Sequence[str], args: Sequence[str]
) -> tuple[int, str, str]:
    """Run a watchdog command on ``node`` (root: the state dir is root's); (rc, stdout, stderr).

    NodeUnreachable / CommandTimeout propagate (the CLI reports them as one line, exit 1)."""
    from tpwarden.cluster.control.nodes import NodeConnector  # deferred: paramiko, only when remote

    connector = NodeConnector(spec.ssh)
    try:
        result = connector.session(node).run(
            remote_argv(spec, command, args), timeout=REMOTE_TIMEOUT_S, sudo=True
        )
    finally:
        connector.close()
    return result.rc, result.stdout, result.stderr


def watchdog_events(
    spec: ClusterSpec,
    dest_dir: str | Path,
    pool: Callable[[SshSpec], FilePool] | None = None,
) -> tuple[Path, str | None]:
    """The watchdog's event log for a report: (file to read, why it could not be had, or None).

    Where the watchdog runs here, its own ``events.jsonl``; on a node, ``events.jsonl`` and its
    rotated part (``events.jsonl.1``) copied from there over SFTP into ``dest_dir`` through
    ``pool`` (default: the SSH gateway's `SshPool`)."""
    place = watchdog_place(spec)
    local = Path(spec.watchdog.state_dir) / EVENTS
    if place.node is None:
        return local, None if local.is_file() else f"no event log at {local}"
    if pool is None:
        from tpwarden.cluster.ssh.gateway import SshPool  # deferred: paramiko, only when remote

        pool = SshPool
    copied = Path(dest_dir) / EVENTS
    try:
        with pool(spec.ssh) as opened:
            session = opened.session(place.node)
            for name in (f"{EVENTS}.1", EVENTS):  # the rotated part first: it may be missing
                remote = posixpath.join(spec.watchdog.state_dir, name)
                if session.exists(remote):
                    session.get(remote, str(Path(dest_dir) / name))
    except TpwardenError as exc:
        return copied, f"{place.host}: {exc}"
    if not copied.is_file():
        return copied, f"no event log at {place.host}:{spec.watchdog.state_dir}/{EVENTS}"
    return copied, None
