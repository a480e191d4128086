"""Network partitions: each node drops what arrives from the other side.

A grudge maps each node to the nodes whose packets it drops (Jepsen's term); it is cut through
the fault surface as one link per (sender, receiver), tagged `partition`, so the heal removes
this fault's cuts and no other's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from contract.fault_surface import Link
from nemesis.context import NemesisContext, elapsed_ms, loop_time
from nemesis.fault import FaultPlan, choices
from nemesis.leader import current_leader

SHAPES = ("halves", "random-halves", "one", "majorities-ring", "bridge", "isolate-metastore-leader")
PARTITION_TAG = "partition"

Grudge = dict[str, list[str]]


def grudge_from_components(nodes: Sequence[str], components: Sequence[Sequence[str]]) -> Grudge:
    """Each node drops everything from nodes outside its own component."""
    where = {n: i for i, comp in enumerate(components) for n in comp}
    return {n: [m for m in nodes if where[m] != where[n]] for n in nodes}


def grudge(
    shape: str, nodes: Sequence[str], rng: random.Random, leader: str | None = None
) -> Grudge:
    """The grudge of one partition shape (pure; random shapes draw from rng).

    halves: the first ceil(n/2) nodes against the rest (with voters listed first, the voter
    majority keeps a quorum and the learners are cut off); random-halves: the same after a
    shuffle; one / isolate-metastore-leader: one node alone; bridge: two halves and one node
    that sees both; majorities-ring: every node sees a majority, no two the same majority.
    """
    ns = list(nodes)
    n = len(ns)
    if shape in ("halves", "random-halves"):
        if shape == "random-halves":
            rng.shuffle(ns)
        cut = n - n // 2
        return grudge_from_components(nodes, [ns[:cut], ns[cut:]])
    if shape in ("one", "isolate-metastore-leader"):
        alone = leader if shape == "isolate-metastore-leader" else rng.choice(ns)
        if alone is None or alone not in ns:
            raise ValueError(f"{shape}: no node to isolate")
        return grudge_from_components(nodes, [[alone], [m for m in ns if m != alone]])
    if shape == "bridge":
        rng.shuffle(ns)
        half = n // 2
        left, bridge, right = ns[:half], ns[half], ns[half + 1 :]
        g: Grudge = {m: [] for m in nodes}
        for a in left:
            g[a] = [b for b in nodes if b in right]
        for b in right:
            g[b] = [a for a in nodes if a in left]
        g[bridge] = []
        return g
    if shape == "majorities-ring":
        rng.shuffle(ns)
        radius = -(-(n // 2) // 2)  # ceil: the window 2r+1 holds a majority
        pos = {m: i for i, m in enumerate(ns)}

        def far(a: str, b: str) -> bool:
            d = abs(pos[a] - pos[b])
            return min(d, n - d) > radius

        return {a: [b for b in nodes if far(a, b)] for a in nodes}
    raise ValueError(f"unknown partition shape {shape!r}")


def links_of(g: Grudge) -> list[Link]:
    """The links a grudge cuts: into each node, from each node it drops."""
    return [Link(dst=n, src=m) for n, drops in g.items() for m in drops]


async def start_partition(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Cut the grudge (resolving the leader for isolate-metastore-leader)."""
    started = loop_time()
    g: Grudge | None = params.get("grudge")
    out: dict[str, Any] = {}
    if g is None:
        leader = await current_leader(ctx)
        out.update(leader.recorded())
        if leader.not_applicable is not None:
            return out
        g = grudge(params["shape"], ctx.cluster.nodes, random.Random(0), leader=leader.node)
    errors = await ctx.surface.cut(links_of(g), PARTITION_TAG)
    out.update({"grudge": g, "applied_ms": elapsed_ms(started)})
    if errors:
        out["errors"] = errors
    return out


async def heal_partition(ctx: NemesisContext) -> dict[str, Any]:
    """This fault's cuts undone; how many cuts of ours remain on each node."""
    started = loop_time()
    healed = await ctx.surface.heal(PARTITION_TAG)
    out: dict[str, Any] = {"rules_remaining": healed.remaining, "healed_ms": elapsed_ms(started)}
    if healed.errors:
        out["errors"] = healed.errors
    return out


class PartitionNemesis:
    """A grudge in one of SHAPES; the stop step heals it."""

    kind = "partition"
    start_action = "start-partition"
    stop_action = "heal-partition"
    in_all = True
    needs_root = True

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        shape = rng.choice(choices(plan.options, "partition_shapes", SHAPES, SHAPES))
        g = None if shape == "isolate-metastore-leader" else grudge(shape, plan.nodes, rng)
        return {"shape": shape, "grudge": g}

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_partition(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        if "not_applicable" in started:
            return {"not_applicable": started["not_applicable"]}
        return await heal_partition(ctx)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Nothing of its own: every cut, of any fault, is the surface's sweep (heal_all)."""
        return {}
