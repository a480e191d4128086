"""The nemesis schedule is pure seeded data: same seed, same schedule; faults alternate with
healthy periods; every shape, offset and target obeys its definition."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis.clock import clock_params
from nemesis.partition import SHAPES, grudge
from nemesis.schedule import (
    EXTRA_KINDS,
    KINDS,
    START,
    STOP,
    build_schedule,
    parse_kinds,
    schedule_from_json,
    schedule_to_json,
)

NODES = ["n1", "n2", "n3", "n4", "n5"]
VOTERS = NODES[:3]
LEARNERS = NODES[3:]


def _build(seed: int, kinds: list[str] | None = None, limit: float = 200.0) -> list:
    return build_schedule(kinds or list(KINDS), 5.0, limit, seed, NODES, VOTERS, LEARNERS)


def test_seed_7_gives_the_identical_schedule_twice() -> None:
    first, second = _build(7), _build(7)
    assert schedule_to_json(first) == schedule_to_json(second)
    assert json.dumps(schedule_to_json(first)) == json.dumps(schedule_to_json(second))
    # it is data: a JSON round trip (run.json, then repro) gives it back unchanged
    assert schedule_from_json(json.loads(json.dumps(schedule_to_json(first)))) == first
    assert schedule_to_json(_build(8)) != schedule_to_json(first)


def test_faults_alternate_with_healthy_periods_within_the_time_limit() -> None:
    steps = _build(7, limit=63.0)
    assert len(steps) == 2 * 6  # faults at 5, 15, ..., 55; the one at 65 would end past 63
    for i in range(0, len(steps), 2):
        start, stop = steps[i], steps[i + 1]
        kind = start.params["kind"]
        assert start.action == START[kind] and stop.action == STOP[kind]
        assert start.params["fault"] == stop.params["fault"] == i // 2
        assert start.at_s == 5.0 * (2 * (i // 2) + 1)
        assert stop.at_s == start.at_s + 5.0 <= 63.0
    # a shuffled rotation: the first five faults are the five kinds
    assert sorted(s.params["kind"] for s in steps[:10:2]) == sorted(KINDS)


def test_parse_kinds() -> None:
    assert parse_kinds("all") == list(KINDS)
    assert parse_kinds("none") == []
    assert parse_kinds("clock, partition,clock") == ["clock", "partition"]
    with pytest.raises(ValueError, match="unknown nemesis"):
        parse_kinds("clock,meteor")


def test_lagging_learner_needs_learners() -> None:
    with pytest.raises(ValueError, match="learners"):
        build_schedule(["lagging-learner"], 1, 10, 1, NODES[:3], NODES[:3], [])
    steps = build_schedule(["lagging-learner", "kill"], 1, 10, 1, NODES[:3], NODES[:3], [])
    assert {s.params["kind"] for s in steps} == {"kill"}


def test_clock_modes_respect_csmax() -> None:
    rng = random.Random(3)
    for _ in range(200):
        skew = clock_params("skew", rng, NODES, 0.5, 10)["offsets"]
        assert max(skew.values()) - min(skew.values()) <= 0.5
        beyond = clock_params("skew-beyond", rng, NODES, 0.5, 10)["offsets"]
        assert max(beyond.values()) - min(beyond.values()) > 0.5
        bump = clock_params("bump", rng, NODES, 0.5, 10)["offsets"]
        assert len(bump) == 1 and 0 < abs(next(iter(bump.values()))) <= 0.5
        strobe = clock_params("strobe", rng, NODES, 0.5, 10)
        assert strobe["offsets"][0] == 0 and 0 < abs(strobe["offsets"][1]) <= 0.5
        assert 0.05 <= strobe["period_s"] <= 0.2 and strobe["duration_s"] == 10


@pytest.mark.parametrize(
    ("csmax", "edge"), [(0.5, 0.5), (0.002, 0.002), (0.005, 0.005), (0.001, 0.001), (0.0015, 0.001)]
)
def test_within_csmax_modes_stay_within_an_odd_or_fractional_csmax(
    csmax: float, edge: float
) -> None:
    """Offsets are kept to the millisecond: skew never rounds two nodes past CSmax, and
    skew-edge puts its groups exactly CSmax apart (CSmax down to the millisecond)."""
    rng = random.Random(5)
    for _ in range(300):
        skew = clock_params("skew", rng, NODES, csmax, 10)["offsets"]
        assert max(skew.values()) - min(skew.values()) <= csmax + 1e-9
        at_edge = clock_params("skew-edge", rng, NODES, csmax, 10)["offsets"]
        assert len(set(at_edge.values())) == 2
        assert max(at_edge.values()) - min(at_edge.values()) == pytest.approx(edge, abs=1e-9)


def _sees(g: dict[str, list[str]], a: str, b: str) -> bool:
    return b not in g[a] and a not in g[b]


def test_grudge_shapes() -> None:
    rng = random.Random(11)
    halves = grudge("halves", NODES, rng)
    assert halves["n1"] == ["n4", "n5"] and halves["n4"] == ["n1", "n2", "n3"]
    for _ in range(50):
        one = grudge("one", NODES, rng)
        alone = [n for n in NODES if len(one[n]) == 4]
        assert len(alone) == 1 and all(one[n] == alone for n in NODES if n not in alone)
        bridge = grudge("bridge", NODES, rng)
        middle = [n for n in NODES if all(_sees(bridge, n, m) for m in NODES)]
        assert len(middle) == 1
        assert sum(1 for n in NODES if len(bridge[n]) == 2) == 4
        ring = grudge("majorities-ring", NODES, rng)
        majorities = set()
        for n in NODES:
            visible = frozenset(m for m in NODES if m not in ring[n])
            assert n in visible and len(visible) >= 3
            majorities.add(visible)
        assert len(majorities) == 5, "no two nodes see the same majority"
        rh = grudge("random-halves", NODES, rng)
        assert sorted(len(rh[n]) for n in NODES) == [2, 2, 2, 3, 3]
    leader = grudge("isolate-metastore-leader", NODES, rng, leader="n2")
    assert leader["n2"] == ["n1", "n3", "n4", "n5"]
    with pytest.raises(ValueError):
        grudge("isolate-metastore-leader", NODES, rng, leader=None)


@given(seed=st.integers(0, 2**32), n=st.integers(3, 7))
@settings(max_examples=60, deadline=None)
def test_any_seed_gives_a_valid_symmetric_schedule(seed: int, n: int) -> None:
    nodes = [f"n{i}" for i in range(1, n + 1)]
    voters, learners = nodes[:3], nodes[3:]
    steps = build_schedule(list(KINDS), 2.0, 40.0, seed, nodes, voters, learners)
    assert steps == build_schedule(list(KINDS), 2.0, 40.0, seed, nodes, voters, learners)
    for step in steps:
        p = step.params
        assert 0 < step.at_s <= 40.0
        if step.action == "start-partition" and p["grudge"] is not None:
            assert p["shape"] in SHAPES
            g = p["grudge"]
            assert set(g) == set(nodes)
            for a in nodes:
                assert a not in g[a]
                for b in g[a]:
                    assert a in g[b], "partitions are symmetric"
        if step.action in ("start-kill", "start-pause") and p["nodes"] is not None:
            assert p["nodes"] and set(p["nodes"]) <= set(nodes)
        if step.action == "start-lagging-learner":
            assert p["learners"] and set(p["learners"]) <= set(learners)


# sha256 of the schedules below as the code before the linear rewrite built them (measured on
# its tree): a schedule that changes for any seed breaks every stored run's `repro`
_OLD_SCHEDULES_SHA256 = "cb6fbf10e2389c41c9907a2f0432b3858ef6e3b1c8e6caedc24c3a22a3cb4854"


def test_the_linear_build_gives_every_seed_the_schedule_it_gave_before() -> None:
    digest = hashlib.sha256()
    kindsets = [["all"], *[[k] for k in KINDS + EXTRA_KINDS], ["all", *EXTRA_KINDS]]
    combos = itertools.product(kindsets, [1.0, 3.5], [41.0, 300.0], range(6), [3, 5])
    for kinds, interval, limit, seed, voters in combos:
        if voters == len(NODES) and kinds == ["lagging-learner"]:
            steps = []  # no learners: refused (test_lagging_learner_needs_learners)
        else:
            steps = build_schedule(
                kinds, interval, limit, seed, NODES, NODES[:voters], NODES[voters:]
            )
        digest.update(json.dumps(schedule_to_json(steps), sort_keys=True).encode())
    assert digest.hexdigest() == _OLD_SCHEDULES_SHA256


@pytest.mark.timeout(120)
def test_a_one_day_soak_at_one_second_builds_in_time_linear_in_its_length() -> None:
    """86400 steps. Quadratic (each fault counting the faults before it) took 20 s for 8 h,
    so minutes for this; linear takes a few seconds even on a loaded machine."""
    started = time.monotonic()
    steps = build_schedule(["all"], 1.0, 86400.0, 3, NODES, VOTERS, LEARNERS)
    assert len(steps) == 86400
    assert time.monotonic() - started < 60


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("interval", "limit"), [(5.0, math.inf), (math.inf, 60.0), (math.nan, 60.0), (1.0, math.nan)]
)
def test_a_limit_or_interval_that_never_ends_is_refused(interval: float, limit: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        build_schedule(["kill"], interval, limit, 1, NODES, VOTERS, LEARNERS)
