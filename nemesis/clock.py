"""Per-node clock offsets, measured through each node's admin API.

The fault surface moves a node's wall clock (libfaketime's offset file on hosts, the simulated
clock in sim), never its monotonic clock; this module decides the offsets, and measures each
node's wall clock and HLC against the controller's before and after.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from nemesis.context import NemesisContext, elapsed_ms, loop_time, statuses
from nemesis.fault import FaultPlan, choices, rounded

CLOCK_MODES = ("skew", "skew-edge", "skew-beyond", "bump", "strobe")
# what `clock` / `all` draws from unless `clock_modes` says otherwise: within CSmax, the only
# skew the design promises to tolerate (skew-beyond is run only when asked for by name)
DEFAULT_CLOCK_MODES = ("skew", "bump", "strobe")


def measured_offsets(views: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per node: its faked wall clock and its HLC physical part minus the controller's clock,
    in seconds, with the round trip that bounds the error."""
    out: dict[str, dict[str, float]] = {}
    for node, s in views.items():
        mid = float(s["controller_mid_ms"])
        entry = {"rtt_ms": round(float(s["rtt_ms"]), 2)}
        if "wall_ms" in s:
            entry["wall_offset_s"] = round((float(s["wall_ms"]) - mid) / 1000, 4)
        if "hlc_now" in s:
            entry["hlc_offset_s"] = round(((int(s["hlc_now"]) >> 16) - mid) / 1000, 4)
        out[node] = entry
    return out


async def measure(
    ctx: NemesisContext, nodes: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    return measured_offsets(await statuses(ctx, nodes))


async def start_clock(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Measure, set the offsets of skew / skew-beyond / bump (or start strobe's flips), measure."""
    before = await measure(ctx)
    started = loop_time()
    if params["mode"] == "strobe":
        node = params["node"]
        low, high = (float(x) for x in params["offsets"])
        offsets = {node: high}
        period, duration = float(params["period_s"]), float(params["duration_s"])
        errors = await ctx.surface.strobe_clock(node, low, high, period, duration)
    else:
        offsets = {n: float(s) for n, s in params["offsets"].items()}
        errors = await ctx.surface.set_clocks(offsets)
    applied_ms = elapsed_ms(started)
    out: dict[str, Any] = {
        "written": offsets,
        "before": before,
        "after": await measure(ctx),
        "applied_ms": applied_ms,
    }
    if errors:
        out["errors"] = errors
    return out


async def reset_clocks(ctx: NemesisContext, nodes: Sequence[str] | None = None) -> dict[str, Any]:
    """Every node back to offset +0 (a strobe stopped), measured before and after."""
    names = list(nodes) if nodes is not None else list(ctx.cluster.nodes)
    before = await measure(ctx, names)
    started = loop_time()
    flips, errors = await ctx.surface.reset_clocks(names)
    healed_ms = elapsed_ms(started)
    out: dict[str, Any] = {
        "written": dict.fromkeys(names, 0.0),
        **({"strobe_flips": flips} if flips else {}),
        "before": before,
        "after": await measure(ctx, names),
        "healed_ms": healed_ms,
    }
    if errors:
        out["errors"] = errors
    return out


def clock_params(
    mode: str, rng: random.Random, nodes: Sequence[str], max_skew_s: float, interval_s: float
) -> dict[str, Any]:
    """Offsets (seconds) per node for one clock fault.

    skew: every node within +-CSmax/2, so any two differ by at most CSmax (what the design
    tolerates); skew-edge: two seeded groups exactly CSmax apart (the edge of what it
    tolerates, where a missing round-up shows); skew-beyond: two groups 1.5-3 CSmax apart;
    bump: one node jumps within CSmax; strobe: one node flips between 0 and an offset within
    CSmax every period.
    """
    if mode == "skew":
        # whole milliseconds on each side, so that rounding never takes two nodes past CSmax
        # (with CSmax 5 ms, +-2.5 ms rounded is +-3 ms: 6 ms apart)
        half = _whole_ms(max_skew_s / 2)
        return {"mode": mode, "offsets": {n: rounded(rng.uniform(-half, half)) for n in nodes}}
    if mode == "skew-edge":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        # exactly CSmax apart when CSmax is whole milliseconds, odd ones too (5 ms: +3 and -2)
        edge = _whole_ms(max_skew_s)
        behind = _whole_ms(edge / 2)
        lead = rounded(edge - behind)
        back = -behind or 0.0  # no -0.0 in the schedule (CSmax 1 ms: +1 and 0)
        return {"mode": mode, "offsets": {n: lead if n in ahead else back for n in nodes}}
    if mode == "skew-beyond":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        gap = rng.uniform(1.5, 3.0) * max_skew_s
        offsets = {n: rounded(gap / 2 if n in ahead else -gap / 2) for n in nodes}
        return {"mode": mode, "offsets": offsets}
    if mode == "bump":
        node = rng.choice(list(nodes))
        jump = rng.uniform(0.2, 0.9) * max_skew_s * rng.choice((-1, 1))
        return {"mode": mode, "offsets": {node: rounded(jump)}}
    if mode == "strobe":
        node = rng.choice(list(nodes))
        delta = rounded(rng.uniform(0.3, 0.9) * max_skew_s * rng.choice((-1, 1)))
        period = rounded(rng.uniform(0.05, 0.2))
        return {
            "mode": mode,
            "node": node,
            "offsets": [0.0, delta],
            "period_s": period,
            "duration_s": rounded(interval_s),
        }
    raise ValueError(f"unknown clock mode {mode!r}")


def _whole_ms(seconds: float) -> float:
    """`seconds` down to a whole millisecond, the resolution offsets are kept to."""
    return math.floor(seconds * 1000 + 1e-9) / 1000


class ClockNemesis:
    """Per-node clock offsets: skew, skew-edge, skew-beyond, bump, strobe."""

    kind = "clock"
    start_action = "start-clock"
    stop_action = "stop-clock"
    in_all = True
    needs_root = False

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        modes = choices(plan.options, "clock_modes", CLOCK_MODES, DEFAULT_CLOCK_MODES)
        return clock_params(rng.choice(modes), rng, plan.nodes, plan.max_skew_s, plan.interval_s)

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_clock(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        return await reset_clocks(ctx)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"clock": await reset_clocks(ctx)}
