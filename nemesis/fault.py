"""The Nemesis protocol: what one kind of fault is, for the schedule and for the runner.

A fault kind draws its parameters from the schedule's seeded rng (pure data, written to
run.json before anything runs), starts, stops, and sweeps: undoes whatever it may have left
anywhere, whether or not the runner knows of it (a crash, a lost stop step). Kinds are named
once, in `nemesis.registry`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nemesis.context import NemesisContext


@dataclass(frozen=True)
class FaultPlan:
    """What a fault's parameters may depend on: the cluster's layout and the scenario's
    `[nemesis.options]` (plus `delay_ms`, the configured DD)."""

    nodes: Sequence[str]
    learners: Sequence[str]
    max_skew_s: float
    interval_s: float
    options: Mapping[str, Any] = field(default_factory=dict)


class Nemesis(Protocol):
    kind: str
    start_action: str  # the `f` of the history's nemesis events
    stop_action: str
    in_all: bool  # part of `--nemesis all`
    needs_root: bool  # iptables or tc on the host when nodes run locally

    def unusable(self, plan: FaultPlan) -> str | None:
        """Why this kind cannot run on that cluster (None: it can)."""
        ...

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        """The nth fault's parameters, every random choice taken from rng."""
        ...

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]: ...

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]: ...

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]: ...


def rounded(value: float) -> float:
    """Offsets and times are kept to the millisecond so the data reads cleanly."""
    return round(value, 3)


def choices(
    options: Mapping[str, Any], key: str, allowed: Sequence[str], default: Sequence[str]
) -> list[str]:
    """The scenario's `[nemesis.options]` list for key, checked against what exists."""
    raw = options.get(key)
    if raw is None:
        return list(default)
    if isinstance(raw, str):
        raw = [raw]
    values = [str(x) for x in raw]
    bad = [x for x in values if x not in allowed]
    if bad or not values:
        raise ValueError(f"nemesis option {key}: {bad or 'empty'} (known: {', '.join(allowed)})")
    return values
