"""The node a leader-targeting fault hits (partition shape isolate-metastore-leader, kill and
pause of metastore-leader): the target's primary, asked through its `Primaries` capability.

A target without one has no leader to hit: the fault is recorded as not applicable, which is
neither an error nor a made-up leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.target import Primaries
from nemesis.context import NemesisContext

LEADER_WAIT_S = 10.0  # an election in progress names a leader well within this


@dataclass(frozen=True)
class Leader:
    """Who leads (None: nobody named one in time), or why nobody can."""

    node: str | None
    not_applicable: str | None = None

    def recorded(self) -> dict[str, Any]:
        """What the fault's event says of it."""
        if self.not_applicable is not None:
            return {"not_applicable": self.not_applicable}
        return {"leader": self.node}


async def current_leader(ctx: NemesisContext, wait_s: float = LEADER_WAIT_S) -> Leader:
    """The target's primary now, waiting up to wait_s for one to be named."""
    target = ctx.target
    if not isinstance(target, Primaries):
        return Leader(None, f"target {target.name} has no primary to target")
    leaders = await target.primaries(wait_s)
    return Leader(leaders[0] if leaders else None)
