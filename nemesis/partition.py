"""Network partitions with iptables: each node drops what arrives from the other side.

A grudge maps each node to the nodes whose packets it drops (Jepsen's term). Every rule we add
carries `-m comment --comment schemachaos` plus a tag naming the fault, so heal removes exactly
our rules and nothing else. On the local backend all nodes share the host's iptables, so the
rules match the loopback source *and* destination addresses on `lo`.
"""

from __future__ import annotations

import os
import random
import shlex
from collections.abc import Sequence
from typing import Any

from nemesis.context import (
    IPTABLES_COMMENT,
    NemesisContext,
    failures,
    loop_time,
    metastore_leader,
    run_on_each,
)
from nemesis.fault import FaultPlan, choices

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


def comment_args(tag: str) -> str:
    return f"-m comment --comment {IPTABLES_COMMENT} -m comment --comment {tag}"


def drop_from_command(
    host: str, sources: Sequence[str], tag: str, local: bool, match: str = ""
) -> str:
    """iptables command that drops inbound packets from `sources` to this node.

    `match` adds protocol matches (the lagging-learner nemesis passes its port match).
    On the local backend the rule also names the destination and `lo`.
    """
    if not sources:
        return "true"
    where = f"-i lo -d {shlex.quote(host)} " if local else ""
    src = ",".join(shlex.quote(s) for s in sources)
    extra = f"{match} " if match else ""
    return f"iptables -w -A INPUT {where}-s {src} {extra}{comment_args(tag)} -j DROP"


def remove_rules_command(tag: str | None, host: str | None) -> str:
    """Delete our INPUT rules (only those with `tag`, only those naming destination `host` if
    given), then print how many of ours remain on this node."""
    filters = [f"grep -F -- '--comment {IPTABLES_COMMENT}'"]
    if tag is not None:
        filters.append(f"grep -F -- '--comment {tag}'")
    if host is not None:
        filters.append(f"grep -F -- '-d {host}/32'")
    pipeline = " | ".join(["iptables -w -S INPUT", *filters])
    return (
        f"{pipeline} | sed 's/^-A /-D /' | while read -r rule; do iptables -w $rule; done; "
        f"iptables -w -S INPUT | grep -cF -- '--comment {IPTABLES_COMMENT}' || true"
    )


def list_rules_command() -> str:
    """Our rules on a node, as `iptables -S` prints them."""
    return f"iptables -w -S | grep -F -- '--comment {IPTABLES_COMMENT}' || true"


def hosts_of(ctx: NemesisContext, names: Sequence[str]) -> list[str]:
    return [ctx.host(n) for n in names]


async def start_partition(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Install the grudge (resolving the leader for isolate-metastore-leader) on every node."""
    started = loop_time()
    g: Grudge | None = params.get("grudge")
    out: dict[str, Any] = {}
    if g is None:
        leader = await metastore_leader(ctx)
        out["leader"] = leader
        g = grudge(params["shape"], ctx.cluster.nodes, random.Random(0), leader=leader)
    commands = {
        n: drop_from_command(ctx.host(n), hosts_of(ctx, g.get(n, [])), PARTITION_TAG, ctx.local)
        for n in ctx.cluster.nodes
        if g.get(n)
    }
    results = await run_on_each(ctx, commands)
    out.update({"grudge": g, "applied_ms": round((loop_time() - started) * 1000, 1)})
    errors = failures(results)
    if errors:
        out["errors"] = errors
    return out


async def remove_rules(ctx: NemesisContext, tag: str | None) -> dict[str, Any]:
    """Remove our rules (of one fault tag, or all) on every node; report what remains."""
    started = loop_time()
    commands = {
        n: remove_rules_command(tag, ctx.host(n) if ctx.local else None) for n in ctx.cluster.nodes
    }
    results = await run_on_each(ctx, commands)
    remaining = {
        n: int(r.stdout.strip().splitlines()[-1] or 0)
        for n, r in results.items()
        if not isinstance(r, BaseException) and r.stdout.strip()
    }
    out: dict[str, Any] = {
        "rules_remaining": remaining,
        "healed_ms": round((loop_time() - started) * 1000, 1),
    }
    errors = failures(results)
    if errors:
        out["errors"] = errors
    return out


async def heal_partition(ctx: NemesisContext) -> dict[str, Any]:
    return await remove_rules(ctx, PARTITION_TAG)


class PartitionNemesis:
    """A grudge of iptables drops in one of SHAPES; the stop step heals it."""

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
        return await heal_partition(ctx)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Every rule we added, of any fault; skipped locally without root, where nothing
        could have added one and nothing can list them."""
        if ctx.local and os.geteuid() != 0:
            return {}
        healed = await remove_rules(ctx, None)
        return {"rules_remaining": healed["rules_remaining"], "errors": healed.get("errors", {})}
