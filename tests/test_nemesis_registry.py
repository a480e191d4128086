"""Fault kinds are defined once (nemesis.registry) and each is a Nemesis; the schedule a seed
gives is the one it gave before the kinds became classes (run.json's replay depends on it)."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from nemesis.fault import FaultPlan
from nemesis.registry import NEMESES, nemesis_of
from nemesis.schedule import EXTRA_KINDS, KINDS, START, STOP, build_schedule, schedule_to_json

NODES = ["n1", "n2", "n3", "n4", "n5"]
# sha256 of the schedules below, computed with the if-chain code this registry replaced
GOLDEN = "6a3fb8b1d72d070392989b0ad472994566daf9f6163b0c48a0854f6142f001bc"


def test_each_kind_is_named_once_and_its_actions_are_its_own() -> None:
    assert all(n.kind == kind for kind, n in NEMESES.items())
    assert KINDS == ("clock", "partition", "lagging-learner", "kill", "pause")
    assert EXTRA_KINDS == ("delay",)
    actions = list(START.values()) + list(STOP.values())
    assert len(actions) == len(set(actions)) == 2 * len(NEMESES)
    assert STOP["partition"] == "heal-partition" and START["delay"] == "start-delay"
    assert {k for k, n in NEMESES.items() if n.needs_root} == {"partition", "lagging-learner"}
    with pytest.raises(ValueError, match="unknown nemesis kind 'flood'"):
        nemesis_of("flood")


def test_the_schedules_of_a_seed_are_unchanged_by_the_registry() -> None:
    out = []
    for seed in (1, 7, 42):
        for kinds, opts in (
            (["all", "delay"], {"delay_ms": 500}),
            (["clock"], {"clock_modes": ["skew-edge", "strobe"]}),
            (["kill", "pause"], {"process_targets": ["one", "learners"]}),
        ):
            steps = build_schedule(
                kinds, 5.0, 300.0, seed, NODES, NODES[:3], NODES[3:], max_skew_s=0.5, options=opts
            )
            out.append(schedule_to_json(steps))
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()
    assert digest == GOLDEN
    # and it is a check: another seed's schedules differ
    other = build_schedule(["all"], 5.0, 300.0, 2, NODES, NODES[:3], NODES[3:])
    assert schedule_to_json(other) != out[0]


def test_a_kind_that_cannot_run_on_the_cluster_says_why() -> None:
    no_learners = FaultPlan(NODES, [], 0.5, 5.0)
    assert NEMESES["lagging-learner"].unusable(no_learners) is not None
    assert NEMESES["lagging-learner"].unusable(FaultPlan(NODES, NODES[3:], 0.5, 5.0)) is None
    with pytest.raises(ValueError, match="lagging-learner needs learners"):
        build_schedule(["lagging-learner"], 5.0, 60.0, 1, NODES, NODES, [])
    # beside a kind that can run, it just drops out
    steps = build_schedule(["lagging-learner", "kill"], 5.0, 60.0, 1, NODES, NODES, [])
    assert {s.params["kind"] for s in steps} == {"kill"}


@pytest.mark.parametrize("kind", list(NEMESES))
def test_each_kind_draws_only_from_the_rng_it_is_given(kind: str) -> None:
    plan = FaultPlan(NODES, NODES[3:], 0.5, 5.0, {"delay_ms": 500})
    first = NEMESES[kind].draw(random.Random(3), plan, 0)
    assert NEMESES[kind].draw(random.Random(3), plan, 0) == first
    assert json.loads(json.dumps(first)) == first  # plain data, for run.json
