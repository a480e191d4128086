"""Hybrid logical clock: one int, physical_ms << 16 | logical, physical part from time.time().

The wall clock is read only through ``time.time()`` so that clock skew injected under the
process (libfaketime) really moves it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1

log = logging.getLogger(__name__)


def make_ts(ms: int, logical: int = 0) -> int:
    """The timestamp of physical millisecond ``ms`` and logical counter ``logical``."""
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical part out of range: {logical}")
    return (ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    return ts & LOGICAL_MASK


def ceil_ms(ts: int) -> int:
    """Smallest timestamp with logical part 0 that is >= ts."""
    if logical(ts) == 0:
        return ts
    return make_ts(physical_ms(ts) + 1)


def add_ms(ts: int, ms: int) -> int:
    """``ts`` moved by ``ms`` physical milliseconds, logical part kept."""
    return ts + (ms << LOGICAL_BITS)


def wall_ms() -> int:
    """The (possibly faked) wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


class HybridClock:
    """A hybrid logical clock; ``now`` ticks, ``update`` merges a received timestamp."""

    def __init__(self, max_clock_skew_ms: int, wall: Callable[[], int] = wall_ms) -> None:
        self._wall = wall
        self._last = 0
        self.max_clock_skew_ms = max_clock_skew_ms
        self.ahead_count = 0

    def wall_ms(self) -> int:
        """This node's wall clock (the HLC's physical source) in epoch milliseconds."""
        return self._wall()

    def now(self) -> int:
        """A fresh timestamp, strictly greater than every one returned or merged before."""
        candidate = make_ts(self._wall())
        self._last = candidate if candidate > self._last else self._tick(self._last)
        return self._last

    def current(self) -> int:
        """The latest timestamp without ticking (for reporting)."""
        return max(self._last, make_ts(self._wall()))

    def update(self, ts: int) -> int:
        """Merge a timestamp from a message; a ts more than CSmax ahead is counted, not refused."""
        if ts <= 0:
            return self.now()
        wall = self._wall()
        if physical_ms(ts) - wall > self.max_clock_skew_ms:
            self.ahead_count += 1
            if self.ahead_count & (self.ahead_count - 1) == 0:  # 1st, 2nd, 4th, ...: no flood
                log.warning(
                    "received hlc %d is %d ms ahead of local wall clock (max_clock_skew %d ms;"
                    " %d such timestamps so far)",
                    ts,
                    physical_ms(ts) - wall,
                    self.max_clock_skew_ms,
                    self.ahead_count,
                )
        self._last = max(self._last, ts)
        return self.now()

    @staticmethod
    def _tick(ts: int) -> int:
        if logical(ts) == LOGICAL_MASK:
            return make_ts(physical_ms(ts) + 1)
        return ts + 1
