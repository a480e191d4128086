"""The fault surface of the simulated world: the network's cuts and delays, the world's clocks,
the cluster's processes (SIGKILL and SIGSTOP as the SimLoop has them) and the nodes' admin API
for apply and DD, all in process.

An operation takes effect at once, with no remote round trip, and nothing in it depends on the
host: a run repeats exactly from its seed. What differs from the hosts: a slowed link is a
fixed extra latency (the effect of the hosts' token bucket, not its mechanism), on the link's
every port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.fault_surface import Failures, Link, Swept, Undone, failures_of
from schemasync.client import Client
from sim.cluster import SimCluster

TBF_DELAY_S = 0.25  # every byte on a slowed link waits this long
ADMIN_TIMEOUT_S = 5.0

Cut = tuple[str, str, int]  # (from, to, port): the network's rule (port 0: any)


@dataclass
class _Strobe:
    """A clock strobe in force: the task flipping the offset, and how many flips it made."""

    flips: int = 1  # the first flip is made before the task starts
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class SimSurface:
    """Faults on one simulated cluster. It owns the strobe tasks it starts: each is cancelled
    by `reset_clocks` (a clock fault's stop, heal-all's clock sweep)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.net = cluster.world.network
        self.clocks = cluster.world.clocks
        self._cuts: dict[str, set[Cut]] = {}  # tag -> the cuts it made
        self._strobes: dict[str, _Strobe] = {}

    # -- links -------------------------------------------------------------------------------
    def _senders(self, link: Link) -> list[str]:
        return (
            [link.src] if link.src is not None else [m for m in self.cluster.nodes if m != link.dst]
        )

    def _apply_cuts(self) -> None:
        self.net.set_cut(set().union(*self._cuts.values()))

    def _cuts_remaining(self) -> Undone:
        into = [dst for _, dst, _ in self.net.cut]
        return Undone({n: into.count(n) for n in self.cluster.nodes}, {})

    async def cut(self, links: Sequence[Link], tag: str) -> Failures:
        cuts = self._cuts.setdefault(tag, set())
        for link in links:
            cuts.update((src, link.dst, link.port or 0) for src in self._senders(link))
        self._apply_cuts()
        return {}

    async def heal(self, tag: str) -> Undone:
        self._cuts.pop(tag, None)
        self._apply_cuts()
        return self._cuts_remaining()

    async def slow(self, links: Sequence[Link], rate_kbit: int) -> Failures:
        for link in links:
            for src in self._senders(link):
                self.net.set_delay(src, link.dst, TBF_DELAY_S)
        return {}

    async def unslow(self) -> Undone:
        for src, dst in list(self.net.extra_delay_s):
            self.net.set_delay(src, dst, 0)
        return Undone(dict.fromkeys(self.cluster.nodes, 0), {})

    async def sweep(self) -> Swept:
        self._cuts.clear()
        self._apply_cuts()
        return Swept(self._cuts_remaining(), await self.unslow())

    # -- clocks ------------------------------------------------------------------------------
    async def set_clocks(self, offsets: Mapping[str, float]) -> Failures:
        for node, seconds in offsets.items():
            self.clocks.set_offset(node, seconds)
        return {}

    async def strobe_clock(
        self, node: str, low: float, high: float, period_s: float, duration_s: float
    ) -> Failures:
        """As the hosts' node-side loop does: high, a period, low, a period, again while the
        duration lasts; the first flip now."""
        self._stop_strobe(node)
        self.clocks.set_offset(node, high)
        strobe = _Strobe()
        loop = asyncio.get_running_loop()
        end = loop.time() + duration_s
        strobe.task = loop.create_task(self._flip(node, low, high, period_s, end, strobe))
        self._strobes[node] = strobe
        return {}

    async def _flip(
        self, node: str, low: float, high: float, period_s: float, end: float, strobe: _Strobe
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period_s)
            self.clocks.set_offset(node, low)
            strobe.flips += 1
            await asyncio.sleep(period_s)
            if loop.time() >= end:
                return
            self.clocks.set_offset(node, high)
            strobe.flips += 1

    def _stop_strobe(self, node: str) -> int | None:
        strobe = self._strobes.pop(node, None)
        if strobe is None:
            return None
        if strobe.task is not None:
            strobe.task.cancel()
        return strobe.flips

    async def reset_clocks(self, nodes: Sequence[str]) -> tuple[dict[str, int], Failures]:
        flips: dict[str, int] = {}
        for node in nodes:
            stopped = self._stop_strobe(node)
            if stopped is not None:
                flips[node] = stopped
            self.clocks.set_offset(node, 0.0)
        return flips, {}

    # -- processes and the nodes' admin API --------------------------------------------------
    async def kill(self, nodes: Sequence[str]) -> Failures:
        for node in nodes:
            self.cluster.kill(node)
        return {}

    async def start(self, nodes: Sequence[str]) -> Failures:
        """Only nodes that are down: a second incarnation of a running node would be two."""
        for node in nodes:
            if node not in self.cluster.running:
                self.cluster.start(node)
        return {}

    async def pause(self, nodes: Sequence[str]) -> Failures:
        for node in nodes:
            self.cluster.pause(node)
        return {}

    async def resume(self, nodes: Sequence[str]) -> Failures:
        for node in nodes:
            self.cluster.resume(node)
        return {}

    async def _admin(self, node: str, call: Callable[[Client], Awaitable[Any]]) -> None:
        async with asyncio.timeout(ADMIN_TIMEOUT_S * 2):
            client = await self.cluster.raw_client(node, ADMIN_TIMEOUT_S)
            try:
                await call(client)
            finally:
                await client.close()

    async def inhibit_apply(self, nodes: Sequence[str], hold: bool) -> Failures:
        return await failures_of(
            {n: self._admin(n, lambda c: c.inhibit_apply(hold)) for n in nodes}
        )

    async def set_delay(self, delays_ms: Mapping[str, int]) -> Failures:
        def setter(ms: int) -> Callable[[Client], Awaitable[Any]]:
            return lambda client: client.set_delay(ms)

        return await failures_of(
            {n: self._admin(n, setter(int(ms))) for n, ms in delays_ms.items()}
        )
