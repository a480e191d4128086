"""Per-node wall clocks on virtual time, set exactly by the clock nemesis.

A node's wall clock is the virtual time plus a fixed epoch plus its offset, kept in whole
microseconds so that offsets like "exactly CSmax apart" or "0.4 ms before a millisecond edge"
are exact, never a float rounding away.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.loop import SimLoop

EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z: any fixed start keeps runs equal


class Clocks:
    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self.offsets_us: dict[str, int] = {}

    def now_us(self, node: str) -> int:
        return EPOCH_US + round(self._loop.time() * 1_000_000) + self.offsets_us.get(node, 0)

    def wall_of(self, node: str) -> Callable[[], int]:
        """The node's ``time.time()`` in milliseconds: the HLC's physical source."""

        def wall_ms() -> int:
            return self.now_us(node) // 1000

        return wall_ms

    def controller_s(self) -> float:
        """The controller's wall clock, in seconds: never offset (the faults move the nodes'
        clocks only), so a node's offset is measured against it as on real hosts."""
        return (EPOCH_US + round(self._loop.time() * 1_000_000)) / 1_000_000

    def set_offset(self, node: str, seconds: float) -> None:
        self.offsets_us[node] = round(seconds * 1_000_000)
