"""The transport seam: how a node (or a client) opens and accepts byte streams.

``TcpTransport`` is real TCP. A simulation passes its own transport that hands out asyncio
streams over a simulated network, so the framing and RPC code of ``wire`` stays the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

ConnectCallback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listener(Protocol):
    """An accepting endpoint (``asyncio.Server`` is one)."""

    async def serve_forever(self) -> None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    async def connect(
        self, host: str, port: int, *, source: str | None, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection; ``source`` is the local address to send from (None: any)."""
        ...

    async def listen(
        self, host: str, port: int, on_connect: ConnectCallback, *, limit: int
    ) -> Listener: ...


class TcpTransport:
    """Real TCP sockets through asyncio."""

    async def connect(
        self, host: str, port: int, *, source: str | None, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # Binding the source address lets an iptables rule tell which node sent a packet
        # (nodes sharing one host's loopback would otherwise all come from 127.0.0.1).
        local_addr = (source, 0) if source else None
        return await asyncio.open_connection(host, port, limit=limit, local_addr=local_addr)

    async def listen(
        self, host: str, port: int, on_connect: ConnectCallback, *, limit: int
    ) -> Listener:
        return await asyncio.start_server(on_connect, host, port, limit=limit, reuse_address=True)


TCP = TcpTransport()
