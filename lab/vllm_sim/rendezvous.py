"""Multi-node rendezvous over TCP (stands in for torch.distributed + vLLM's MessageQueue).

Newline-delimited JSON. Worker -> head: ``hello{rank}``, ``hb``, ``done{id}``.
Head -> worker: ``exec{id, kind, dur}`` (every engine step and the boot-time profile run),
``hb``. A worker that is paused or killed never answers ``exec``: the head's step hangs.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field

HEARTBEAT_S = 2.0


async def send(writer: asyncio.StreamWriter, msg: dict) -> None:
    writer.write((json.dumps(msg) + "\n").encode())
    try:
        await writer.drain()
    except (ConnectionError, OSError):
        pass


@dataclass
class RankConn:
    rank: int
    writer: asyncio.StreamWriter
    closed: bool = False
    pending: dict[int, asyncio.Future] = field(default_factory=dict)


class RendezvousServer:
    """Head side: accepts the headless ranks and fans out step RPCs."""

    def __init__(self, addr: str, port: int, nnodes: int) -> None:
        self.addr, self.port, self.nnodes = addr, port, nnodes
        self.ranks: dict[int, RankConn] = {}
        self.changed = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._next_id = 0

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._handle, self.addr, self.port, reuse_address=True
            )
        except OSError:
            # master_addr is not an address of this host (e.g. a NAT-ed name): listen everywhere.
            self._server = await asyncio.start_server(
                self._handle, "0.0.0.0", self.port, reuse_address=True
            )

    def connected(self) -> list[int]:
        return sorted(r for r, c in self.ranks.items() if not c.closed)

    def all_connected(self) -> bool:
        return len(self.connected()) >= self.nnodes - 1

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn: RankConn | None = None
        try:
            line = await reader.readline()
            hello = json.loads(line or b"{}")
            rank = int(hello.get("rank", -1))
            old = self.ranks.get(rank)
            if hello.get("op") != "hello" or not 0 < rank < self.nnodes or (old and not old.closed):
                await send(writer, {"op": "reject", "reason": f"rank {rank} invalid or taken"})
                writer.close()
                return
            conn = RankConn(rank, writer)
            self.ranks[rank] = conn
            await send(writer, {"op": "welcome", "world": self.nnodes})
            self.changed.set()
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg = json.loads(line)
                if msg.get("op") == "done":
                    fut = conn.pending.pop(int(msg["id"]), None)
                    if fut and not fut.done():
                        fut.set_result(True)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            if conn is not None:
                conn.closed = True  # its pending futures never resolve: the step hangs
                self.changed.set()
            writer.close()

    async def collective(self, kind: str, dur: float) -> None:
        """Send one RPC to every remote rank and wait for all answers (no timeout here)."""
        self._next_id += 1
        rid = self._next_id
        loop = asyncio.get_running_loop()
        futs = []
        for conn in list(self.ranks.values()):
            fut = loop.create_future()
            futs.append(fut)
            if conn.closed:
                continue
            conn.pending[rid] = fut
            await send(conn.writer, {"op": "exec", "id": rid, "kind": kind, "dur": dur})
        if futs:
            await asyncio.gather(*futs)

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            for conn in list(self.ranks.values()):
                if not conn.closed:
                    await send(conn.writer, {"op": "hb"})


async def connect(
    addr: str, port: int, rank: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(addr, port)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await send(writer, {"op": "hello", "rank": rank})
    reply = json.loads(await reader.readline() or b"{}")
    if reply.get("op") != "welcome":
        writer.close()
        raise ConnectionRefusedError(reply.get("reason", "rejected by head"))
    return reader, writer
