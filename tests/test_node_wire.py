"""Frames, error replies and peer calls over a real loopback socket (no node process)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from schemasync import errors
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock, make_ts, wall_ms
from schemasync.wire import FrameError, PeerClient, decode_payload, encode_frame, serve_connection

HOST = "127.0.2.90"


def test_frame_round_trip_and_garbage() -> None:
    msg = {"id": 1, "type": "probe", "hlc": 5, "body": {"ts": None, "b": b"\x00"}}
    frame = encode_frame(msg)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_payload(frame[4:]) == msg
    with pytest.raises(FrameError):
        decode_payload(b"\x93\x01\x02\x03")  # a list
    with pytest.raises(FrameError):
        decode_payload(b"\xc1")


async def _serve_and_call() -> dict[str, Any]:
    clock = HybridClock(100)
    slow = asyncio.Event()

    async def handler(req_type: str, body: dict[str, Any]) -> dict[str, Any]:
        if req_type == "echo":
            return {"echo": body}
        if req_type == "refuse":
            raise SchemaSyncError(errors.TABLE_NOT_FOUND, "no table t", False, {"table": "t"})
        if req_type == "slow":
            await slow.wait()
            return {}
        raise RuntimeError("boom")

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await serve_connection(r, w, handler, clock.now, clock.update, "test")

    server = await asyncio.start_server(on_connect, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    caller_clock = HybridClock(100)
    peers = PeerClient(
        {"a": (HOST, port), "gone": (HOST, 1)}, caller_clock.now, caller_clock.update
    )
    out: dict[str, Any] = {}
    async with server:
        out["ahead"] = clock.update(make_ts(wall_ms() + 50))  # the reply carries it
        out["echo"] = await peers.call("a", "echo", {"x": 1}, 2.0)
        out["caller_hlc"] = caller_clock.now()
        out["server_hlc"] = clock.now()
        for name, req, timeout in [
            ("refuse", "refuse", 2.0),
            ("boom", "boom", 2.0),
            ("slow", "slow", 0.2),
        ]:
            with pytest.raises(SchemaSyncError) as err:
                await peers.call("a", req, {}, timeout)
            out[name] = err.value
        with pytest.raises(SchemaSyncError) as err:
            await peers.call("gone", "echo", {}, 2.0)
        out["gone"] = err.value
        # Concurrent requests on the pool still each get their own reply.
        replies = await asyncio.gather(*(peers.call("a", "echo", {"i": i}, 2.0) for i in range(20)))
        out["many"] = [r["echo"]["i"] for r in replies]
        slow.set()
        peers.close()
    return out


def test_replies_errors_and_hlc_propagation() -> None:
    out = asyncio.run(_serve_and_call())
    assert out["echo"] == {"echo": {"x": 1}}
    assert out["caller_hlc"] > out["ahead"]  # updated from the server's reply
    refuse = out["refuse"]
    assert (refuse.code, refuse.retriable, refuse.data) == (
        "TABLE_NOT_FOUND",
        False,
        {"table": "t"},
    )
    assert out["boom"].code == "INTERNAL" and "boom" in out["boom"].message
    assert out["slow"].code == "TIMEOUT" and out["slow"].retriable
    assert out["gone"].code == "UNAVAILABLE" and out["gone"].retriable
    assert out["many"] == list(range(20))
