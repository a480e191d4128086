"""The simulator's parts on their own: virtual time, the disk's crash, the network's cuts,
SIGSTOP and SIGKILL of one node, each shown both ways."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from schemasync.storage import WriteAheadLog
from schemasync.wire import PeerClient, serve_connection
from sim.disk import SimDisk
from sim.loop import NODE, Deadlock, SimLoop, run_simulation
from sim.network import CLIENT, Network


def test_virtual_time_jumps_instead_of_sleeping() -> None:
    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    began = time.perf_counter()
    virtual, _ = run_simulation(main())
    assert virtual == pytest.approx(3600.0)
    assert time.perf_counter() - began < 5


def test_a_wait_that_nothing_can_end_is_a_deadlock() -> None:
    async def stuck() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(Deadlock):
        run_simulation(stuck())

    async def fine() -> None:  # the same wait with a timer that ends it is no deadlock
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(5, fut.set_result, None)
        await fut

    run_simulation(fine())


def test_crash_keeps_fsynced_bytes_and_drops_the_rest() -> None:
    disk = SimDisk(random.Random(1))
    d = Path("/sim/n1")
    disk.mkdir(d)

    async def main() -> None:
        wal = WriteAheadLog(d / "x.wal", disk)
        wal.append({"k": 1})
        await wal.sync()
        wal.append({"k": 2})  # written to the OS, never synced

    run_simulation(main())
    records, _ = WriteAheadLog.read_records(d / "x.wal", disk)
    assert [r["k"] for r in records] == [1, 2]  # before the crash the OS has both
    lost = disk.crash(d)
    records, _ = WriteAheadLog.read_records(d / "x.wal", disk)
    assert [r["k"] for r in records] == [1]
    assert lost and next(iter(lost.values())) > 0


def test_replace_survives_a_crash_only_when_durable() -> None:
    disk = SimDisk(random.Random(1))
    d = Path("/sim/n1")
    disk.replace_file(d / "a", b"old", durable=True)
    disk.replace_file(d / "a", b"new", durable=False)
    disk.replace_file(d / "b", b"kept", durable=True)
    disk.crash(d)
    assert disk.read_bytes(d / "a") == b"old"
    assert disk.read_bytes(d / "b") == b"kept"


async def _echo(req_type: str, body: dict) -> dict:
    return {"echo": body.get("x"), "at": asyncio.get_running_loop().time()}


def _serve(net: Network, node: str, port: int) -> None:
    transport = net.transport_for(node)

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await serve_connection(r, w, _echo, lambda: 1, lambda ts: ts, "test")

    async def listen() -> None:
        await transport.listen(node, port, on_connect, limit=1 << 20)

    asyncio.get_running_loop().create_task(listen(), context=net.context_of(node))


def test_a_cut_holds_bytes_until_it_heals() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        net = Network(random.Random(7))
        _serve(net, "n2", 9)
        await asyncio.sleep(0)
        peers = PeerClient(
            {"n2": ("n2", 9)}, lambda: 1, lambda ts: ts, None, net.transport_for("n1")
        )
        reply = await peers.call("n2", "x", {"x": 1}, 1.0)
        assert reply["echo"] == 1
        fast = loop.time()
        net.set_cut({("n1", "n2", 0)})
        loop.call_later(5.0, net.set_cut, set())
        reply = await peers.call("n2", "x", {"x": 2}, 30.0)  # held for 5 s, then delivered
        assert reply["echo"] == 2
        return fast, reply["at"] - fast

    (first, held), _ = run_simulation(main())
    assert first < 0.05
    assert 5.0 <= held < 5.1


def test_connect_to_a_dead_port_is_refused() -> None:
    async def main() -> None:
        net = Network(random.Random(7))
        with pytest.raises(ConnectionRefusedError):
            await net.transport_for(CLIENT).connect("n3", 9, source=None, limit=1024)

    run_simulation(main())


def test_pause_holds_a_node_and_kill_ends_it() -> None:
    ticks: dict[str, list[float]] = {"n1": [], "n2": []}

    async def ticker(node: str) -> None:
        while True:
            ticks[node].append(asyncio.get_running_loop().time())
            await asyncio.sleep(1.0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        net = Network(random.Random(1))
        tasks = [loop.create_task(ticker(n), context=net.context_of(n)) for n in ticks]
        await asyncio.sleep(2.5)
        loop.pause("n1")
        await asyncio.sleep(3.0)
        loop.resume("n1")
        await asyncio.sleep(0.1)
        assert loop.kill_tasks("n2") == 1
        await asyncio.sleep(3.0)
        assert tasks[1].cancelled() and not tasks[0].done()

    run_simulation(main())
    assert ticks["n1"][:3] == [0.0, 1.0, 2.0]
    assert 3.0 not in ticks["n1"] and 5.5 in ticks["n1"]  # held while stopped, late after
    assert ticks["n2"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # ran freely, then never again
    assert NODE.get() is None
