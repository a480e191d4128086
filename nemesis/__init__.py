"""Nemeses: clock skew, partitions, lagging learners, kill, pause and delay, on a seeded
schedule.

`build_schedule` makes the schedule (pure data for run.json); `run_schedule` plays it against
a cluster through the backend's fault surface (`contract.fault_surface`); `heal_all` undoes
everything. Each kind is a `Nemesis` (nemesis.fault), written once against that surface and
named once in `nemesis.registry`.
"""

from nemesis.context import NemesisContext, NemesisState
from nemesis.runner import heal_all, run_schedule
from nemesis.schedule import (
    KINDS,
    NemesisStep,
    build_schedule,
    parse_kinds,
    schedule_from_json,
    schedule_to_json,
)

__all__ = [
    "KINDS",
    "NemesisContext",
    "NemesisState",
    "NemesisStep",
    "build_schedule",
    "heal_all",
    "parse_kinds",
    "run_schedule",
    "schedule_from_json",
    "schedule_to_json",
]
