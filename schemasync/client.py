"""Client library: talk to any node's client port, failing over along a list of addresses.

Clients send no HLC (``hlc: 0``): a client is not a node, and carrying the ack's timestamp to
the next node would hide exactly the visibility bugs the CSmax wait protects against.
"""

from __future__ import annotations

import asyncio
from typing import Any

from schemasync import errors
from schemasync.deadline import within
from schemasync.errors import SchemaSyncError
from schemasync.transport import TCP, Transport
from schemasync.wire import FrameError, RpcConnection

__all__ = ["Client", "SchemaSyncError"]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {address!r}")
    return host, int(port)


class Client:
    """One logical client; requests are sent one at a time over one connection."""

    def __init__(self, addresses: list[str], timeout: float, transport: Transport = TCP) -> None:
        if not addresses:
            raise ValueError("no addresses")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.transport = transport
        self.node = ""
        self.address = ""
        self.last_reply_hlc = 0
        self._conn: RpcConnection | None = None
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(
        cls, addresses: list[str], timeout: float = 10.0, transport: Transport = TCP
    ) -> Client:
        """Connect to the first address that answers ``admin.status``, in order."""
        client = cls(addresses, timeout, transport)
        await client._ensure_connected()
        return client

    async def _ensure_connected(self) -> RpcConnection:
        if self._conn is not None and self._conn.stale():
            self._conn.close()  # the node closed it while idle: reconnect, same order
            self._conn = None
        if self._conn is not None:
            return self._conn
        failures = []
        for address in self.addresses:
            host, port = _split(address)
            try:
                async with within(self.timeout):
                    conn = await RpcConnection.open(host, port, None, self.transport)
                    reply = await conn.call("admin.status", {}, 0)
            except (OSError, TimeoutError, FrameError, asyncio.IncompleteReadError) as e:
                failures.append(f"{address}: {type(e).__name__}: {e}")
                continue
            if not reply.get("ok"):
                conn.close()
                failures.append(f"{address}: {reply.get('error')}")
                continue
            self._conn = conn
            self.address = address
            self.node = str(reply["body"].get("node", address))
            return conn
        raise SchemaSyncError(
            errors.UNAVAILABLE, "no node answered: " + "; ".join(failures), True, {"definite": True}
        )

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            # Fail over: try the next addresses first next time.
            if self.address in self.addresses:
                i = self.addresses.index(self.address)
                self.addresses = self.addresses[i + 1 :] + self.addresses[: i + 1]

    async def request(
        self, type: str, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Send one request; the reply body, or SchemaSyncError (data.definite says if it
        certainly did not happen)."""
        limit = self.timeout if timeout is None else timeout
        async with self._lock:
            conn = await self._ensure_connected()
            try:
                async with within(limit):
                    reply = await conn.call(type, body, 0)
            except TimeoutError:
                self._drop_connection()
                raise SchemaSyncError(
                    errors.TIMEOUT,
                    f"{type}: no reply within {limit:.1f}s",
                    True,
                    {"definite": False},
                ) from None
            except (OSError, FrameError, asyncio.IncompleteReadError, ConnectionError) as e:
                self._drop_connection()
                raise SchemaSyncError(
                    errors.UNAVAILABLE,
                    f"{type}: connection to {self.node} lost: {e}",
                    True,
                    {"definite": False},
                ) from None
            except asyncio.CancelledError:
                # A reply may be half read: this connection cannot be trusted any more.
                self._drop_connection()
                raise
        hlc_in = reply.get("hlc")
        if isinstance(hlc_in, int):
            self.last_reply_hlc = hlc_in
        if reply.get("ok"):
            result = reply.get("body")
            return result if isinstance(result, dict) else {}
        raise SchemaSyncError.from_wire(reply.get("error"))

    async def ddl(self, stmt: str) -> dict[str, Any]:
        return await self.request("ddl", {"stmt": stmt})

    async def probe(self, table: str | None = None, ts: int | None = None) -> dict[str, Any]:
        return await self.request("probe", {"table": table, "ts": ts})

    async def status(self) -> dict[str, Any]:
        return await self.request("admin.status", {})

    async def catalog_log(self) -> list[dict[str, Any]]:
        reply = await self.request("admin.catalog_log", {})
        return list(reply.get("entries", []))

    async def inhibit_apply(self, hold: bool) -> dict[str, Any]:
        return await self.request("admin.inhibit_apply", {"hold": hold})

    async def set_delay(self, delay_duration_ms: int) -> dict[str, Any]:
        return await self.request("admin.set_delay", {"delay_duration_ms": delay_duration_ms})

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
