"""The Docker-over-SSH pool (cluster/containers/ssh_transport.py): a pooled HTTP connection whose
SSH channel the node ended (its `docker system dial-stdio` gone) is replaced, not reused; a live
one is reused. Real paramiko Channel objects, no network: only their state flags are read."""

from __future__ import annotations

import paramiko
from tpwarden.cluster.containers.ssh_transport import _BoundedSSHPool


class NoClient:
    def get_transport(self):
        return None


def _pooled(pool: _BoundedSSHPool, chan: paramiko.Channel):
    """A connection taken from the pool (a new one), given `chan`, and returned to it."""
    conn = pool._get_conn(timeout=1)
    conn.sock = chan
    pool._put_conn(conn)
    return conn


def test_a_channel_the_node_ended_is_not_reused():
    pool = _BoundedSSHPool(ssh_client=NoClient(), timeout=5, maxsize=2, host="node1")
    for end in ("eof", "closed", "exited"):
        chan = paramiko.Channel(1)
        if end == "eof":
            chan.eof_received = True
        elif end == "closed":
            chan.closed = True
        else:
            chan.status_event.set()  # paramiko's exit-status flag
        stale = _pooled(pool, chan)
        fresh = pool._get_conn(timeout=1)
        assert fresh is not stale and fresh.sock is None, end  # a new channel on first use


def test_a_live_channel_is_reused():
    pool = _BoundedSSHPool(ssh_client=NoClient(), timeout=5, maxsize=2, host="node1")
    live = _pooled(pool, paramiko.Channel(2))
    assert pool._get_conn(timeout=1) is live
