"""The schemasync cluster inside one simulation: real ``Node`` objects on injected seams.

Every node runs the unchanged node code with a ``Runtime`` whose clock, transport, disk and
random source belong to the simulated world. A kill is SIGKILL (tasks cancelled, connections
closed by the "kernel", unsynced bytes lost); a pause is SIGSTOP (the node's callbacks wait).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from schemasync.client import Client
from schemasync.config import NodeConfig, parse_config
from schemasync.node import Node
from schemasync.runtime import Runtime
from sim.clocks import Clocks
from sim.disk import SimDisk
from sim.loop import SimLoop
from sim.network import CLIENT, Network

CLIENT_PORT, METASTORE_PORT, PEER_PORT = 7001, 7002, 7003
DATA_ROOT = Path("/sim")


class SimWorld:
    """Everything nondeterminism could come from, drawn from one seeded ``random.Random``."""

    def __init__(self, seed: int, loop: SimLoop) -> None:
        self.rng = random.Random(f"sim:{seed}")
        self.loop = loop
        self.network = Network(random.Random(self.rng.getrandbits(64)))
        self.disk = SimDisk(random.Random(self.rng.getrandbits(64)))
        self.clocks = Clocks(loop)


class SimCluster:
    """Start, kill, pause and talk to the nodes of one simulated cluster."""

    def __init__(
        self,
        world: SimWorld,
        nodes: list[str],
        voters: list[str],
        config: dict[str, Any],
    ) -> None:
        self.world = world
        self.nodes = list(nodes)
        self.voters = list(voters)
        self.learners = [n for n in nodes if n not in voters]
        self.configs = {n: self._config(n, config) for n in nodes}
        self.running: dict[str, Node] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.killed: set[str] = set()
        self.paused: set[str] = set()
        self.crash_losses: list[dict[str, Any]] = []

    def _config(self, name: str, config: dict[str, Any]) -> NodeConfig:
        raw = {
            **config,  # the target's settings with its defaults (targets.schemasync.config)
            "name": name,
            "data_dir": str(DATA_ROOT / name),
            "voters": self.voters,
            "nodes": {
                n: {
                    "host": n,
                    "client_port": CLIENT_PORT,
                    "metastore_port": METASTORE_PORT,
                    "peer_port": PEER_PORT,
                }
                for n in self.nodes
            },
        }
        raw.pop("nodes_count", None)
        return parse_config(raw, f"<sim config of {name}>")

    # -- processes ---------------------------------------------------------------------------
    def start(self, name: str) -> None:
        world = self.world
        ctx = world.network.context_of(name)
        runtime = Runtime(
            wall_ms=world.clocks.wall_of(name),
            transport=world.network.transport_for(name),
            disk=world.disk,
            rng=random.Random(world.rng.getrandbits(64)),
        )
        world.disk.mkdir(self.configs[name].data_dir)
        node = ctx.run(Node, self.configs[name], runtime)
        stop = asyncio.Event()
        self.running[name] = node
        self._stops[name] = stop
        self._tasks[name] = world.loop.create_task(node.run(stop), context=ctx)
        self.killed.discard(name)

    def kill(self, name: str) -> dict[str, int]:
        """SIGKILL: the process is gone at once, with every write it had not fsynced."""
        if name not in self.running:
            return {}
        self.world.loop.resume(name)  # a stopped process dies too
        self.paused.discard(name)
        self.world.network.kill(name)
        lost = self.world.disk.crash(self.configs[name].data_dir)
        self.world.loop.kill_tasks(name)
        del self.running[name]
        self.killed.add(name)
        if lost:
            self.crash_losses.append({"node": name, "lost_bytes": lost})
        return lost

    def pause(self, name: str) -> None:
        if name in self.running:
            self.world.loop.pause(name)
            self.paused.add(name)

    def resume(self, name: str) -> None:
        self.world.loop.resume(name)
        self.paused.discard(name)

    async def shutdown(self) -> None:
        """End every node (the run is over: what they lose now is nobody's concern)."""
        kept = list(self.crash_losses)
        for name in list(self.running):
            self.kill(name)
        self.crash_losses = kept
        await asyncio.sleep(0.1)

    # -- observation -------------------------------------------------------------------------
    def leader(self) -> str | None:
        """The Meta Storage leader a running voter believes in with the highest term."""
        best: tuple[int, str] | None = None
        for name in self.voters:
            node = self.running.get(name)
            if node is None or name in self.paused:
                continue
            raft = node.metastore.raft
            if raft.leader is not None and (best is None or raft.term > best[0]):
                best = (raft.term, raft.leader)
        return best[1] if best else None

    async def wait_ready(self, timeout_s: float) -> None:
        """Until every node knows a leader and applied what it committed (virtual time)."""
        loop = self.world.loop
        deadline = loop.time() + timeout_s
        while True:
            rafts = [self.running[n].metastore.raft for n in self.nodes if n in self.running]
            leaders = {r.leader for r in rafts}
            if len(rafts) == len(self.nodes) and len(leaders) == 1 and None not in leaders:
                leader = self.running[str(next(iter(leaders)))].metastore.raft
                if all(r.applied_index >= max(1, leader.commit_index - 1) for r in rafts):
                    return
            if loop.time() >= deadline:
                raise TimeoutError(f"simulated cluster not ready after {timeout_s:.0f} s")
            await asyncio.sleep(0.05)

    def transport(self) -> Any:
        return self.world.network.transport_for(CLIENT)

    async def raw_client(self, node: str, timeout_s: float) -> Client:
        return await Client.connect(
            [f"{node}:{CLIENT_PORT}"], timeout=timeout_s, transport=self.transport()
        )
