"""A simulated network of TCP-like byte streams between named endpoints.

One-way latency between nodes is 0.3 ms plus an exponential tail of mean 1.0 ms: it stands for
the wire and the receiving process's CPU, which costs no virtual time here (docker runs
measured round trips of 0.3 ms at best, 3-19 ms at the median); the harness's own link is
faster (0.02 ms plus a tail of mean 0.05 ms). Each connection is two ordered pipes (TCP never
reorders within a connection; separate connections interleave freely). A link cut by a
partition holds its bytes, as TCP retransmission would, until it heals; a connect across a
cut hangs until the caller's timeout. Killing a node closes its connections (its kernel sends
FIN) and removes its listeners, so later connects are refused.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import random
from typing import Any

from schemasync.transport import ConnectCallback, Listener
from sim.loop import NODE

CLIENT = "client"  # the harness's endpoint: never partitioned (the controller's own link)
CLIENT_BASE_MS, CLIENT_MEAN_EXTRA_MS = 0.02, 0.05


class Network:
    """Links between nodes, their cuts and delays, and every live connection."""

    def __init__(
        self,
        rng: random.Random,
        *,
        latency_ms: tuple[float, float] = (0.3, 1.0),
    ) -> None:
        self.rng = rng
        self.base_ms, self.mean_extra_ms = latency_ms
        # (from, to, port): bytes from -> to on connections to ``port`` (0: any) are held
        self.cut: set[tuple[str, str, int]] = set()
        self.extra_delay_s: dict[tuple[str, str], float] = {}
        self.listeners: dict[tuple[str, int], _Listener] = {}
        self.pipes: list[_Pipe] = []
        self.contexts: dict[str, contextvars.Context] = {}
        self.messages = 0
        self._heal_waiters: list[asyncio.Future[None]] = []

    # -- node identity ---------------------------------------------------------------------
    def context_of(self, node: str) -> contextvars.Context:
        """The context a node's callbacks run in (NODE set): a fresh one per incarnation."""
        ctx = self.contexts.get(node)
        if ctx is None:
            ctx = contextvars.Context()
            ctx.run(NODE.set, None if node == CLIENT else node)
            self.contexts[node] = ctx
        return ctx

    def transport_for(self, node: str) -> SimTransport:
        return SimTransport(self, node)

    # -- faults ----------------------------------------------------------------------------
    def blocked(self, src: str, dst: str, port: int = 0) -> bool:
        return (src, dst, 0) in self.cut or (port != 0 and (src, dst, port) in self.cut)

    def set_cut(self, cut: set[tuple[str, str, int]]) -> None:
        """Replace every partition rule; held bytes on healed links go out now."""
        self.cut = set(cut)
        self._links_changed()

    def set_delay(self, src: str, dst: str, seconds: float) -> None:
        if seconds > 0:
            self.extra_delay_s[(src, dst)] = seconds
        else:
            self.extra_delay_s.pop((src, dst), None)

    def _links_changed(self) -> None:
        for pipe in list(self.pipes):
            pipe.flush()
        waiters, self._heal_waiters = self._heal_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait_link(self, src: str, dst: str, port: int) -> None:
        while self.blocked(src, dst, port):
            fut = asyncio.get_running_loop().create_future()
            self._heal_waiters.append(fut)
            await fut

    def kill(self, node: str) -> None:
        """``node`` died: its listeners go, its connections close from its side (FIN)."""
        for key in [k for k, lis in self.listeners.items() if lis.node == node]:
            del self.listeners[key]
        for pipe in list(self.pipes):
            if node in (pipe.src, pipe.dst):
                pipe.owner_died(node)
        self.contexts.pop(node, None)

    # -- timing ----------------------------------------------------------------------------
    def latency_s(self, src: str, dst: str) -> float:
        if CLIENT in (src, dst):  # the controller's link: loopback-fast, no node CPU behind it
            ms = CLIENT_BASE_MS + self.rng.expovariate(1.0 / CLIENT_MEAN_EXTRA_MS)
        else:
            ms = self.base_ms + self.rng.expovariate(1.0 / self.mean_extra_ms)
        return min(ms, 20.0) / 1000 + self.extra_delay_s.get((src, dst), 0.0)


class _Pipe:
    """One direction of a connection: ordered chunks from ``src`` to ``dst``."""

    def __init__(self, net: Network, src: str, dst: str, port: int) -> None:
        self.net = net
        self.src = src
        self.dst = dst
        self.port = port  # the listening port of the connection: what a rule can match
        self.receiver: asyncio.Protocol | None = None
        self.receiver_ctx: contextvars.Context | None = None
        self.held: list[bytes | None] = []  # None: the FIN
        # Sent and not yet delivered, in order: each delivery timer hands over the oldest, so
        # chunks due at the same instant (a healed link's backlog) keep their order, whatever
        # order the timer heap pops equal times in.
        self.in_flight: collections.deque[bytes | None] = collections.deque()
        self.last_at = 0.0
        self.closed = False  # FIN sent (nothing more goes in)
        self.dead = False  # the receiving side is gone: drop everything
        net.pipes.append(self)

    def send(self, chunk: bytes | None) -> None:
        if self.dead:
            return
        if self.held or (self.net.cut and self.net.blocked(self.src, self.dst, self.port)):
            self.held.append(chunk)
            return
        self._schedule(chunk)

    def flush(self) -> None:
        if self.dead or not self.held or self.net.blocked(self.src, self.dst, self.port):
            return
        held, self.held = self.held, []
        for chunk in held:
            self._schedule(chunk)

    def _schedule(self, chunk: bytes | None) -> None:
        loop = asyncio.get_running_loop()
        at = max(loop.time() + self.net.latency_s(self.src, self.dst), self.last_at)
        self.last_at = at
        self.net.messages += 1
        self.in_flight.append(chunk)
        loop.call_at(at, self._deliver, context=self.receiver_ctx)

    def _deliver(self) -> None:
        if not self.in_flight:  # dropped on the way: the receiving side is gone
            return
        chunk = self.in_flight.popleft()
        if self.dead or self.receiver is None:
            return
        if chunk is not None:
            self.receiver.data_received(chunk)
            return
        self.receiver.eof_received()

    def owner_died(self, node: str) -> None:
        if node == self.dst:
            self.dead = True  # nobody reads on that side any more
            self._drop()
        else:
            self.held = [c for c in self.held if c is not None]
            if not self.closed:
                self.closed = True
                self.send(None)

    def _drop(self) -> None:
        self.held = []
        self.in_flight.clear()
        if self in self.net.pipes:
            self.net.pipes.remove(self)


class _Connection:
    """Both pipes of one connection and the end that is closed when both FINs are through."""

    def __init__(self, net: Network, a: str, b: str, port: int) -> None:
        self.a_to_b = _Pipe(net, a, b, port)
        self.b_to_a = _Pipe(net, b, a, port)


class SimStreamTransport(asyncio.Transport):
    """One end of a simulated connection, as asyncio's stream protocols expect it."""

    def __init__(
        self, out: _Pipe, inbound: _Pipe, peername: tuple[str, int], sockname: tuple[str, int]
    ) -> None:
        super().__init__()
        self._out = out
        self._in = inbound
        self._extra = {"peername": peername, "sockname": sockname}
        self._protocol: asyncio.BaseProtocol | None = None
        self._closing = False
        self._lost = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._out.dead or self._out.closed:
            return
        self._out.send(bytes(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not self._out.closed:
            self._out.closed = True
            self._out.send(None)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.write_eof()
        self._in.dead = True  # bytes still coming to a closed socket are discarded
        self._in._drop()
        self._connection_lost(None)

    def abort(self) -> None:
        self.close()

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost or self._protocol is None:
            return
        self._lost = True
        protocol = self._protocol
        asyncio.get_running_loop().call_soon(
            protocol.connection_lost, exc, context=self._in.receiver_ctx
        )

    def pause_reading(self) -> None:  # no flow control: memory is the only limit here
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing

    def get_write_buffer_size(self) -> int:
        return 0


class _Listener:
    def __init__(self, node: str, on_connect: ConnectCallback, limit: int) -> None:
        self.node = node
        self.on_connect = on_connect
        self.limit = limit
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def serve_forever(self) -> None:
        await asyncio.shield(self._closed)

    def close(self) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


class SimTransport:
    """The ``schemasync.transport.Transport`` of one endpoint (a node, or the harness)."""

    def __init__(self, net: Network, node: str) -> None:
        self.net = net
        self.node = node
        self._ports = 40000

    async def listen(
        self, host: str, port: int, on_connect: ConnectCallback, *, limit: int
    ) -> Listener:
        listener = _Listener(self.node, on_connect, limit)
        self.net.listeners[(self.node, port)] = listener
        return listener

    async def connect(
        self, host: str, port: int, *, source: str | None, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        net = self.net
        loop = asyncio.get_running_loop()
        await net.wait_link(self.node, host, port)  # SYNs are dropped across a cut
        await asyncio.sleep(net.latency_s(self.node, host))
        await net.wait_link(host, self.node, port)  # ... and so is the SYN-ACK
        await asyncio.sleep(net.latency_s(host, self.node))
        listener = net.listeners.get((host, port))
        if listener is None:
            raise ConnectionRefusedError(f"[sim] connect to {host}:{port} refused")
        self._ports += 1
        conn = _Connection(net, self.node, host, port)
        me = (self.node, self._ports)
        there = (host, port)
        client_end = SimStreamTransport(conn.a_to_b, conn.b_to_a, there, me)
        server_end = SimStreamTransport(conn.b_to_a, conn.a_to_b, me, there)
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        conn.b_to_a.receiver = protocol
        conn.b_to_a.receiver_ctx = net.context_of(self.node)
        client_end.set_protocol(protocol)
        protocol.connection_made(client_end)
        writer = asyncio.StreamWriter(client_end, protocol, reader, loop)

        server_ctx = net.context_of(host)
        server_reader = asyncio.StreamReader(limit=listener.limit, loop=loop)
        server_protocol = asyncio.StreamReaderProtocol(
            server_reader, listener.on_connect, loop=loop
        )
        conn.a_to_b.receiver = server_protocol
        conn.a_to_b.receiver_ctx = server_ctx
        server_end.set_protocol(server_protocol)
        loop.call_soon(server_protocol.connection_made, server_end, context=server_ctx)
        return reader, writer
