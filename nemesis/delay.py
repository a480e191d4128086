"""The `delay` nemesis: changes the delay duration DD of live nodes through the fault surface
(`admin.set_delay` on schemasync's client, or in process in sim).

DD is fixed in each catalog entry by design; only with the `mutable-delay` toggle (IGNITE-20498)
does a node read it from its live config, which is what this fault changes. Each fault is a
`start-delay` / `stop-delay` nemesis event with the DD each node took; the stop restores the
configured DD.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from nemesis.context import NemesisContext
from nemesis.fault import FaultPlan, choices

DELAY_MODES = ("all", "split")
DEFAULT_DELAY_MS = 500


async def set_delays(ctx: NemesisContext, delays_ms: Mapping[str, int]) -> dict[str, Any]:
    """Every node's DD at once; what each took, and why the others did not."""
    errors = await ctx.surface.set_delay(delays_ms)
    out: dict[str, Any] = {
        "delays_ms": {n: int(ms) for n, ms in delays_ms.items() if n not in errors}
    }
    if errors:
        out["errors"] = errors
    return out


def delay_params(
    mode: str,
    rng: random.Random,
    nodes: Sequence[str],
    values_ms: Sequence[int],
    configured_ms: int,
) -> dict[str, Any]:
    """DD per node for one `delay` fault (admin.set_delay), and the value the stop restores.

    all: every node takes one value other than the configured DD; split: the nodes are cut in
    two seeded groups with different values, so they also disagree with each other.
    """
    others = [v for v in values_ms if v != configured_ms] or list(values_ms)
    if mode == "all":
        value = rng.choice(others)
        delays = {n: value for n in nodes}
    elif mode == "split":
        low = rng.choice(others)
        high = rng.choice([v for v in values_ms if v != low] or [configured_ms])
        group = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        delays = {n: (low if n in group else high) for n in nodes}
    else:
        raise ValueError(f"unknown delay mode {mode!r}")
    return {"mode": mode, "delays_ms": delays, "restore_ms": configured_ms}


class DelayNemesis:
    """DD changed at runtime; not part of `all` (it only means something with the
    `mutable-delay` toggle)."""

    kind = "delay"
    start_action = "start-delay"
    stop_action = "stop-delay"
    in_all = False
    needs_root = False

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        opts = plan.options
        configured = int(opts.get("delay_ms", DEFAULT_DELAY_MS))
        values = [int(v) for v in opts.get("delay_values_ms") or (configured, configured // 4)]
        if any(v < 1 for v in values):
            raise ValueError(f"nemesis option delay_values_ms: needs values >= 1, got {values}")
        modes = choices(opts, "delay_modes", DELAY_MODES, DELAY_MODES)
        mode = modes[nth % len(modes)]  # in turn: each mode shows up early
        return delay_params(mode, rng, plan.nodes, values, configured)

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await set_delays(ctx, params["delays_ms"])

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        configured = int(ctx.config.get("delay_ms", DEFAULT_DELAY_MS))
        restore = int(started.get("restore_ms", configured))
        return await set_delays(ctx, dict.fromkeys(ctx.cluster.nodes, restore))

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Nothing beyond the stop of each fault in force: a node restarted since reads the
        configured DD from its config again, and a target without the capability has none."""
        return {}
