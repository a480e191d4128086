"""Process faults through the Target: kill (SIGKILL, restart at the stop step) and pause
(SIGSTOP, SIGCONT at the stop step), on one, a minority, a majority, the Meta Storage leader,
the learners, or all nodes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from nemesis.context import (
    NemesisContext,
    each_in_thread,
    leader_of,
    metastore_leader,
    statuses,
)

RESTART_WAIT_S = 10.0


async def resolve_targets(
    ctx: NemesisContext, params: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """The nodes a process fault hits; `metastore-leader` is looked up now."""
    if params.get("nodes") is not None:
        return list(params["nodes"]), {}
    leader = await metastore_leader(ctx)
    return ([leader] if leader else []), {"leader": leader}


async def start_kill(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    nodes, extra = await resolve_targets(ctx, params)
    started = time.monotonic()
    ctx.state.killed.update(nodes)
    errors = await each_in_thread(ctx.target.kill, nodes)
    out: dict[str, Any] = {
        **extra,
        "nodes": nodes,
        "applied_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if errors:
        out["errors"] = errors
    return out


async def restart(ctx: NemesisContext, nodes: Sequence[str]) -> dict[str, Any]:
    """Start killed nodes again and wait (bounded) until each answers its admin API.

    Before starting, records the leader the survivors elected meanwhile (`leader_before`);
    `started_ms` is the restart itself, `healed_ms` until every node answers again.
    """
    survivors = await statuses(ctx, [n for n in ctx.cluster.nodes if n not in nodes])
    started = time.monotonic()
    errors = await each_in_thread(ctx.target.start, nodes)
    started_ms = round((time.monotonic() - started) * 1000, 1)
    ctx.state.killed.difference_update(nodes)
    answered: dict[str, float] = {}
    deadline = started + RESTART_WAIT_S
    pending = [n for n in nodes if n not in errors]
    while pending and time.monotonic() < deadline:
        views = await statuses(ctx, pending)
        for n in views:
            answered[n] = round((time.monotonic() - started) * 1000, 1)
        pending = [n for n in pending if n not in views]
        if pending:
            await asyncio.sleep(0.1)
    out: dict[str, Any] = {
        "nodes": list(nodes),
        "leader_before": leader_of(survivors),
        "started_ms": started_ms,
        "answered_ms": answered,
        "healed_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if pending:
        out["not_answering"] = pending
    if errors:
        out["errors"] = errors
    return out


async def start_pause(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    nodes, extra = await resolve_targets(ctx, params)
    started = time.monotonic()
    ctx.state.paused.update(nodes)
    errors = await each_in_thread(ctx.target.pause, nodes)
    out: dict[str, Any] = {
        **extra,
        "nodes": nodes,
        "applied_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if errors:
        out["errors"] = errors
    return out


async def resume(ctx: NemesisContext, nodes: Sequence[str]) -> dict[str, Any]:
    """SIGCONT, then check each resumed node answers its admin API again."""
    started = time.monotonic()
    errors = await each_in_thread(ctx.target.resume, nodes)
    ctx.state.paused.difference_update(nodes)
    healed_ms = round((time.monotonic() - started) * 1000, 1)
    views = await statuses(ctx, nodes)
    out: dict[str, Any] = {
        "nodes": list(nodes),
        "healed_ms": healed_ms,
        "answering": sorted(views),
    }
    if errors:
        out["errors"] = errors
    return out
