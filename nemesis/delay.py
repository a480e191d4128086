"""The `delay` nemesis: changes the delay duration DD of live nodes through `admin.set_delay`.

DD is fixed in each catalog entry by design; only with the `mutable-delay` toggle (IGNITE-20498)
does a node read it from its live config, which is what this fault changes. It plays the
`delay` steps of a schedule beside the other kinds (whose steps go to `nemesis.runner`), each
recorded as a `start-delay` / `stop-delay` nemesis event with the DD each node took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from nemesis.context import STATUS_TIMEOUT_S, NemesisContext, NemesisRecorder
from nemesis.runner import apply_step
from nemesis.schedule import START, STOP, NemesisStep

log = logging.getLogger("schemachaos.nemesis")

KIND = "delay"


async def set_delay(ctx: NemesisContext, node: str, delay_ms: int) -> None:
    """One node's live DD, through the target client's `set_delay` (admin.set_delay)."""
    async with asyncio.timeout(STATUS_TIMEOUT_S * 2):
        client = await ctx.target.client(node)
        try:
            setter = getattr(client, "set_delay", None)
            if setter is None:
                raise RuntimeError(f"target {ctx.target.name} cannot change its delay duration")
            await setter(delay_ms)
        finally:
            await client.close()


async def set_delays(ctx: NemesisContext, delays_ms: Mapping[str, int]) -> dict[str, Any]:
    """Every node's DD at once; what each took, and why the others did not."""
    nodes = list(delays_ms)
    results = await asyncio.gather(
        *(set_delay(ctx, n, int(delays_ms[n])) for n in nodes), return_exceptions=True
    )
    out: dict[str, Any] = {"delays_ms": {}}
    for node, result in zip(nodes, results, strict=True):
        if isinstance(result, BaseException):
            out.setdefault("errors", {})[node] = f"{type(result).__name__}: {result}"
        else:
            out["delays_ms"][node] = int(delays_ms[node])
    return out


class DelayNemesis:
    """Plays a whole schedule in time order: `delay` steps here, every other step through
    `nemesis.runner.apply_step`; remembers the DD change in force so `heal` can undo it."""

    def __init__(self, ctx: NemesisContext, configured_ms: int) -> None:
        self.ctx = ctx
        self.configured_ms = configured_ms
        self.active: dict[int, dict[str, Any]] = {}

    async def apply(self, step: NemesisStep, recorder: NemesisRecorder) -> dict[str, Any]:
        if step.params.get("kind") != KIND:
            return await apply_step(self.ctx, step, recorder)
        fault = int(step.params["fault"])
        began = time.monotonic()
        try:
            if step.action == START[KIND]:
                self.active[fault] = dict(step.params)
                value = await set_delays(self.ctx, step.params["delays_ms"])
            elif step.action == STOP[KIND]:
                started = self.active.pop(fault, {})
                restore = int(started.get("restore_ms", self.configured_ms))
                value = await set_delays(self.ctx, {n: restore for n in self.ctx.cluster.nodes})
            else:
                raise ValueError(f"action {step.action!r} does not belong to {KIND!r}")
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

    async def play(
        self, schedule: list[NemesisStep], recorder: NemesisRecorder, stop: asyncio.Event
    ) -> None:
        """Each step at its time (from now) until the schedule ends or `stop` is set (the
        same contract as `nemesis.runner.run_schedule`)."""
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
            await self.apply(step, recorder)

    async def heal(self, recorder: NemesisRecorder) -> None:
        """Restore the configured DD on every node for each delay fault still in force."""
        for fault, started in sorted(self.active.items()):
            began = time.monotonic()
            restore = int(started.get("restore_ms", self.configured_ms))
            value = await set_delays(self.ctx, {n: restore for n in self.ctx.cluster.nodes})
            recorder.nemesis(
                STOP[KIND],
                {
                    "fault": fault,
                    "kind": KIND,
                    "by": "heal-all",
                    **value,
                    "elapsed_ms": round((time.monotonic() - began) * 1000, 1),
                },
            )
        self.active.clear()
