"""Schema sync: wait until this node has every catalog update that can be active at a ts.

``wait_for_metadata_completeness(ts)`` waits for safe time >= ts - DD; after it the answer
of ``active_catalog(ts)`` is final here. The DDL ack waits until the local HLC passed
ceil_ms(Tu + CSmax), so the DDL is visible on any node a client turns to next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemasync.catalog import Catalog, CatalogHistory
from schemasync.hlc import HybridClock, add_ms, ceil_ms, physical_ms
from schemasync.metastore import SafeTimeTracker
from schemasync.runtime import monotonic
from schemasync.toggles import ACK_WAIT_NO_SKEW, HLC_NO_ROUND_UP, NO_ACK_WAIT, NO_SAFE_TIME_WAIT


@dataclass
class SafeTimeWaits:
    """Counters of completeness waits that had to block (admin status)."""

    count: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0

    def record(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms
        self.max_ms = max(self.max_ms, ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "total_ms": round(self.total_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


def ack_target_ts(activation_ts: int, max_clock_skew_ms: int, toggles: frozenset[str]) -> int:
    """The HLC the DDL's node must pass before acknowledging: ceil_ms(Tu + CSmax)."""
    if ACK_WAIT_NO_SKEW in toggles:
        return activation_ts
    target = add_ms(activation_ts, max_clock_skew_ms)
    return target if HLC_NO_ROUND_UP in toggles else ceil_ms(target)


class SchemaSync:
    """Completeness waits and the schema active at a timestamp, on this node."""

    def __init__(
        self,
        clock: HybridClock,
        safe_time: SafeTimeTracker,
        catalogs: Callable[[], CatalogHistory],
        delay_ms: Callable[[], int],
        max_clock_skew_ms: int,
        toggles: frozenset[str],
    ) -> None:
        self.clock = clock
        self.safe_time = safe_time
        self._catalogs = catalogs
        self._delay_ms = delay_ms
        self.max_clock_skew_ms = max_clock_skew_ms
        self.toggles = toggles
        self.waits = SafeTimeWaits()

    @property
    def catalogs(self) -> CatalogHistory:
        return self._catalogs()

    async def wait_for_metadata_completeness(self, ts: int) -> None:
        """Wait until safe time >= ts - DD; callers bound it with asyncio.timeout."""
        if NO_SAFE_TIME_WAIT in self.toggles:
            return
        needed = add_ms(ts, -self._delay_ms())
        if self.safe_time.current >= needed:
            return
        started = monotonic()
        try:
            await self.safe_time.wait(needed)
        finally:
            self.waits.record((monotonic() - started) * 1000)

    async def active_catalog(self, ts: int) -> Catalog:
        """The catalog version active at ts, after the completeness wait."""
        await self.wait_for_metadata_completeness(ts)
        return self.catalogs.active(ts)

    async def wait_ddl_ack(self, activation_ts: int) -> int:
        """Wait until the local HLC passed the ack target of a DDL; returns that HLC."""
        if NO_ACK_WAIT in self.toggles:
            return self.clock.now()
        target = ack_target_ts(activation_ts, self.max_clock_skew_ms, self.toggles)
        while True:
            now = self.clock.now()
            if now >= target:
                return now
            # The HLC moves with the wall clock or faster (messages from nodes ahead), so
            # sleeping the HLC's distance to the target never oversleeps.
            ahead_ms = physical_ms(target) - physical_ms(now)
            await asyncio.sleep(max(ahead_ms, 0) / 1000 + 0.0005)
