"""What every nemesis acts through: the cluster's Remotes, the Target, and what is broken now.

Remote calls block (ssh, docker, subprocess), so they go through `harness.remote.in_thread`, one
thread per node, each with an explicit timeout; node observations go through the Target's
client with an `asyncio.timeout`, because a paused node accepts a connection and never answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.remote import CommandResult, in_thread
from harness.target import ClockControl, ClusterView, Target

REMOTE_TIMEOUT_S = 15.0
STATUS_TIMEOUT_S = 1.5
IPTABLES_COMMENT = "schemachaos"


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
    """The cluster and target a schedule acts on; config may name `faketime_files` per node
    (unless the target is a ClockControl; else `<node_dir>/faketime`), `lagging_rate_kbit`
    (default 1) and `delay_ms` (the configured DD the `delay` fault restores)."""

    cluster: ClusterView
    target: Target
    config: dict[str, Any] = field(default_factory=dict)
    state: NemesisState = field(default_factory=NemesisState)

    @property
    def local(self) -> bool:
        """On the local backend all nodes share the host's iptables and qdiscs."""
        return self.cluster.shared_host

    def host(self, node: str) -> str:
        return self.cluster.remotes[node].host

    def port(self, name: str) -> int:
        """A port the target set on the cluster (`client_port`, `metastore_port`, ...)."""
        if name not in self.cluster.ports:
            known = ", ".join(sorted(self.cluster.ports))
            raise ValueError(f"target {self.target.name} sets no {name} (ports: {known})")
        return int(self.cluster.ports[name])

    def faketime_file(self, node: str) -> str:
        if isinstance(self.target, ClockControl):
            return self.target.faketime_file(node)
        files = self.config.get("faketime_files") or {}
        if node in files:
            return str(files[node])
        return f"{self.cluster.node_dirs[node]}/faketime"


def loop_time() -> float:
    """The running loop's clock, never the host's: on a simulation's loop it is virtual time,
    so what a fault measures and waits for depends on the seed only (on asyncio's own loop it
    is loop_time())."""
    return asyncio.get_running_loop().time()


async def run_on(ctx: NemesisContext, node: str, cmd: str, check: bool = True) -> CommandResult:
    """One shell command as root on a node, off the event loop."""
    remote = ctx.cluster.remotes[node]
    return await in_thread(remote.run, cmd, REMOTE_TIMEOUT_S, check)


async def run_on_each(
    ctx: NemesisContext, commands: dict[str, str], check: bool = True
) -> dict[str, CommandResult | BaseException]:
    """Commands on several nodes at once; per node its result or the exception it raised."""
    nodes = list(commands)
    results = await asyncio.gather(
        *(run_on(ctx, n, commands[n], check) for n in nodes), return_exceptions=True
    )
    return dict(zip(nodes, results, strict=True))


async def each_in_thread(fn: Callable[[str], Any], nodes: Sequence[str]) -> dict[str, str]:
    """A blocking target call per node, in threads at once; the failures, with why."""
    results = await asyncio.gather(*(in_thread(fn, n) for n in nodes), return_exceptions=True)
    return {
        n: f"{type(r).__name__}: {r}"
        for n, r in zip(nodes, results, strict=True)
        if isinstance(r, BaseException)
    }


def failures(results: dict[str, CommandResult | BaseException]) -> dict[str, str]:
    """The nodes whose command raised, with why (for the history event)."""
    return {
        n: f"{type(r).__name__}: {r}" for n, r in results.items() if isinstance(r, BaseException)
    }


async def node_status(ctx: NemesisContext, node: str) -> dict[str, Any]:
    """admin.status of one node, measured against the controller's wall clock.

    Adds `controller_mid_ms` (the midpoint of the request on the controller's clock) and
    `rtt_ms`, so an offset can be read as `wall_ms - controller_mid_ms` within rtt/2.
    """
    async with asyncio.timeout(STATUS_TIMEOUT_S):
        client = await ctx.target.client(node)
        try:
            t0 = time.time()
            status = await client.status()
            t1 = time.time()
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


def leader_of(views: dict[str, dict[str, Any]]) -> str | None:
    """The Meta Storage leader most answering nodes name at the highest term any of them knows.

    While that term has no leader named, a voter that moved to it is in an election (pre-vote
    keeps a cut-off voter from raising its term alone), and learners still naming the old
    leader at the older term are stale: then only a node that answers as leader itself counts
    (a voter whose campaign failed stays at its newer term with no leader while the old
    leader keeps its quorum). None when there is neither.
    """
    if not views:
        return None
    top = max(int(s.get("term", 0)) for s in views.values())
    votes: dict[str, int] = {}
    for s in views.values():
        if int(s.get("term", 0)) == top and s.get("leader"):
            votes[str(s["leader"])] = votes.get(str(s["leader"]), 0) + 1
    if votes:
        return max(sorted(votes), key=lambda n: votes[n])
    leading = [(int(s.get("term", 0)), n) for n, s in views.items() if s.get("role") == "leader"]
    return max(leading)[1] if leading else None


async def metastore_leader(ctx: NemesisContext, timeout_s: float = 10.0) -> str | None:
    """The current leader, polling until one is named (None after timeout_s)."""
    deadline = loop_time() + timeout_s
    while True:
        leader = leader_of(await statuses(ctx))
        if leader is not None or loop_time() >= deadline:
            return leader
        await asyncio.sleep(0.1)
