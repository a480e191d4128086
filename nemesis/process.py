"""Process faults through the fault surface: kill (SIGKILL, restart at the stop step) and pause
(SIGSTOP, SIGCONT at the stop step), on one, a minority, a majority, the leader (the target's
primary), the learners, or all nodes."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from nemesis.context import NemesisContext, elapsed_ms, loop_time, statuses
from nemesis.fault import FaultPlan, choices
from nemesis.leader import current_leader

RESTART_WAIT_S = 10.0
PROCESS_TARGETS = ("one", "minority", "majority", "metastore-leader", "learners", "all")


async def resolve_targets(
    ctx: NemesisContext, params: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """The nodes a process fault hits; `metastore-leader` is looked up now (none, and not
    applicable, on a target without a primary)."""
    if params.get("nodes") is not None:
        return list(params["nodes"]), {}
    leader = await current_leader(ctx)
    return ([leader.node] if leader.node else []), leader.recorded()


async def start_kill(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    nodes, extra = await resolve_targets(ctx, params)
    started = loop_time()
    ctx.state.killed.update(nodes)
    errors = await ctx.surface.kill(nodes)
    out: dict[str, Any] = {**extra, "nodes": nodes, "applied_ms": elapsed_ms(started)}
    if errors:
        out["errors"] = errors
    return out


async def restart(ctx: NemesisContext, nodes: Sequence[str]) -> dict[str, Any]:
    """Start killed nodes again and wait (bounded) until each answers its admin API.

    Before starting, records the leader the survivors elected meanwhile (`leader_before`, on
    a target with a primary); `started_ms` is the restart itself, `healed_ms` until every node
    answers again.
    """
    before = await current_leader(ctx, wait_s=0)
    started = loop_time()
    errors = await ctx.surface.start(nodes)
    started_ms = elapsed_ms(started)
    ctx.state.killed.difference_update(nodes)
    answered: dict[str, float] = {}
    deadline = started + RESTART_WAIT_S
    pending = [n for n in nodes if n not in errors]
    while pending and loop_time() < deadline:
        views = await statuses(ctx, pending)
        for n in views:
            answered[n] = elapsed_ms(started)
        pending = [n for n in pending if n not in views]
        if pending:
            await asyncio.sleep(0.1)
    out: dict[str, Any] = {
        "nodes": list(nodes),
        **({} if before.not_applicable else {"leader_before": before.node}),
        "started_ms": started_ms,
        "answered_ms": answered,
        "healed_ms": elapsed_ms(started),
    }
    if pending:
        out["not_answering"] = pending
    if errors:
        out["errors"] = errors
    return out


async def start_pause(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    nodes, extra = await resolve_targets(ctx, params)
    started = loop_time()
    ctx.state.paused.update(nodes)
    errors = await ctx.surface.pause(nodes)
    out: dict[str, Any] = {**extra, "nodes": nodes, "applied_ms": elapsed_ms(started)}
    if errors:
        out["errors"] = errors
    return out


async def resume(ctx: NemesisContext, nodes: Sequence[str]) -> dict[str, Any]:
    """SIGCONT, then check each resumed node answers its admin API again."""
    started = loop_time()
    errors = await ctx.surface.resume(nodes)
    ctx.state.paused.difference_update(nodes)
    healed_ms = elapsed_ms(started)
    views = await statuses(ctx, nodes)
    out: dict[str, Any] = {
        "nodes": list(nodes),
        "healed_ms": healed_ms,
        "answering": sorted(views),
    }
    if errors:
        out["errors"] = errors
    return out


def _stopped(started: dict[str, Any], fallback: set[str]) -> list[str]:
    """The nodes a stop step undoes: those its start hit, or (a start lost) every node the
    state still holds."""
    nodes = started.get("nodes")
    return list(nodes) if nodes is not None else sorted(fallback)


def process_params(
    target: str, rng: random.Random, nodes: Sequence[str], learners: Sequence[str]
) -> dict[str, Any]:
    """Which nodes a kill or pause hits; `metastore-leader` is resolved when it runs."""
    n = len(nodes)
    chosen: list[str] | None
    if target == "one":
        chosen = [rng.choice(list(nodes))]
    elif target == "minority":
        chosen = rng.sample(list(nodes), max(1, (n - 1) // 2))
    elif target == "majority":
        chosen = rng.sample(list(nodes), n // 2 + 1)
    elif target == "learners":
        chosen = list(learners)
    elif target == "all":
        chosen = list(nodes)
    elif target == "metastore-leader":
        chosen = None
    else:
        raise ValueError(f"unknown process target {target!r}")
    ordered = None if chosen is None else [x for x in nodes if x in set(chosen)]
    return {"target": target, "nodes": ordered}


def _draw_targets(rng: random.Random, plan: FaultPlan) -> dict[str, Any]:
    usable = [t for t in PROCESS_TARGETS if t != "learners" or plan.learners]
    targets = choices(plan.options, "process_targets", usable, usable)
    return process_params(rng.choice(targets), rng, plan.nodes, plan.learners)


class KillNemesis:
    """SIGKILL the chosen nodes; the stop step restarts them."""

    kind = "kill"
    start_action = "start-kill"
    stop_action = "stop-kill"
    in_all = True
    needs_root = False

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        return _draw_targets(rng, plan)

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_kill(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        if "not_applicable" in started:
            return {"not_applicable": started["not_applicable"], "nodes": []}
        return await restart(ctx, _stopped(started, ctx.state.killed))

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        if not ctx.state.killed:
            return {}
        return {"restarted": await restart(ctx, sorted(ctx.state.killed))}


class PauseNemesis:
    """SIGSTOP the chosen nodes; the stop step sends SIGCONT."""

    kind = "pause"
    start_action = "start-pause"
    stop_action = "stop-pause"
    in_all = True
    needs_root = False

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        return _draw_targets(rng, plan)

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_pause(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        if "not_applicable" in started:
            return {"not_applicable": started["not_applicable"], "nodes": []}
        return await resume(ctx, _stopped(started, ctx.state.paused))

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Every node resumed: a SIGCONT to a running process does nothing."""
        return {"resumed": await resume(ctx, list(ctx.cluster.nodes))}
