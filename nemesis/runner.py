"""Runs a nemesis schedule against a cluster and heals everything at the end, recording each
action as a `process: "nemesis"`, `info` event with what it targeted and what was measured.

Each fault is recorded once its action completed (start: the fault is in force from then;
stop/heal: healed from then), with `fault` and `kind` pairing a start with its stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from nemesis import clock, lagging, partition, process
from nemesis.context import NemesisContext, NemesisRecorder, run_on_each
from nemesis.schedule import START, STOP, NemesisStep

log = logging.getLogger("schemachaos.nemesis")

__all__ = ["NemesisContext", "apply_step", "heal_all", "run_schedule"]


async def _start(ctx: NemesisContext, step: NemesisStep) -> dict[str, Any]:
    kind = step.params["kind"]
    if kind == "clock":
        return await clock.start_clock(ctx, step.params)
    if kind == "partition":
        return await partition.start_partition(ctx, step.params)
    if kind == "lagging-learner":
        return await lagging.start_lagging(ctx, step.params)
    if kind == "kill":
        return await process.start_kill(ctx, step.params)
    if kind == "pause":
        return await process.start_pause(ctx, step.params)
    raise ValueError(f"unknown nemesis kind {kind!r}")


async def _stop(ctx: NemesisContext, fault: int, kind: str) -> dict[str, Any]:
    started = ctx.state.active.pop(fault, {"kind": kind})
    if kind == "clock":
        return await clock.reset_clocks(ctx)
    if kind == "partition":
        return await partition.heal_partition(ctx)
    if kind == "lagging-learner":
        return await lagging.stop_lagging(ctx, started)
    if kind == "kill":
        return await process.restart(ctx, started.get("nodes") or sorted(ctx.state.killed))
    if kind == "pause":
        return await process.resume(ctx, started.get("nodes") or sorted(ctx.state.paused))
    raise ValueError(f"unknown nemesis kind {kind!r}")


async def apply_step(
    ctx: NemesisContext, step: NemesisStep, recorder: NemesisRecorder
) -> dict[str, Any]:
    """Do one step and record it; a failed action is recorded with `error`, never raised."""
    kind = step.params["kind"]
    fault = int(step.params["fault"])
    began = time.monotonic()
    value: dict[str, Any]
    try:
        if step.action == START[kind]:
            ctx.state.active[fault] = dict(step.params)
            value = await _start(ctx, step)
            ctx.state.active[fault].update(value)
        elif step.action == STOP[kind]:
            value = await _stop(ctx, fault, kind)
        else:
            raise ValueError(f"action {step.action!r} does not belong to {kind!r}")
    except Exception as e:
        log.warning("nemesis %s failed: %s", step.action, e)
        value = {"error": f"{type(e).__name__}: {e}"}
    event = {
        **step.params,
        **value,
        "at_s": step.at_s,
        "elapsed_ms": round((time.monotonic() - began) * 1000, 1),
    }
    recorder.nemesis(step.action, event)
    return event


async def run_schedule(
    schedule: list[NemesisStep], ctx: NemesisContext, recorder: NemesisRecorder, stop: asyncio.Event
) -> None:
    """Each step at its time (from now), until the schedule ends or `stop` is set.

    Faults still in force when it returns are left to heal_all.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for step in schedule:
        delay = t0 + step.at_s - loop.time()
        if delay > 0 and not stop.is_set():
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
            except TimeoutError:
                pass
        if stop.is_set():
            return
        await apply_step(ctx, step, recorder)


async def _remove_network_faults(ctx: NemesisContext) -> dict[str, Any]:
    """All our iptables rules and qdiscs off every node, in one round trip per node; what
    remains of each (both 0 when healed)."""
    commands = {
        n: partition.remove_rules_command(None, ctx.host(n) if ctx.local else None)
        + f"; {lagging.unshape_command()}"
        for n in ctx.cluster.nodes
    }
    results = await run_on_each(ctx, commands)
    out: dict[str, Any] = {"rules_remaining": {}, "qdiscs_remaining": {}}
    for n, r in results.items():
        if isinstance(r, BaseException):
            out.setdefault("errors", {})[n] = f"{type(r).__name__}: {r}"
            continue
        lines = r.stdout.split()
        out["rules_remaining"][n] = int(lines[-2]) if len(lines) >= 2 else None
        out["qdiscs_remaining"][n] = int(lines[-1]) if lines else None
    return out


async def heal_all(ctx: NemesisContext, recorder: NemesisRecorder) -> dict[str, Any]:
    """Undo every fault, the ones we know of and any a crash left behind, before final reads.

    Each fault still in force gets its matching stop event (`by: heal-all`); then a sweep
    resumes every node, restarts the killed, removes all our iptables rules and qdiscs,
    releases apply inhibitors and resets every clock, recorded as one `heal-all` event.
    """
    for fault, started in sorted(ctx.state.active.items()):
        kind = started["kind"]
        began = time.monotonic()
        try:
            value = await _stop(ctx, fault, kind)
        except Exception as e:
            value = {"error": f"{type(e).__name__}: {e}"}
        recorder.nemesis(
            STOP[kind],
            {
                "fault": fault,
                "kind": kind,
                "by": "heal-all",
                **value,
                "elapsed_ms": round((time.monotonic() - began) * 1000, 1),
            },
        )
    began = time.monotonic()
    nodes = list(ctx.cluster.nodes)
    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        out["resumed"] = await process.resume(ctx, nodes)
        if ctx.state.killed:
            out["restarted"] = await process.restart(ctx, sorted(ctx.state.killed))
        # locally without root nothing could have added rules, and nothing can list them
        if not (ctx.local and os.geteuid() != 0):
            network = await _remove_network_faults(ctx)
            errors.update(network.pop("errors", {}))
            out.update(network)
        held = sorted(set(ctx.cluster.learners) | ctx.state.inhibited)
        if held and ctx.target.name == "schemasync":
            released = await lagging.set_inhibit(ctx, held, False)
            errors.update({f"inhibit {n}": why for n, why in released.items()})
        ctx.state.inhibited.clear()
        out["clock"] = await clock.reset_clocks(ctx)
    except Exception as e:
        log.warning("heal-all failed: %s", e)
        out["error"] = f"{type(e).__name__}: {e}"
    if errors:
        out["errors"] = errors
    out["elapsed_ms"] = round((time.monotonic() - began) * 1000, 1)
    recorder.nemesis("heal-all", out)
    return out
