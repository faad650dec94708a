"""docker-py's SSH transport, riding on the SSH gateway's verified connection: one bounded pool
per node, channels opened within the SSH connect timeout. `DockerGateway.over_ssh` mounts it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import paramiko
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter
from tpwarden.cluster.durable import JSONObject

if TYPE_CHECKING:
    from tpwarden.cluster.ssh.gateway import NodeSession
    from urllib3._collections import RecentlyUsedContainer


class VerifiedSSHAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter, riding on a paramiko client our SSH gateway verified."""

    def __init__(self, session: NodeSession, timeout: float) -> None:
        self._session = session
        # Each pooled HTTP connection is one SSH session; sshd allows 10 per connection
        # (MaxSessions), shared with the collector and log followers: stay well below.
        super().__init__(
            f"ssh://{session.target.host}",
            # types-docker says int; docker-py hands it to urllib3, which takes seconds as float
            timeout=timeout,  # type: ignore[arg-type]
            shell_out=False,
            max_pool_size=4,
        )

    def _create_paramiko_client(self, base_url: str) -> None:  # noqa: ARG002 - docker-py hook
        self.ssh_client = self._session.client()
        self.ssh_params: JSONObject = {}

    def _connect(self) -> None:
        # called by docker-py when the transport is gone: reconnect (and re-verify) via the
        # gateway instead of its own unverified path
        self.ssh_client = self._session.client()

    def get_connection(
        self, url: str | bytes, proxies: Mapping[str, str] | None = None
    ) -> SSHConnectionPool:
        # docker-py keys its SSH pools by the full request URL, so every distinct URL
        # (/containers/X/start, /containers/X/wait, ...) opened a new SSH session that stayed
        # open in its own pool; after ten, sshd (MaxSessions 10) refused new ones. One pool per
        # node keeps the sessions at max_pool_size.
        # types-docker declares `pools` an int; docker-py keeps urllib3's RecentlyUsedContainer
        pools = cast("RecentlyUsedContainer[str, SSHConnectionPool]", self.pools)
        transport = self.ssh_client.get_transport() if self.ssh_client else None
        if transport is None or not transport.is_active():
            # The node was cut off and came back: reconnect (re-verified) and drop the pool
            # that still holds channels of the dead transport.
            self._connect()
            pools.clear()
        with pools.lock:
            pool = pools.get("http+docker://ssh")
            if pool is None:
                pool = _BoundedSSHPool(
                    ssh_client=self.ssh_client,
                    timeout=self.timeout,
                    maxsize=self.max_pool_size,
                    host=self.ssh_host,
                )
                pool.open_timeout_s = self._session.options.connect_timeout_s
                pools["http+docker://ssh"] = pool
        return pool


class _BoundedSSHConnection(SSHConnection):
    """docker-py's SSH connection, its channel opened within the SSH connect timeout (docker-py
    leaves paramiko's one-hour default: a frozen node held every docker call for an hour).
    Reads keep the gateway's timeout; only a follow stream (its caller closes it) waits longer."""

    open_timeout_s: float = 10.0

    def connect(self) -> None:
        if self.ssh_transport is None:
            raise paramiko.SSHException("no SSH transport")
        chan = self.ssh_transport.open_session(timeout=self.open_timeout_s)
        chan.settimeout(self.timeout)
        chan.exec_command("docker system dial-stdio")
        # docker-py stores the paramiko channel here too (types-docker says SSHSocket only)
        self.sock = chan  # type: ignore[assignment]


class _BoundedSSHPool(SSHConnectionPool):
    open_timeout_s: float = 10.0

    # types-docker's SSHConnection does not match urllib3's BaseHTTPConnection protocol (and
    # types the pool's urllib3 Timeout as int), as docker-py's own _new_conn does: the same call.
    def _new_conn(self) -> _BoundedSSHConnection:  # type: ignore[override]
        conn = _BoundedSSHConnection(self.ssh_transport, self.timeout, self.ssh_host)  # type: ignore[arg-type]
        conn.open_timeout_s = self.open_timeout_s
        return conn

    def _get_conn(self, timeout: float | None = None) -> _BoundedSSHConnection:  # type: ignore[override]
        """A pooled connection, unless the node ended its channel while it sat in the pool.
        docker-py's own `_get_conn` skips urllib3's dropped-connection check (it would call
        fileno(), which costs paramiko a pipe per channel), so a channel closed on the node
        (`docker system dial-stdio` gone) was reused and the next call failed with "Socket is
        closed" (seen on the lab after a Controller sat idle for minutes). Its state is read
        from paramiko's flags instead: no fileno()."""
        conn = cast("_BoundedSSHConnection", super()._get_conn(timeout))
        chan = conn.sock
        if isinstance(chan, paramiko.Channel) and _ended(chan):
            conn.close()
            return self._new_conn()
        return conn


def _ended(chan: paramiko.Channel) -> bool:
    return bool(chan.closed or chan.eof_received or chan.exit_status_ready())
