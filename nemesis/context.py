"""What every nemesis acts through: the backend's fault surface, the Target (to observe the
nodes, and for what only it can do), and what is broken now.

A fault acts on the cluster through `contract.fault_surface.FaultSurface` only (iptables and
signals on hosts, the simulated network and processes in sim), so each kind is written once.
Node observations go through the Target's client with an `asyncio.timeout`, because a paused
node accepts a connection and never answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from contract.fault_surface import Failures, FaultSurface, failures_of
from contract.target import ClusterView, Target
from harness.remote import in_thread

STATUS_TIMEOUT_S = 1.5


class NemesisRecorder(Protocol):
    """The part of `workloads.history.HistoryRecorder` a nemesis writes to."""

    def nemesis(self, f: str, value: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class NemesisState:
    """Faults in force, so that a stop step, and heal_all whatever happened, can undo them."""

    active: dict[int, dict[str, Any]] = field(default_factory=dict)  # fault id -> start value
    killed: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    inhibited: set[str] = field(default_factory=set)


@dataclass
class NemesisContext:
    """The cluster, target and fault surface a schedule acts on. config may name
    `lagging_rate_kbit` (default 1) and `delay_ms` (the configured DD the `delay` fault
    restores). `wall_s` is the controller's wall clock that node clocks are measured against
    (a simulation's is virtual, so what a clock fault records depends on the seed only)."""

    cluster: ClusterView
    target: Target
    surface: FaultSurface
    config: dict[str, Any] = field(default_factory=dict)
    state: NemesisState = field(default_factory=NemesisState)
    wall_s: Callable[[], float] = time.time

    def port(self, name: str) -> int:
        """A port the target set on the cluster (`client_port`, `metastore_port`, ...)."""
        if name not in self.cluster.ports:
            known = ", ".join(sorted(self.cluster.ports))
            raise ValueError(f"target {self.target.name} sets no {name} (ports: {known})")
        return int(self.cluster.ports[name])


def loop_time() -> float:
    """The running loop's clock, never the host's: on a simulation's loop it is virtual time,
    so what a fault measures and waits for depends on the seed only (on asyncio's own loop it
    is loop_time())."""
    return asyncio.get_running_loop().time()


def elapsed_ms(began: float) -> float:
    """Loop time since `began`, in ms to a tenth: how long an action took."""
    return round((loop_time() - began) * 1000, 1)


async def each_in_thread(fn: Callable[[str], Any], nodes: Sequence[str]) -> Failures:
    """A blocking target call per node, in threads at once; the failures, with why."""
    return await failures_of({n: in_thread(fn, n) for n in nodes})


async def node_status(ctx: NemesisContext, node: str) -> dict[str, Any]:
    """admin.status of one node, measured against the controller's wall clock.

    Adds `controller_mid_ms` (the midpoint of the request on the controller's clock) and
    `rtt_ms`, so an offset can be read as `wall_ms - controller_mid_ms` within rtt/2.
    """
    async with asyncio.timeout(STATUS_TIMEOUT_S):
        client = await ctx.target.client(node)
        try:
            t0 = ctx.wall_s()
            status = await client.status()
            t1 = ctx.wall_s()
        finally:
            await client.close()
    return {**status, "controller_mid_ms": (t0 + t1) * 500.0, "rtt_ms": (t1 - t0) * 1000.0}


async def statuses(
    ctx: NemesisContext, nodes: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Status of each node that answers in time (the silent ones are left out)."""
    names = list(nodes) if nodes is not None else list(ctx.cluster.nodes)
    answers = await asyncio.gather(*(node_status(ctx, n) for n in names), return_exceptions=True)
    return {n: a for n, a in zip(names, answers, strict=True) if isinstance(a, dict)}
