"""The nemesis schedule: pure, seeded data that says which fault starts and stops when.

Faults alternate with healthy periods of the same length. Every random choice (which fault,
which nodes, which offsets, which partition) is made here from the seed, so the schedule can
be written to run.json before it runs and replayed exactly by `repro`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemesis.partition import SHAPES, grudge

KINDS = ("clock", "partition", "lagging-learner", "kill", "pause")
# kinds only taken when named: `delay` changes DD at runtime (meaningful with `mutable-delay`)
EXTRA_KINDS = ("delay",)
CLOCK_MODES = ("skew", "skew-edge", "skew-beyond", "bump", "strobe")
# what `clock` / `all` draws from unless `clock_modes` says otherwise: within CSmax, the only
# skew the design promises to tolerate (skew-beyond is run only when asked for by name)
DEFAULT_CLOCK_MODES = ("skew", "bump", "strobe")
LAGGING_MODES = ("drop", "tbf", "inhibit")
PROCESS_TARGETS = ("one", "minority", "majority", "metastore-leader", "learners", "all")
DELAY_MODES = ("all", "split")

# action names, also the `f` of the history's nemesis events
START = {kind: f"start-{kind}" for kind in KINDS + EXTRA_KINDS}
STOP = {kind: f"stop-{kind}" for kind in KINDS + EXTRA_KINDS} | {"partition": "heal-partition"}


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


def _offset(value: float) -> float:
    """Offsets are kept to the millisecond so the data reads cleanly."""
    return round(value, 3)


def clock_params(
    mode: str, rng: random.Random, nodes: Sequence[str], max_skew_s: float, interval_s: float
) -> dict[str, Any]:
    """Offsets (seconds) per node for one clock fault.

    skew: every node within +-CSmax/2, so any two differ by at most CSmax (what the design
    tolerates); skew-edge: two seeded groups exactly CSmax apart (the edge of what it
    tolerates, where a missing round-up shows); skew-beyond: two groups 1.5-3 CSmax apart;
    bump: one node jumps within CSmax; strobe: one node flips between 0 and an offset within
    CSmax every period.
    """
    if mode == "skew":
        half = max_skew_s / 2
        return {"mode": mode, "offsets": {n: _offset(rng.uniform(-half, half)) for n in nodes}}
    if mode == "skew-edge":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        half = max_skew_s / 2
        return {"mode": mode, "offsets": {n: _offset(half if n in ahead else -half) for n in nodes}}
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


def _choices(
    options: Mapping[str, Any], key: str, allowed: Sequence[str], default: Sequence[str]
) -> list[str]:
    """The scenario's `[nemesis.options]` list for key, checked against what exists."""
    raw = options.get(key)
    if raw is None:
        return list(default)
    if isinstance(raw, str):
        raw = [raw]
    values = [str(x) for x in raw]
    bad = [x for x in values if x not in allowed]
    if bad or not values:
        raise ValueError(f"nemesis option {key}: {bad or 'empty'} (known: {', '.join(allowed)})")
    return values


def delay_params(
    mode: str,
    rng: random.Random,
    nodes: Sequence[str],
    values_ms: Sequence[int],
    configured_ms: int,
) -> dict[str, Any]:
    """DD per node for one `delay` fault (admin.set_delay), and the value the stop restores.

    all: every node takes one value other than the configured DD; split: the nodes are cut in
    two seeded groups with different values, so they also disagree with each other.
    """
    others = [v for v in values_ms if v != configured_ms] or list(values_ms)
    if mode == "all":
        value = rng.choice(others)
        delays = {n: value for n in nodes}
    elif mode == "split":
        low = rng.choice(others)
        high = rng.choice([v for v in values_ms if v != low] or [configured_ms])
        group = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        delays = {n: (low if n in group else high) for n in nodes}
    else:
        raise ValueError(f"unknown delay mode {mode!r}")
    return {"mode": mode, "delays_ms": delays, "restore_ms": configured_ms}


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
    the scenario's `[nemesis.options]` allows (clock_modes, lagging_modes, partition_shapes,
    process_targets, delay_modes, delay_values_ms, delay_ms)."""
    opts = options or {}
    if kind == "clock":
        modes = _choices(opts, "clock_modes", CLOCK_MODES, DEFAULT_CLOCK_MODES)
        return clock_params(rng.choice(modes), rng, nodes, max_skew_s, interval_s)
    if kind == "partition":
        shape = rng.choice(_choices(opts, "partition_shapes", SHAPES, SHAPES))
        g = None if shape == "isolate-metastore-leader" else grudge(shape, nodes, rng)
        return {"shape": shape, "grudge": g}
    if kind == "lagging-learner":
        count = rng.randint(1, len(learners))
        chosen = set(rng.sample(list(learners), count))
        mode = rng.choice(_choices(opts, "lagging_modes", LAGGING_MODES, LAGGING_MODES))
        return {"mode": mode, "learners": [x for x in learners if x in chosen]}
    if kind in ("kill", "pause"):
        usable = [t for t in PROCESS_TARGETS if t != "learners" or learners]
        targets = _choices(opts, "process_targets", usable, usable)
        return process_params(rng.choice(targets), rng, nodes, learners)
    if kind == "delay":
        configured = int(opts.get("delay_ms", 500))
        values = [int(v) for v in opts.get("delay_values_ms") or (configured, configured // 4)]
        if any(v < 1 for v in values):
            raise ValueError(f"nemesis option delay_values_ms: needs values >= 1, got {values}")
        modes = _choices(opts, "delay_modes", DELAY_MODES, DELAY_MODES)
        mode = modes[nth % len(modes)]  # in turn: each mode shows up early
        return delay_params(mode, rng, nodes, values, configured)
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
    options: Mapping[str, Any] | None = None,
) -> list[NemesisStep]:
    """Healthy for interval_s, a fault for interval_s, healthy again, ... until time_limit_s.

    Kinds are taken in a seeded shuffled rotation so each appears once before any repeats;
    a fault is scheduled only if it also ends (is healed) within the time limit. `options` is
    the scenario's `[nemesis.options]`: it narrows what each kind may pick (see fault_params).
    voters is part of the signature for targets that need it; learners-only faults drop out
    when the cluster has no learners.
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
        nth = sum(1 for s in steps if s.action == START[kind])
        params = fault_params(kind, rng, nodes, learners, max_skew_s, interval_s, options, nth)
        tag = {"fault": fault, "kind": kind}
        steps.append(NemesisStep(_offset(start), START[kind], {**tag, **params}))
        steps.append(NemesisStep(_offset(start + interval_s), STOP[kind], dict(tag)))
        fault += 1
        start += 2 * interval_s
    return steps
