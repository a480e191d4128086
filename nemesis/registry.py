"""Every fault kind, by the name `--nemesis` and the scenarios take: one line per kind.

The order is the schedule's (a seeded shuffle of this list, so it is part of what a seed
means); heal-all sweeps the kinds in the reverse order, as a stack unwinds (once the fault
surface has swept every cut and slowed link): nodes resumed and restarted, applies released,
clocks reset last.
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
