"""Runs a nemesis schedule against a cluster and heals everything at the end, recording each
action as a `process: "nemesis"`, `info` event with what it targeted and what was measured.

Each fault is recorded once its action completed (start: the fault is in force from then;
stop/heal: healed from then), with `fault` and `kind` pairing a start with its stop. What a
kind does is its Nemesis (`nemesis.registry`); this module only plays and records.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from contract.fault_surface import Undone
from nemesis.context import NemesisContext, NemesisRecorder, elapsed_ms, loop_time
from nemesis.registry import NEMESES, nemesis_of
from nemesis.schedule import NemesisStep

log = logging.getLogger("schemachaos.nemesis")

__all__ = ["NemesisContext", "apply_step", "heal_all", "run_schedule"]


async def _stop(ctx: NemesisContext, fault: int, kind: str) -> dict[str, Any]:
    started = ctx.state.active.pop(fault, {"kind": kind})
    return await nemesis_of(kind).stop(ctx, started)


async def apply_step(
    ctx: NemesisContext, step: NemesisStep, recorder: NemesisRecorder
) -> dict[str, Any]:
    """Do one step and record it; a failed action is recorded with `error`, never raised."""
    kind = step.params["kind"]
    fault = int(step.params["fault"])
    began = loop_time()
    value: dict[str, Any]
    try:
        nemesis = nemesis_of(kind)
        if step.action == nemesis.start_action:
            ctx.state.active[fault] = dict(step.params)
            value = await nemesis.start(ctx, dict(step.params))
            ctx.state.active[fault].update(value)
        elif step.action == nemesis.stop_action:
            value = await _stop(ctx, fault, kind)
        else:
            raise ValueError(f"action {step.action!r} does not belong to {kind!r}")
    except Exception as e:
        log.warning("nemesis %s failed: %s", step.action, e)
        value = {"error": f"{type(e).__name__}: {e}"}
    event = {**step.params, **value, "at_s": step.at_s, "elapsed_ms": elapsed_ms(began)}
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


async def heal_all(ctx: NemesisContext, recorder: NemesisRecorder) -> dict[str, Any]:
    """Undo every fault, the ones we know of and any a crash left behind, before final reads.

    Each fault still in force gets its matching stop event (`by: heal-all`); then the surface
    sweeps every cut and slowed link, of any fault, and every kind sweeps what is its own (in
    the registry's reverse order: nodes resumed and restarted, apply inhibitors released,
    clocks reset last), recorded as one `heal-all` event. A sweep that fails is recorded and
    the others still run.
    """
    for fault, started in sorted(ctx.state.active.items()):
        kind = started["kind"]
        began = loop_time()
        try:
            value = await _stop(ctx, fault, kind)
        except Exception as e:
            value = {"error": f"{type(e).__name__}: {e}"}
        recorder.nemesis(
            nemesis_of(kind).stop_action,
            {
                "fault": fault,
                "kind": kind,
                "by": "heal-all",
                **value,
                "elapsed_ms": elapsed_ms(began),
            },
        )
    began = loop_time()
    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        swept = await ctx.surface.sweep()
        out.update(
            _remaining("rules_remaining", swept.cuts) | _remaining("qdiscs_remaining", swept.slowed)
        )
        errors.update(swept.cuts.errors | swept.slowed.errors)
    except Exception as e:
        log.warning("heal-all of the network failed: %s", e)
        out["error"] = f"network: {type(e).__name__}: {e}"
    for kind, nemesis in reversed(NEMESES.items()):
        try:
            kind_swept = await nemesis.sweep(ctx)
        except Exception as e:
            log.warning("heal-all of %s failed: %s", kind, e)
            out.setdefault("error", f"{kind}: {type(e).__name__}: {e}")
            continue
        errors.update(kind_swept.pop("errors", None) or {})
        out.update(kind_swept)
    if errors:
        out["errors"] = errors
    out["elapsed_ms"] = elapsed_ms(began)
    recorder.nemesis("heal-all", out)
    return out


def _remaining(key: str, undone: Undone) -> dict[str, Any]:
    """`{key: remaining per node}`, or nothing from a surface that had nothing to undo."""
    return {key: undone.remaining} if undone.remaining else {}
