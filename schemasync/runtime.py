"""What a node takes from its environment, in one place: the seams a simulation replaces.

A real node uses the wall clock (``time.time``, moved by libfaketime), TCP, the local disk and
an unseeded random source; the simulator passes a per-node virtual clock, a simulated network
and disk and a seeded ``random.Random``. Elapsed time is always the running event loop's
clock (``monotonic``), which the simulator's loop makes virtual; no protocol logic forks.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from schemasync.disk import LOCAL_DISK, Disk
from schemasync.hlc import wall_ms
from schemasync.transport import TCP, Transport


@dataclass(frozen=True)
class Runtime:
    wall_ms: Callable[[], int] = wall_ms
    transport: Transport = TCP
    disk: Disk = LOCAL_DISK
    rng: random.Random = field(default_factory=random.Random)

    def token(self) -> str:
        """A random 128-bit hex id (a request id): from ``rng``, so a seeded run repeats it."""
        return f"{self.rng.getrandbits(128):032x}"


def monotonic() -> float:
    """Seconds on the running event loop's clock (``time.monotonic`` outside a loop): real
    time on a real node, virtual time under the simulator."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
