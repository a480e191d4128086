"""The nemesis schedule: pure, seeded data that says which fault starts and stops when.

Faults alternate with healthy periods of the same length. Every random choice (which fault,
which nodes, which offsets, which partition) is made here from the seed, each kind drawing
its own parameters (`Nemesis.draw`), so the schedule can be written to run.json before it runs
and replayed exactly by `repro`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemesis.fault import FaultPlan, rounded
from nemesis.registry import NEMESES, nemesis_of

# what `all` runs; the other kinds only when named (`delay` changes DD at runtime, meaningful
# with `mutable-delay`)
KINDS = tuple(k for k, n in NEMESES.items() if n.in_all)
EXTRA_KINDS = tuple(k for k, n in NEMESES.items() if not n.in_all)

# action names, also the `f` of the history's nemesis events
START = {kind: n.start_action for kind, n in NEMESES.items()}
STOP = {kind: n.stop_action for kind, n in NEMESES.items()}


@dataclass(frozen=True)
class NemesisStep:
    """One action at `at_s` seconds after the schedule starts; params are plain JSON data."""

    at_s: float
    action: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "action": self.action, "params": self.params}

    @staticmethod
    def from_json(d: dict[str, Any]) -> NemesisStep:
        return NemesisStep(at_s=float(d["at_s"]), action=str(d["action"]), params=dict(d["params"]))


def parse_kinds(spec: str | Iterable[str]) -> list[str]:
    """`--nemesis` value -> kinds: a comma list, `all`, or `none`; unknown names raise."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [s.strip() for s in items if s.strip()]
    if names in (["none"], []):
        return []
    known = KINDS + EXTRA_KINDS
    unknown = [n for n in names if n not in known and n != "all"]
    if unknown:
        raise ValueError(
            f"unknown nemesis {', '.join(unknown)} (known: {', '.join(known)}, all, none)"
        )
    if "all" in names:  # every standard kind, plus any extra kind named beside it
        return list(KINDS) + [n for n in dict.fromkeys(names) if n in EXTRA_KINDS]
    return list(dict.fromkeys(names))


def schedule_to_json(steps: Sequence[NemesisStep]) -> list[dict[str, Any]]:
    return [s.to_json() for s in steps]


def schedule_from_json(data: Sequence[dict[str, Any]]) -> list[NemesisStep]:
    return [NemesisStep.from_json(d) for d in data]


def fault_params(
    kind: str,
    rng: random.Random,
    nodes: Sequence[str],
    learners: Sequence[str],
    max_skew_s: float,
    interval_s: float,
    options: Mapping[str, Any] | None = None,
    nth: int = 0,
) -> dict[str, Any]:
    """The data of the nth fault of `kind`, every random choice taken from rng, within what
    the scenario's `[nemesis.options]` allows."""
    plan = FaultPlan(nodes, learners, max_skew_s, interval_s, options or {})
    return nemesis_of(kind).draw(rng, plan, nth)


def build_schedule(
    kinds: list[str],
    interval_s: float,
    time_limit_s: float,
    seed: int,
    nodes: list[str],
    voters: list[str],
    learners: list[str],
    *,
    max_skew_s: float = 0.5,
    options: Mapping[str, Any] | None = None,
) -> list[NemesisStep]:
    """Healthy for interval_s, a fault for interval_s, healthy again, ... until time_limit_s.

    Time linear in the schedule's length (a 7-day soak at 1 s is 604800 steps).
    Kinds are taken in a seeded shuffled rotation so each appears once before any repeats;
    a fault is scheduled only if it also ends (is healed) within the time limit. `options` is
    the scenario's `[nemesis.options]`: it narrows what each kind may pick (see fault_params).
    voters is part of the signature for targets that need it; learners-only faults drop out
    when the cluster has no learners.
    """
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"nemesis interval must be a finite number > 0, got {interval_s!r}")
    if not math.isfinite(time_limit_s):  # the loop below ends only at a finite limit
        raise ValueError(f"time limit must be finite, got {time_limit_s!r}")
    plan = FaultPlan(nodes, learners, max_skew_s, interval_s, options or {})
    named = parse_kinds(kinds)
    usable = [k for k in named if NEMESES[k].unusable(plan) is None]
    if named and not usable:
        raise ValueError("; ".join(str(NEMESES[k].unusable(plan)) for k in named))
    rng = random.Random(seed)
    with _collector_paused():
        return _alternate(usable, plan, rng, interval_s, time_limit_s)


def _alternate(
    usable: Sequence[str],
    plan: FaultPlan,
    rng: random.Random,
    interval_s: float,
    time_limit_s: float,
) -> list[NemesisStep]:
    """build_schedule's alternation, one fault per turn, each a start and a stop step.

    What stays the same for every seed: the rng's calls in the same order, and the times
    accumulated by `start += 2 * interval_s` (a product would round differently and move a
    stored run's steps by a nanosecond: its `repro` would replay another schedule)."""
    steps: list[NemesisStep] = []
    add = steps.append
    # per kind, looked up once: its draw, its actions, and how many it has drawn (its nth)
    kinds = {kind: (NEMESES[kind].draw, START[kind], STOP[kind]) for kind in usable}
    drawn = dict.fromkeys(usable, 0)
    rotation: list[str] = []
    fault = 0
    start = interval_s
    while usable and start + interval_s <= time_limit_s + 1e-9:
        if not rotation:
            rotation = list(usable)
            rng.shuffle(rotation)
        kind = rotation.pop()
        draw, start_action, stop_action = kinds[kind]
        params = draw(rng, plan, drawn[kind])
        drawn[kind] += 1
        add(NemesisStep(rounded(start), start_action, {"fault": fault, "kind": kind, **params}))
        add(NemesisStep(rounded(start + interval_s), stop_action, {"fault": fault, "kind": kind}))
        fault += 1
        start += 2 * interval_s
    return steps


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """A long schedule is hundreds of thousands of small dicts and no cycle among them; the
    cyclic collector would walk them all again each time its thresholds trip as the list
    grows (a fifth of a 7-day soak's build). Paused for the build only, then restored as
    it was (the process's other threads go without it for that long)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
