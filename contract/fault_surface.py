"""The fault surface: what a fault can do to a cluster, as a few primitive operations.

Jepsen's faults act through the test's `Net` and the db's process controls, never on iptables
directly; ours act through this protocol. Each fault kind (`nemesis/`) is written once against
it; a backend supplies the implementation: the hosts' (iptables, tc, libfaketime files and
signals through the nodes' Remotes) or the simulator's (its network, clocks and processes, in
process). An operation answers the nodes where it failed, with why, and never raises for one
node's failure: a fault is recorded with its errors, whatever the place it ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Failures = dict[str, str]  # node -> why the operation failed there


async def failures_of(calls: Mapping[str, Awaitable[Any]]) -> Failures:
    """Each node's call, all at once; the nodes whose call raised, with why."""
    nodes = list(calls)
    results = await asyncio.gather(*(calls[n] for n in nodes), return_exceptions=True)
    return {
        n: f"{type(r).__name__}: {r}"
        for n, r in zip(nodes, results, strict=True)
        if isinstance(r, BaseException)
    }


@dataclass(frozen=True)
class Link:
    """The traffic that arrives at `dst` from `src` (None: from any node), on connections to
    or from `port` (None: any port). A link is one direction: a partition's grudge is a set
    of them, and a cut of the inbound direction alone stalls a TCP conversation both ways."""

    dst: str
    src: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class Undone:
    """What an undo left: per node, how many of ours remain there (None: it could not tell),
    and the nodes where the undo failed."""

    remaining: dict[str, int | None]
    errors: Failures


@dataclass(frozen=True)
class Swept:
    """What a sweep left: the cuts (of any fault) and the slowed links."""

    cuts: Undone
    slowed: Undone


class FaultSurface(Protocol):
    """The primitive operations the fault kinds need, no more.

    Cuts carry a tag (the fault kind that made them), so one kind's heal leaves another's cuts
    in force. Clock offsets are seconds added to a node's wall clock (its monotonic clock is
    never touched). Process and apply controls take several nodes and act on them at once.
    """

    async def cut(self, links: Sequence[Link], tag: str) -> Failures:
        """Drop the traffic of these links until `heal(tag)`."""
        ...

    async def heal(self, tag: str) -> Undone:
        """Every cut made with `tag` undone; how many cuts (of any tag) remain per node."""
        ...

    async def slow(self, links: Sequence[Link], rate_kbit: int) -> Failures:
        """Let the traffic of these links through a tiny token bucket of `rate_kbit`."""
        ...

    async def unslow(self) -> Undone:
        """Every slowed link back to full speed; how many shapers remain per node."""
        ...

    async def set_clocks(self, offsets: Mapping[str, float]) -> Failures:
        """Each node's wall clock set to the true time plus its offset (seconds)."""
        ...

    async def strobe_clock(
        self, node: str, low: float, high: float, period_s: float, duration_s: float
    ) -> Failures:
        """Flip a node's offset to high, then low, every period, for the duration (or until
        `reset_clocks`); the first flip (to high) is in force when this returns."""
        ...

    async def reset_clocks(self, nodes: Sequence[str]) -> tuple[dict[str, int], Failures]:
        """Stop any strobe on these nodes and set their offsets to 0; the flips each stopped
        strobe made."""
        ...

    async def kill(self, nodes: Sequence[str]) -> Failures:
        """SIGKILL: the nodes' processes gone at once, with whatever they had not synced."""
        ...

    async def start(self, nodes: Sequence[str]) -> Failures:
        """Start the nodes' processes again (after a kill)."""
        ...

    async def pause(self, nodes: Sequence[str]) -> Failures:
        """SIGSTOP: the nodes' processes hold, their connections open."""
        ...

    async def resume(self, nodes: Sequence[str]) -> Failures:
        """SIGCONT (harmless to a process that runs)."""
        ...

    async def inhibit_apply(self, nodes: Sequence[str], hold: bool) -> Failures:
        """Hold (or release) the nodes' apply of replicated state."""
        ...

    async def set_delay(self, delays_ms: Mapping[str, int]) -> Failures:
        """Each node's live delay duration DD, in ms."""
        ...

    async def sweep(self) -> Swept:
        """Every cut (of any tag) and every slowed link this surface may have left, known or
        not (a crash, a lost stop step), undone. Clocks, processes and held applies are swept
        by their fault kinds, which measure the nodes around it."""
        ...
