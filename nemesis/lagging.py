"""Lagging learners: Meta Storage learners fall behind while the rest of the cluster is healthy.

Three ways, through the fault surface: `drop` cuts only the metastore traffic arriving at the
learner (a cut of every link into it on the metastore port), `tbf` lets the metastore traffic
to it through a tiny token bucket (a slowed link from each other node), `inhibit` holds the
learner's apply (Ignite's WatchListenerInhibitor). Applied index and safe time are recorded
before and after. A target that names modes in `own_lagging_modes` makes a node lag in those
modes itself, with `lag(node, mode)` / `unlag(node)`: PostgreSQL's clients and its WAL stream
share one port, so only the target can cut the stream alone (and it holds replay instead of an
admin API).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from contract.fault_surface import Failures, Link, Undone
from contract.target import ApplyInhibitControl, LaggingControl
from nemesis.context import NemesisContext, each_in_thread, elapsed_ms, loop_time, statuses
from nemesis.fault import FaultPlan, choices

LAGGING_TAG = "lagging-learner"
DEFAULT_RATE_KBIT = 1
LAGGING_MODES = ("drop", "tbf", "inhibit")


async def learner_views(ctx: NemesisContext, learners: Sequence[str]) -> dict[str, Any]:
    """Applied index and safe time of the learners, and the highest applied index of the voters."""
    views = await statuses(ctx)
    voters = [views[v]["applied_index"] for v in ctx.cluster.voters if v in views]
    return {
        "learners": {
            n: {"applied_index": views[n].get("applied_index"), "safe_ts": views[n].get("safe_ts")}
            for n in learners
            if n in views
        },
        "voters_applied_index": max(voters) if voters else None,
    }


def _own(ctx: NemesisContext) -> LaggingControl | None:
    """The target, when it makes nodes lag in some modes itself."""
    target = ctx.target
    return target if isinstance(target, LaggingControl) and target.own_lagging_modes else None


async def _lag(ctx: NemesisContext, learners: list[str], mode: str, rate_kbit: int) -> Failures:
    own = _own(ctx)
    if own is not None and mode in own.own_lagging_modes:
        return await each_in_thread(lambda n: own.lag(n, mode), learners)
    port = ctx.port("metastore_port")
    if mode == "drop":
        return await ctx.surface.cut([Link(dst=n, port=port) for n in learners], LAGGING_TAG)
    if mode == "tbf":
        senders = [n for n in ctx.cluster.nodes if n not in learners] or list(ctx.cluster.nodes)
        links = [Link(dst=n, src=m, port=port) for n in learners for m in senders if m != n]
        return await ctx.surface.slow(links, rate_kbit)
    if mode == "inhibit":
        ctx.state.inhibited.update(learners)
        return await ctx.surface.inhibit_apply(learners, True)
    raise ValueError(f"unknown lagging-learner mode {mode!r}")


async def start_lagging(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    learners = list(params["learners"])
    rate = int(params.get("rate_kbit", ctx.config.get("lagging_rate_kbit", DEFAULT_RATE_KBIT)))
    before = await learner_views(ctx, learners)
    started = loop_time()
    errors = await _lag(ctx, learners, params["mode"], rate)
    out: dict[str, Any] = {"before": before, "applied_ms": elapsed_ms(started)}
    if errors:
        out["errors"] = errors
    return out


async def _nothing() -> Failures:
    return {}


async def _nothing_undone() -> Undone:
    return Undone({}, {})


async def stop_lagging(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Undo the mode that was used (all of them when its start was lost). The shapers only
    for tbf: a shaper's device may be shared with another run (`host_net`)."""
    learners = list(params.get("learners") or ctx.cluster.learners)
    mode = params.get("mode")
    before = await learner_views(ctx, learners)
    started = loop_time()
    held = [n for n in learners if n in ctx.state.inhibited] if mode != "inhibit" else learners
    own = _own(ctx)
    if own is not None:  # the target undoes its own modes; it has no apply inhibitor to release
        held = []
    cut, slowed, released, unlagged = await asyncio.gather(
        ctx.surface.heal(LAGGING_TAG),
        ctx.surface.unslow() if mode in (None, "tbf") else _nothing_undone(),
        ctx.surface.inhibit_apply(held, False) if held else _nothing(),
        each_in_thread(own.unlag, learners) if own is not None else _nothing(),
    )
    ctx.state.inhibited.difference_update(held)
    errors = {**cut.errors, **slowed.errors, **released, **unlagged}
    out: dict[str, Any] = {
        "before": before,
        "healed_ms": elapsed_ms(started),
        "after": await learner_views(ctx, learners),
    }
    if errors:
        out["errors"] = errors
    return out


class LaggingLearnerNemesis:
    """Meta Storage learners fall behind: drop, tbf or inhibit (or the target's own way)."""

    kind = "lagging-learner"
    start_action = "start-lagging-learner"
    stop_action = "stop-lagging-learner"
    in_all = True
    needs_root = True

    def unusable(self, plan: FaultPlan) -> str | None:
        return None if plan.learners else "lagging-learner needs learners (--voters below --nodes)"

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        learners = list(plan.learners)
        count = rng.randint(1, len(learners))
        chosen = set(rng.sample(learners, count))
        mode = rng.choice(choices(plan.options, "lagging_modes", LAGGING_MODES, LAGGING_MODES))
        return {"mode": mode, "learners": [x for x in learners if x in chosen]}

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_lagging(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        return await stop_lagging(ctx, started)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Every learner's apply released, with any node still marked as held (the slowed
        and cut links are the surface's sweep). A target that cannot hold an apply has none
        to release."""
        out: dict[str, Any] = {"errors": {}}
        held = sorted(set(ctx.cluster.learners) | ctx.state.inhibited)
        if held and isinstance(ctx.target, ApplyInhibitControl):
            released = await ctx.surface.inhibit_apply(held, False)
            out["errors"].update({f"inhibit {n}": why for n, why in released.items()})
        ctx.state.inhibited.clear()
        return out
