"""Frames on every port: a 4-byte big-endian length, then a msgpack map; requests and replies.

A request is ``{id, type, hlc, body}``; a reply ``{id, ok: true, hlc, body}`` or
``{id, ok: false, hlc, error: {code, message, retriable, data}}``. Connections are multiplexed
by ``id`` on the serving side.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack

from schemasync import errors
from schemasync.deadline import within
from schemasync.errors import SchemaSyncError
from schemasync.transport import TCP, Transport

MAX_FRAME = 16 * 1024 * 1024
_PRUNE_IN_FLIGHT = 64  # finished answers a connection's set holds before they are dropped
_LEN = struct.Struct(">I")

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class FrameError(Exception):
    """A frame that cannot be a message: oversized, truncated or not a msgpack map."""


def encode_frame(msg: dict[str, Any]) -> bytes:
    payload = msgpack.packb(msg, use_bin_type=True)
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME}")
    return _LEN.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> dict[str, Any]:
    try:
        msg = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as e:
        raise FrameError(f"undecodable msgpack: {e}") from None
    if not isinstance(msg, dict):
        raise FrameError(f"frame is a {type(msg).__name__}, not a map")
    return msg


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None at a clean end of stream; FrameError on garbage."""
    try:
        header = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise FrameError("stream ended inside a frame header") from None
    (length,) = _LEN.unpack(header)
    if length > MAX_FRAME:
        raise FrameError(f"frame length {length} exceeds {MAX_FRAME}")
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("stream ended inside a frame") from None
    return decode_payload(payload)


def error_reply(req_id: Any, hlc_ts: int, err: SchemaSyncError) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "hlc": hlc_ts, "error": err.to_wire()}


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    clock_now: Callable[[], int],
    clock_update: Callable[[int], int],
    port_name: str,
) -> None:
    """Serve requests of one connection concurrently until it closes or sends garbage."""
    peer = writer.get_extra_info("peername")
    write_lock = asyncio.Lock()

    async def answer(msg: dict[str, Any]) -> None:
        req_id = msg.get("id")
        try:
            req_type = msg.get("type")
            body = msg.get("body", {})
            if not isinstance(req_type, str) or not isinstance(body, dict):
                raise errors.invalid_request("request needs a string type and a map body")
            hlc_in = msg.get("hlc", 0)
            if isinstance(hlc_in, int) and not isinstance(hlc_in, bool) and hlc_in > 0:
                clock_update(hlc_in)
            result = await handler(req_type, body)
            reply: dict[str, Any] = {"id": req_id, "ok": True, "hlc": clock_now(), "body": result}
        except SchemaSyncError as e:
            reply = error_reply(req_id, clock_now(), e)
        except Exception as e:
            log.exception("%s port: handler of %r failed", port_name, msg.get("type"))
            reply = error_reply(
                req_id, clock_now(), SchemaSyncError(errors.INTERNAL, f"{type(e).__name__}: {e}")
            )
        try:
            frame = encode_frame(reply)
        except Exception as e:
            frame = encode_frame(
                error_reply(req_id, clock_now(), SchemaSyncError(errors.INTERNAL, str(e)))
            )
        async with write_lock:
            try:
                writer.write(frame)
                await writer.drain()
            except (ConnectionError, OSError) as e:
                log.info("%s port: reply to %s not sent: %s", port_name, peer, e)

    # The requests in flight, as a set rather than a TaskGroup: a TaskGroup schedules a
    # callback as each of its tasks ends, one more event loop step for every request served
    # (answer() catches everything, so there is no failure for a group to propagate).
    in_flight: set[asyncio.Task[None]] = set()
    try:
        while True:
            try:
                msg = await read_frame(reader)
            except FrameError as e:
                log.warning("%s port: malformed frame from %s: %s; closing", port_name, peer, e)
                return
            except (ConnectionError, OSError) as e:
                log.info("%s port: connection from %s lost: %s", port_name, peer, e)
                return
            if msg is None:
                return
            if len(in_flight) >= _PRUNE_IN_FLIGHT:
                in_flight = {t for t in in_flight if not t.done()}
            in_flight.add(asyncio.create_task(answer(msg)))
    finally:
        await _finish(in_flight)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _finish(tasks: set[asyncio.Task[None]]) -> None:
    """Let the requests in flight answer before the connection closes; if the server itself
    is cancelled meanwhile, cancel them and wait for them to end."""
    live = [t for t in tasks if not t.done()]
    if not live:
        return
    try:
        await asyncio.wait(live)
    except asyncio.CancelledError:
        for t in live:
            t.cancel()
        await asyncio.wait(live)
        raise


class RpcConnection:
    """One outgoing connection used by one request at a time (callers take it from a pool)."""

    _ids = itertools.count(1)

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(
        cls, host: str, port: int, source: str | None = None, transport: Transport = TCP
    ) -> RpcConnection:
        reader, writer = await transport.connect(host, port, source=source, limit=MAX_FRAME + 8)
        return cls(reader, writer)

    async def call(self, req_type: str, body: dict[str, Any], hlc_ts: int) -> dict[str, Any]:
        """Send one request and read its reply; the raw reply map (ok or error)."""
        req_id = next(self._ids)
        self.writer.write(
            encode_frame({"id": req_id, "type": req_type, "hlc": hlc_ts, "body": body})
        )
        await self.writer.drain()
        while True:
            msg = await read_frame(self.reader)
            if msg is None:
                raise ConnectionError("connection closed before the reply")
            if msg.get("id") == req_id:
                return msg

    def stale(self) -> bool:
        """The peer closed it while idle (e.g. it restarted)."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class RpcPool:
    """Outgoing RPC to one address: a few reusable connections, closed on any failure."""

    def __init__(
        self, host: str, port: int, source: str | None = None, transport: Transport = TCP
    ) -> None:
        self.host = host
        self.port = port
        self.source = source
        self.transport = transport
        self._idle: list[RpcConnection] = []

    async def call(
        self,
        req_type: str,
        body: dict[str, Any],
        hlc_ts: int,
        timeout: float,
    ) -> dict[str, Any]:
        """The reply map; raises OSError/ConnectionError/TimeoutError/FrameError on failure."""
        conn = None
        while self._idle and conn is None:
            conn = self._idle.pop()
            if conn.stale():
                conn.close()
                conn = None
        try:
            async with within(timeout):
                if conn is None:
                    conn = await RpcConnection.open(
                        self.host, self.port, self.source, self.transport
                    )
                reply = await conn.call(req_type, body, hlc_ts)
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if len(self._idle) < 4:
            self._idle.append(conn)
        else:
            conn.close()
        return reply

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class PeerClient:
    """Calls to other nodes on one kind of port, by node name; errors become SchemaSyncError."""

    def __init__(
        self,
        addresses: dict[str, tuple[str, int]],
        clock_now: Callable[[], int],
        clock_update: Callable[[int], int],
        source: str | None = None,
        transport: Transport = TCP,
    ) -> None:
        self._addresses = addresses
        self._source = source
        self._transport = transport
        self._pools: dict[str, RpcPool] = {}
        self._now = clock_now
        self._update = clock_update

    def _pool(self, node: str) -> RpcPool:
        pool = self._pools.get(node)
        if pool is None:
            if node not in self._addresses:
                raise errors.invalid_request(f"unknown node {node!r}")
            host, port = self._addresses[node]
            pool = self._pools[node] = RpcPool(host, port, self._source, self._transport)
        return pool

    async def call(
        self, node: str, req_type: str, body: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """The reply body of ``req_type`` on ``node``; TIMEOUT, UNAVAILABLE or the remote error."""
        try:
            reply = await self._pool(node).call(req_type, body, self._now(), timeout)
        except TimeoutError:
            raise SchemaSyncError(
                errors.TIMEOUT, f"{req_type} to {node}: no reply in {timeout:.3f}s", True
            ) from None
        except (OSError, ConnectionError, FrameError, asyncio.IncompleteReadError) as e:
            raise errors.unavailable(f"{req_type} to {node}: {type(e).__name__}: {e}") from None
        hlc_in = reply.get("hlc", 0)
        if isinstance(hlc_in, int) and hlc_in > 0:
            self._update(hlc_in)
        if reply.get("ok"):
            body_out = reply.get("body")
            return body_out if isinstance(body_out, dict) else {}
        raise SchemaSyncError.from_wire(reply.get("error"))

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
