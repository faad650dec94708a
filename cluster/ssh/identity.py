"""The SSH identity of whoever acts on the cluster from where it runs (the provisioned watchdog).

The applied plan carries the control machine's SSH settings: its private key
(`ansible_ssh_private_key_file`) and its known_hosts (`tpwarden.ssh.known_hosts`, or
`UserKnownHostsFile` in the ssh args). On the watchdog host those paths do not exist, or are
someone else's; provisioning gives the watchdog a key of its own, authorized on every node, and
a known_hosts file with every node's host keys (playbooks/roles/units/tasks/watchdog_ssh.yml).
`with_ssh_identity()` makes a spec use them, for every node and every hop of its route.

This is the watcher's deployment, not the server's config: the config hash (what runs) is the
same with or without it, and the applied plan a restart records stays the one it replays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpwarden.cluster.spec import ClusterSpec


@dataclass(frozen=True)
class SshIdentity:
    """A private key and a known_hosts file that replace the spec's (None: keep the spec's)."""

    key_file: str | None = None
    known_hosts: str | None = None

    def apply(self, spec: ClusterSpec) -> ClusterSpec:
        return with_ssh_identity(spec, self.key_file, self.known_hosts)

    def argv(self) -> list[str]:
        """The same identity as options of `watchdog run` and of the restart job."""
        out: list[str] = []
        if self.key_file:
            out += ["--ssh-key", self.key_file]
        if self.known_hosts:
            out += ["--known-hosts", self.known_hosts]
        return out


def with_ssh_identity(
    spec: ClusterSpec, key_file: str | None, known_hosts: str | None
) -> ClusterSpec:
    """`spec` with `key_file` as every node's private key and `known_hosts` as the one host-key
    file of every connection. Pure: returns a new spec.

    Jump hosts: a hop takes its key from the ssh_config entry that names it on this machine,
    else the node's (`ssh.connect.connect`), so without such an entry every hop uses `key_file`
    too. `tpwarden.ssh.known_hosts` already wins over `UserKnownHostsFile` in the ssh args for
    every hop, so `known_hosts` covers the jump hosts (their keys must be in it).
    """
    if not key_file and not known_hosts:
        return spec
    nodes = spec.nodes
    if key_file:
        nodes = tuple(dataclasses.replace(n, ssh_key_file=key_file) for n in nodes)
    ssh = spec.ssh.model_copy(update={"known_hosts": known_hosts}) if known_hosts else spec.ssh
    settings = spec.settings
    if settings is not None and known_hosts:
        settings = settings.model_copy(update={"ssh": ssh})  # the spec stays one consistent thing
    return dataclasses.replace(spec, nodes=nodes, ssh=ssh, settings=settings)
