"""The schemasync target on a simulated cluster: what `SchemaSyncTarget` does with processes,
signals and sockets, done on the `SimCluster` in this process (contract.target's protocol).

Provisioning (harness.backends.sim) gives the machines, a `SimWorld`; `setup` puts the nodes
on them with the settings `targets.schemasync.config` checks and completes, so a simulated node
runs with exactly the configuration a docker one would.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.target import ClientError, ClusterView, TargetClient, TargetSetupError
from harness.cluster_spec import Cluster
from sim.cluster import SimCluster, SimWorld
from targets.schemasync.client import SchemaSyncClient, client_error
from targets.schemasync.config import check_settings
from targets.schemasync.target import SchemaSyncTarget

CONNECT_TIMEOUT_S = 60.0  # virtual seconds: a client waits out a partition, as a real one does
ADMIN_TIMEOUT_S = 5.0


@dataclass
class SimClusterView(Cluster):
    """A provisioned simulated cluster: the Cluster every layer reads, and its world."""

    world: SimWorld | None = None


class SimSchemaSyncTarget:
    """schemasync nodes as `Node` objects on the simulated world; every action in process."""

    name = SchemaSyncTarget.name
    clock = SchemaSyncTarget.clock
    capabilities = SchemaSyncTarget.capabilities

    def __init__(self) -> None:
        self._sim: SimCluster | None = None

    @property
    def sim(self) -> SimCluster:
        if self._sim is None:
            raise TargetSetupError("simulated target used before setup()")
        return self._sim

    @staticmethod
    def check_settings(config: dict[str, Any]) -> dict[str, Any]:
        return check_settings(config)

    def setup(self, cluster: ClusterView, config: dict[str, Any]) -> None:
        world = getattr(cluster, "world", None)
        if not isinstance(world, SimWorld):
            raise TargetSetupError("the simulated schemasync target needs a simulated cluster")
        self._sim = SimCluster(world, cluster.nodes, cluster.voters, check_settings(config))

    def start(self, node: str) -> None:
        self.sim.start(node)

    def stop(self, node: str) -> None:
        self.sim.kill(node)

    def kill(self, node: str) -> None:
        self.sim.kill(node)

    def pause(self, node: str) -> None:
        self.sim.pause(node)

    def resume(self, node: str) -> None:
        self.sim.resume(node)

    def wait_ready(self, timeout: float) -> None:
        raise TargetSetupError("a simulated cluster is awaited on its loop (wait_ready_async)")

    async def wait_ready_async(self, timeout: float) -> None:
        try:
            await self.sim.wait_ready(timeout)
        except TimeoutError as e:
            raise TargetSetupError(str(e)) from e

    def collect_logs(self, node: str, dest: Path) -> None:
        """Nothing to collect: a simulated node writes no log of its own."""

    def software_version(self, node: str) -> str:
        return "in-process"

    async def client(self, node: str) -> TargetClient:
        try:
            raw = await self.sim.raw_client(node, CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise client_error(e, frozenset()) from e
        return SchemaSyncClient(node, raw)

    async def _admin(self, node: str, call: str, *args: Any) -> Any:
        async with asyncio.timeout(ADMIN_TIMEOUT_S * 2):
            client = await self.sim.raw_client(node, ADMIN_TIMEOUT_S)
            try:
                return await getattr(client, call)(*args)
            finally:
                await client.close()

    async def primaries(self, wait_s: float) -> list[str]:
        """The Meta Storage leader a running voter believes in at the highest term, read off
        the nodes' Raft state (polled in virtual time while none is named)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            leader = self.sim.leader()
            if leader is not None or loop.time() >= deadline:
                return [leader] if leader is not None else []
            await asyncio.sleep(0.1)

    async def inhibit_apply(self, node: str, hold: bool) -> dict[str, Any]:
        return dict(await self._admin(node, "inhibit_apply", hold) or {})

    async def set_delay(self, delay_duration_ms: int) -> None:
        for node in self.sim.nodes:
            await self._admin(node, "set_delay", int(delay_duration_ms))

    async def catalog_log(self) -> list[dict[str, Any]]:
        errors = []
        for node in self.sim.nodes:
            try:
                return list(await self._admin(node, "catalog_log"))
            except Exception as e:
                errors.append(f"{node}: {e}")
        raise ClientError(
            "UNAVAILABLE", "catalog log not readable from any node: " + "; ".join(errors)
        )

    def teardown(self) -> None:
        """Every node ends (the run is over); what they lose now is nobody's concern."""
        if self._sim is None:
            return
        kept = list(self._sim.crash_losses)
        for name in list(self._sim.running):
            self._sim.kill(name)
        self._sim.crash_losses = kept

    def run_stats(self) -> dict[str, Any]:
        """The simulator's own counts for sim.json."""
        if self._sim is None:
            return {}
        world = self._sim.world
        return {
            "messages": world.network.messages,
            "fsyncs": world.disk.fsyncs,
            "crash_losses": self._sim.crash_losses,
        }
