"""Every fault kind, by the name `--nemesis` and the scenarios take: one line per kind.

The order is the schedule's (a seeded shuffle of this list, so it is part of what a seed
means); heal-all sweeps in the reverse order, as a stack unwinds: nodes resumed and restarted
before the network is healed, clocks reset last.
"""

from __future__ import annotations

from nemesis.clock import ClockNemesis
from nemesis.delay import DelayNemesis
from nemesis.fault import Nemesis
from nemesis.lagging import LaggingLearnerNemesis
from nemesis.partition import PartitionNemesis
from nemesis.process import KillNemesis, PauseNemesis

NEMESES: dict[str, Nemesis] = {
    "clock": ClockNemesis(),
    "partition": PartitionNemesis(),
    "lagging-learner": LaggingLearnerNemesis(),
    "kill": KillNemesis(),
    "pause": PauseNemesis(),
    "delay": DelayNemesis(),
}


def nemesis_of(kind: str) -> Nemesis:
    if kind not in NEMESES:
        raise ValueError(f"unknown nemesis kind {kind!r} (known: {', '.join(NEMESES)})")
    return NEMESES[kind]
