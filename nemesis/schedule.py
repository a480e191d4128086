"""The nemesis schedule: pure, seeded data that says which fault starts and stops when.

Faults alternate with healthy periods of the same length. Every random choice (which fault,
which nodes, which offsets, which partition) is made here from the seed, so the schedule can
be written to run.json before it runs and replayed exactly by `repro`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemesis.partition import SHAPES, grudge

KINDS = ("clock", "partition", "lagging-learner", "kill", "pause")
CLOCK_MODES = ("skew", "skew-beyond", "bump", "strobe")
LAGGING_MODES = ("drop", "tbf", "inhibit")
PROCESS_TARGETS = ("one", "minority", "majority", "metastore-leader", "learners", "all")

# action names, also the `f` of the history's nemesis events
START = {kind: f"start-{kind}" for kind in KINDS}
STOP = {kind: f"stop-{kind}" for kind in KINDS} | {"partition": "heal-partition"}


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
    if "all" in names:
        return list(KINDS)
    unknown = [n for n in names if n not in KINDS]
    if unknown:
        raise ValueError(
            f"unknown nemesis {', '.join(unknown)} (known: {', '.join(KINDS)}, all, none)"
        )
    return list(dict.fromkeys(names))


def schedule_to_json(steps: Sequence[NemesisStep]) -> list[dict[str, Any]]:
    return [s.to_json() for s in steps]


def schedule_from_json(data: Sequence[dict[str, Any]]) -> list[NemesisStep]:
    return [NemesisStep.from_json(d) for d in data]


def _offset(value: float) -> float:
    """Offsets are kept to the millisecond so the data reads cleanly."""
    return round(value, 3)


def clock_params(
    mode: str, rng: random.Random, nodes: Sequence[str], max_skew_s: float, interval_s: float
) -> dict[str, Any]:
    """Offsets (seconds) per node for one clock fault.

    skew: every node within +-CSmax/2, so any two differ by at most CSmax (what the design
    tolerates); skew-beyond: two groups 1.5-3 CSmax apart; bump: one node jumps within CSmax;
    strobe: one node flips between 0 and an offset within CSmax every period.
    """
    if mode == "skew":
        half = max_skew_s / 2
        return {"mode": mode, "offsets": {n: _offset(rng.uniform(-half, half)) for n in nodes}}
    if mode == "skew-beyond":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        gap = rng.uniform(1.5, 3.0) * max_skew_s
        offsets = {n: _offset(gap / 2 if n in ahead else -gap / 2) for n in nodes}
        return {"mode": mode, "offsets": offsets}
    if mode == "bump":
        node = rng.choice(list(nodes))
        jump = rng.uniform(0.2, 0.9) * max_skew_s * rng.choice((-1, 1))
        return {"mode": mode, "offsets": {node: _offset(jump)}}
    if mode == "strobe":
        node = rng.choice(list(nodes))
        delta = _offset(rng.uniform(0.3, 0.9) * max_skew_s * rng.choice((-1, 1)))
        period = _offset(rng.uniform(0.05, 0.2))
        return {
            "mode": mode,
            "node": node,
            "offsets": [0.0, delta],
            "period_s": period,
            "duration_s": _offset(interval_s),
        }
    raise ValueError(f"unknown clock mode {mode!r}")


def process_params(
    target: str, rng: random.Random, nodes: Sequence[str], learners: Sequence[str]
) -> dict[str, Any]:
    """Which nodes a kill or pause hits; `metastore-leader` is resolved when it runs."""
    n = len(nodes)
    chosen: list[str] | None
    if target == "one":
        chosen = [rng.choice(list(nodes))]
    elif target == "minority":
        chosen = rng.sample(list(nodes), max(1, (n - 1) // 2))
    elif target == "majority":
        chosen = rng.sample(list(nodes), n // 2 + 1)
    elif target == "learners":
        chosen = list(learners)
    elif target == "all":
        chosen = list(nodes)
    elif target == "metastore-leader":
        chosen = None
    else:
        raise ValueError(f"unknown process target {target!r}")
    ordered = None if chosen is None else [x for x in nodes if x in set(chosen)]
    return {"target": target, "nodes": ordered}


def fault_params(
    kind: str,
    rng: random.Random,
    nodes: Sequence[str],
    learners: Sequence[str],
    max_skew_s: float,
    interval_s: float,
) -> dict[str, Any]:
    """The data of one fault of `kind`, every random choice taken from rng."""
    if kind == "clock":
        return clock_params(rng.choice(CLOCK_MODES), rng, nodes, max_skew_s, interval_s)
    if kind == "partition":
        shape = rng.choice(SHAPES)
        g = None if shape == "isolate-metastore-leader" else grudge(shape, nodes, rng)
        return {"shape": shape, "grudge": g}
    if kind == "lagging-learner":
        count = rng.randint(1, len(learners))
        chosen = set(rng.sample(list(learners), count))
        return {"mode": rng.choice(LAGGING_MODES), "learners": [x for x in learners if x in chosen]}
    if kind in ("kill", "pause"):
        targets = [t for t in PROCESS_TARGETS if t != "learners" or learners]
        return process_params(rng.choice(targets), rng, nodes, learners)
    raise ValueError(f"unknown nemesis kind {kind!r}")


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
) -> list[NemesisStep]:
    """Healthy for interval_s, a fault for interval_s, healthy again, ... until time_limit_s.

    Kinds are taken in a seeded shuffled rotation so each appears once before any repeats;
    a fault is scheduled only if it also ends (is healed) within the time limit. voters is
    part of the signature for targets that need it; learners-only faults drop out when the
    cluster has no learners.
    """
    if interval_s <= 0:
        raise ValueError("nemesis interval must be > 0")
    usable = [k for k in parse_kinds(kinds) if k != "lagging-learner" or learners]
    if kinds and not usable:
        raise ValueError("lagging-learner needs learners (--voters below --nodes)")
    rng = random.Random(seed)
    steps: list[NemesisStep] = []
    rotation: list[str] = []
    fault = 0
    start = interval_s
    while usable and start + interval_s <= time_limit_s + 1e-9:
        if not rotation:
            rotation = list(usable)
            rng.shuffle(rotation)
        kind = rotation.pop()
        params = fault_params(kind, rng, nodes, learners, max_skew_s, interval_s)
        tag = {"fault": fault, "kind": kind}
        steps.append(NemesisStep(_offset(start), START[kind], {**tag, **params}))
        steps.append(NemesisStep(_offset(start + interval_s), STOP[kind], dict(tag)))
        fault += 1
        start += 2 * interval_s
    return steps
