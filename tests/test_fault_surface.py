"""The fault surface, each implementation shown both ways: the simulator's cuts hold traffic
until their own heal (a tag heals only its cuts, a port cut only its port), its strobe flips a
clock on the loop until reset; and a fault that targets a leader on a target without
`Primaries` is recorded as not applicable, never as an error or a made-up leader."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from contract.fault_surface import Link
from harness.backends.host_surface import HostSurface
from harness.cluster_spec import Cluster
from nemesis import NemesisContext, NemesisStep
from nemesis.runner import apply_step
from schemasync.errors import TIMEOUT, UNAVAILABLE, SchemaSyncError
from schemasync.wire import PeerClient, serve_connection
from sim.cluster import SimCluster, SimWorld
from sim.loop import SimLoop, run_simulation
from sim.surface import SimSurface
from targets.galera.target import GaleraTarget
from targets.schemasync.config import check_settings
from workloads.history import HistoryRecorder, read_history

NODES = ["n1", "n2", "n3"]


async def _echo(req_type: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"echo": body.get("x")}


def _world() -> tuple[SimCluster, SimSurface]:
    """Three simulated machines (no node process on them) and their surface."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimLoop)
    cluster = SimCluster(SimWorld(1, loop), NODES, NODES, check_settings({}))
    return cluster, SimSurface(cluster)


async def _listen(cluster: SimCluster, node: str, port: int) -> None:
    net = cluster.world.network

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await serve_connection(r, w, _echo, lambda: 1, lambda ts: ts, "test")

    async def listen() -> None:
        await net.transport_for(node).listen(node, port, on_connect, limit=1 << 20)

    asyncio.get_running_loop().create_task(listen(), context=net.context_of(node))
    await asyncio.sleep(0)


async def _reaches(cluster: SimCluster, src: str, dst: str, port: int) -> bool:
    """Whether a call from src gets its answer from dst:port within 2 virtual seconds."""
    net = cluster.world.network
    peers = PeerClient({dst: (dst, port)}, lambda: 1, lambda ts: ts, None, net.transport_for(src))
    try:
        reply = await peers.call(dst, "x", {"x": 1}, 2.0)
    except SchemaSyncError as e:
        assert e.code in (TIMEOUT, UNAVAILABLE), e
        return False
    finally:
        peers.close()
    return bool(reply["echo"] == 1)


def test_sim_cuts_hold_traffic_until_their_own_heal() -> None:
    async def main() -> None:
        cluster, surface = _world()
        for port in (8, 9):
            await _listen(cluster, "n2", port)
        assert await _reaches(cluster, "n1", "n2", 9)
        assert await surface.cut([Link(dst="n2", src="n1")], "partition") == {}
        assert await surface.cut([Link(dst="n2", port=9)], "lagging-learner") == {}
        assert not await _reaches(cluster, "n1", "n2", 8)  # n1 -> n2 cut on every port
        assert not await _reaches(cluster, "n3", "n2", 9)  # anyone -> n2 cut on port 9
        assert await _reaches(cluster, "n3", "n2", 8)  # ... and on no other port
        healed = await surface.heal("partition")
        assert healed.remaining == {"n1": 0, "n2": 2, "n3": 0}  # n1, n3 -> n2 on port 9
        assert await _reaches(cluster, "n1", "n2", 8)
        assert not await _reaches(cluster, "n1", "n2", 9)  # the other tag's cut holds
        swept = await surface.sweep()
        assert swept.cuts.remaining == dict.fromkeys(NODES, 0)
        assert await _reaches(cluster, "n3", "n2", 9)

    run_simulation(main())


def test_sim_strobe_flips_a_clock_on_the_loop_until_reset() -> None:
    async def main() -> None:
        cluster, surface = _world()
        clocks, loop = cluster.world.clocks, asyncio.get_running_loop()
        base = clocks.now_us("n1") - clocks.now_us("n2")
        assert await surface.strobe_clock("n2", 0.0, 0.3, 0.1, 10.0) == {}
        seen = []
        for _ in range(6):  # between the flips at 0, 0.1, ... 0.6 s: high first, then low
            await asyncio.sleep(0.05 if not seen else 0.1)
            seen.append(clocks.now_us("n2") - clocks.now_us("n1") + base)
        assert seen == [300_000, 0] * 3
        await asyncio.sleep(0.1)
        flips, errors = await surface.reset_clocks(NODES)
        assert (flips, errors) == ({"n2": 7}, {})
        await asyncio.sleep(1.0)  # cancelled: the offset stays reset
        assert clocks.now_us("n2") == clocks.now_us("n1")
        assert cluster.world.clocks.controller_s() == clocks.now_us("n1") / 1e6
        assert loop.time() > 1.5

    run_simulation(main())


def test_a_leader_fault_without_primaries_is_recorded_as_not_applicable(tmp_path: Path) -> None:
    """Galera names no primary: the leader-targeting kill, pause and partition act on no node
    and say why, and their stops undo nothing."""
    cluster = Cluster(nodes=NODES, voters=NODES, learners=[], remotes={}, backend="docker")
    target = GaleraTarget()
    ctx = NemesisContext(cluster, target, HostSurface(cluster, target, "t-na-1"))
    faults = [
        ("kill", {"target": "metastore-leader", "nodes": None}),
        ("pause", {"target": "metastore-leader", "nodes": None}),
        ("partition", {"shape": "isolate-metastore-leader", "grudge": None}),
    ]
    history = tmp_path / "history.jsonl"

    async def go() -> None:
        with HistoryRecorder(history, columnar=False) as recorder:
            for fault, (kind, params) in enumerate(faults):
                start = "start-" + kind
                stop = "heal-partition" if kind == "partition" else "stop-" + kind
                value = {"fault": fault, "kind": kind}
                await apply_step(ctx, NemesisStep(0.0, start, {**value, **params}), recorder)
                await apply_step(ctx, NemesisStep(0.0, stop, value), recorder)

    asyncio.run(go())
    events = [e for e in read_history(history) if e["process"] == "nemesis"]
    assert len(events) == 6
    why = "target galera has no primary to target"
    for e in events:
        value = e["value"]
        assert value["not_applicable"] == why, e
        assert "error" not in value and "errors" not in value and "leader" not in value, e
    starts = {e["value"]["kind"]: e["value"] for e in events if e["f"].startswith("start-")}
    assert starts["kill"]["nodes"] == starts["pause"]["nodes"] == []
    assert starts["partition"]["grudge"] is None  # nothing was cut
    assert ctx.state.killed == ctx.state.paused == set()
    json.dumps(events)  # plain data, as the checker reads it
