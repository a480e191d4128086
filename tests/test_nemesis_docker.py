"""Every nemesis against a real 5-node docker cluster (3 voters, 2 learners), measured through
the nodes' admin API: clocks move by the offset written, halves stop the minority, learners
lag and catch up in each mode, a killed leader is replaced, paused nodes resume, and a whole
seeded schedule heals to nothing of ours left."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from harness.backends import provision
from harness.backends.host_surface import HostSurface
from harness.cluster import Cluster, ClusterSpec
from nemesis import NemesisStep, build_schedule, heal_all, run_schedule
from nemesis.clock import measure, reset_clocks, start_clock
from nemesis.context import NemesisContext, node_status, statuses
from nemesis.lagging import start_lagging, stop_lagging
from nemesis.leader import current_leader
from nemesis.partition import grudge, heal_partition, start_partition
from nemesis.process import restart, resume, start_kill, start_pause
from nemesis.runner import apply_step
from schemasync.client import Client
from targets.schemasync import SchemaSyncTarget
from tests.test_harness_support import (
    node_image,  # noqa: F401  (fixture)
    survivors_elected,
    wait_for,
)
from workloads.history import HistoryRecorder, read_history

pytestmark = [pytest.mark.docker, pytest.mark.cluster]
T = TypeVar("T")


@pytest.fixture(scope="module")
def docker_cluster(
    node_image: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, SchemaSyncTarget]]:
    run_id = f"t-nem-{uuid.uuid4().hex[:8]}"
    spec = ClusterSpec(backend="docker", nodes=5, voters=3, image=node_image)
    with provision(spec, run_id, tmp_path_factory.mktemp("nemesis") / ".tmp") as cluster:
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {"delay_duration_ms": 200, "max_clock_skew_ms": 500})
            target.start_all()
            target.wait_ready(60)
            yield cluster, target
        finally:
            target.teardown()


@pytest.fixture
def nem(
    docker_cluster: tuple[Cluster, SchemaSyncTarget], tmp_path: Path
) -> Iterator[tuple[NemesisContext, HistoryRecorder]]:
    """A fresh nemesis context on a ready cluster; whatever a test did is healed after it."""
    cluster, target = docker_cluster
    target.wait_ready(30)
    ctx = NemesisContext(cluster, target, HostSurface(cluster, target, cluster.run_id))
    recorder = HistoryRecorder(tmp_path / "history.jsonl")
    try:
        yield ctx, recorder
    finally:
        asyncio.run(heal_all(ctx, recorder))
        recorder.close()


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def go() -> T:
        return await factory()

    return asyncio.run(go())


async def ddl(ctx: NemesisContext, node: str, stmt: str, timeout_s: float) -> dict[str, Any]:
    async with asyncio.timeout(timeout_s):
        host = ctx.cluster.remotes[node].host
        client = await Client.connect([f"{host}:10800"], timeout=timeout_s)
        try:
            return await client.ddl(stmt)
        finally:
            await client.close()


async def applied(ctx: NemesisContext) -> dict[str, int]:
    return {n: int(s["applied_index"]) for n, s in (await statuses(ctx)).items()}


def our_rules(ctx: NemesisContext) -> dict[str, str]:
    return {
        n: ctx.cluster.remotes[n].run("iptables -w -S; tc qdisc show", timeout=15).stdout
        for n in ctx.cluster.nodes
    }


def test_clock_moves_one_node_by_the_offset_and_back(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, _ = nem
    host_before = time.time() - time.monotonic()

    async def go() -> None:
        before = await measure(ctx)
        value = await start_clock(ctx, {"mode": "bump", "offsets": {"n4": 0.4, "n5": -0.3}})
        after = value["after"]
        assert set(after) == set(ctx.cluster.nodes)
        assert abs(after["n4"]["hlc_offset_s"] - before["n4"]["hlc_offset_s"] - 0.4) <= 0.05, value
        assert abs(after["n4"]["wall_offset_s"] - 0.4) <= 0.05
        assert abs(after["n5"]["wall_offset_s"] + 0.3) <= 0.05
        for n in ("n1", "n2", "n3"):  # nobody else's clock moved
            assert abs(after[n]["wall_offset_s"]) <= 0.05, (n, after[n])
        inside = ctx.cluster.remotes["n1"].run("date +%s%N").stdout
        assert abs(int(inside) / 1e9 - time.time()) < 0.5  # the containers' own clock is real
        reset = await reset_clocks(ctx)
        assert all(abs(m["wall_offset_s"]) <= 0.05 for m in reset["after"].values()), reset
        await asyncio.sleep(0.6)  # the HLC never goes back: it waits for the wall clock
        settled = await measure(ctx)
        assert abs(settled["n4"]["hlc_offset_s"]) <= 0.05, settled

    run(go)
    assert abs((time.time() - time.monotonic()) - host_before) < 0.05


def test_halves_stop_the_minority_and_heal_leaves_no_rule(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, _ = nem
    g = grudge("halves", ctx.cluster.nodes, random.Random(0))
    assert g["n4"] == ["n1", "n2", "n3"]  # minority: the two learners

    async def go() -> None:
        value = await start_partition(ctx, {"shape": "halves", "grudge": g})
        assert "errors" not in value, value
        start = await applied(ctx)
        ok = await ddl(ctx, "n1", "CREATE TABLE part_major (c INT32)", 10)
        assert ok["catalog_version"] >= 2
        try:
            await ddl(ctx, "n4", "CREATE TABLE part_minor (c INT32)", 2)
        except Exception:  # a timeout or UNAVAILABLE: no progress without the leader
            pass
        else:
            pytest.fail("a DDL through the minority committed during the partition")
        later = await applied(ctx)
        assert later["n1"] > start["n1"] + 1
        assert later["n4"] == start["n4"] and later["n5"] == start["n5"], (start, later)
        healed = await heal_partition(ctx)
        assert healed["rules_remaining"] == dict.fromkeys(ctx.cluster.nodes, 0), healed
        leader_applied = later["n1"]
        assert await wait_for(lambda: _all_at_least(ctx, leader_applied), 15), (
            "the minority catches up after heal"
        )

    run(go)
    for node, rules in our_rules(ctx).items():
        assert "schemachaos" not in rules, (node, rules)


async def _all_at_least(ctx: NemesisContext, index: int) -> bool:
    now = await applied(ctx)
    return len(now) == len(ctx.cluster.nodes) and min(now.values()) >= index


@pytest.mark.parametrize("mode", ["drop", "tbf", "inhibit"])
def test_lagging_learner_stops_then_catches_up(
    nem: tuple[NemesisContext, HistoryRecorder], mode: str
) -> None:
    ctx, _ = nem

    async def go() -> None:
        params = {"mode": mode, "learners": ["n5"]}
        started = await start_lagging(ctx, params)
        assert "errors" not in started, started
        await asyncio.sleep(0.5)  # what was in flight lands
        s0 = await applied(ctx)
        await asyncio.sleep(2.5)
        s1 = await applied(ctx)
        voters = s1["n1"] - s0["n1"]
        learner = s1["n5"] - s0["n5"]
        assert voters >= 5, (s0, s1)
        if mode == "tbf":
            assert learner <= voters // 3, (mode, s0, s1)
        else:
            assert learner == 0, (mode, s0, s1)
        assert s1["n4"] - s0["n4"] >= voters - 2  # the other learner is healthy
        stopped = await stop_lagging(ctx, params)
        assert "errors" not in stopped, stopped
        assert stopped["before"]["learners"]["n5"]["applied_index"] is not None
        assert await wait_for(lambda: _all_at_least(ctx, s1["n1"]), 20), f"{mode}: no catch-up"

    run(go)
    for node, rules in our_rules(ctx).items():
        assert "schemachaos" not in rules and "5c5c" not in rules, (node, rules)


def test_killed_metastore_leader_is_replaced_and_comes_back(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, _ = nem

    async def go() -> None:
        old = (await current_leader(ctx)).node
        assert old in ctx.cluster.voters
        value = await start_kill(ctx, {"target": "metastore-leader", "nodes": None})
        assert value["nodes"] == [old] and value["leader"] == old
        assert await wait_for(lambda: survivors_elected(ctx), 15), (
            "no new leader among the survivors"
        )
        back = await restart(ctx, [old])
        assert back["leader_before"] not in (None, old), back
        assert old in back["answered_ms"], back

    run(go)


def test_paused_nodes_stop_answering_and_resume(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, _ = nem

    async def go() -> None:
        value = await start_pause(ctx, {"target": "minority", "nodes": ["n2", "n4"]})
        assert value["nodes"] == ["n2", "n4"]
        for n in ("n2", "n4"):
            with pytest.raises(TimeoutError):
                await node_status(ctx, n)
        resumed = await resume(ctx, ["n2", "n4"])
        assert resumed["answering"] == ["n2", "n4"], resumed

    run(go)


def test_seeded_schedule_runs_and_heals_everything(
    nem: tuple[NemesisContext, HistoryRecorder], tmp_path: Path
) -> None:
    ctx, recorder = nem
    cl = ctx.cluster
    # strobe asked for explicitly: the default clock modes draw it only by chance
    schedule = build_schedule(
        ["all"],
        0.8,
        8.0,
        7,
        cl.nodes,
        cl.voters,
        cl.learners,
        options={"clock_modes": ["strobe"]},
    )
    assert len(schedule) == 10
    json.dumps([s.to_json() for s in schedule])

    async def go() -> dict[str, Any]:
        await run_schedule(schedule, ctx, recorder, asyncio.Event())
        return await heal_all(ctx, recorder)

    healed = run(go)
    events = [e for e in read_history(tmp_path / "history.jsonl") if e["process"] == "nemesis"]
    assert all(e["type"] == "info" for e in events)
    starts = {e["value"]["fault"]: e for e in events if e["f"].startswith("start-")}
    stops = {e["value"]["fault"]: e for e in events if e["f"].startswith(("stop-", "heal-p"))}
    assert sorted(starts) == sorted(stops) == list(range(5))
    for fault, e in starts.items():
        assert "error" not in e["value"], e
        assert stops[fault]["value"]["kind"] == e["value"]["kind"]
        assert stops[fault]["index"] > e["index"]
        if e["value"]["kind"] == "clock" and e["value"]["mode"] == "strobe":
            # the node-side loop ran until the stop (how long is left of the interval after
            # the start's clock readings depends on load; the flip rate has a unit test)
            flips = stops[fault]["value"]["strobe_flips"][e["value"]["node"]]
            assert 1 <= flips <= 0.8 / e["value"]["period_s"] + 2, stops[fault]
    assert any(e["value"].get("mode") == "strobe" for e in starts.values()), "seed 7 strobes"
    assert events[-1]["f"] == "heal-all"
    assert healed["rules_remaining"] == dict.fromkeys(cl.nodes, 0), healed
    assert all(abs(m["wall_offset_s"]) <= 0.05 for m in healed["clock"]["after"].values())
    assert len(healed["clock"]["after"]) == len(cl.nodes), "every node answers after the heal"


def test_heal_all_undoes_faults_left_in_force(
    nem: tuple[NemesisContext, HistoryRecorder], tmp_path: Path
) -> None:
    """A run stopped mid-fault: every fault still in force gets its stop from heal_all."""
    ctx, recorder = nem
    starts = [
        NemesisStep(
            0,
            "start-clock",
            {
                "fault": 0,
                "kind": "clock",
                "mode": "skew-beyond",
                "offsets": {"n1": 0.8, "n2": -0.8},
            },
        ),
        NemesisStep(
            0,
            "start-lagging-learner",
            {"fault": 1, "kind": "lagging-learner", "mode": "tbf", "learners": ["n4"]},
        ),
        NemesisStep(
            0,
            "start-partition",
            {
                "fault": 2,
                "kind": "partition",
                "shape": "one",
                "grudge": {
                    "n3": ["n1", "n2", "n4", "n5"],
                    "n1": ["n3"],
                    "n2": ["n3"],
                    "n4": ["n3"],
                    "n5": ["n3"],
                },
            },
        ),
        NemesisStep(
            0, "start-pause", {"fault": 3, "kind": "pause", "target": "one", "nodes": ["n5"]}
        ),
        NemesisStep(
            0, "start-kill", {"fault": 4, "kind": "kill", "target": "one", "nodes": ["n2"]}
        ),
    ]

    async def go() -> dict[str, Any]:
        for step in starts:
            value = await apply_step(ctx, step, recorder)
            assert "error" not in value and "errors" not in value, value
        return await heal_all(ctx, recorder)

    healed = run(go)
    events = [e for e in read_history(tmp_path / "history.jsonl") if e["process"] == "nemesis"]
    stops = [e for e in events if e["value"].get("by") == "heal-all"]
    assert sorted(e["value"]["fault"] for e in stops) == [0, 1, 2, 3, 4]
    assert all("error" not in e["value"] and "errors" not in e["value"] for e in stops), stops
    assert "errors" not in healed and "error" not in healed, healed
    assert healed["rules_remaining"] == dict.fromkeys(ctx.cluster.nodes, 0)
    assert healed["qdiscs_remaining"] == dict.fromkeys(ctx.cluster.nodes, 0)
    assert sorted(healed["clock"]["after"]) == ctx.cluster.nodes  # everyone answers again
    assert all(abs(m["wall_offset_s"]) <= 0.05 for m in healed["clock"]["after"].values())
    for node, rules in our_rules(ctx).items():
        assert "schemachaos" not in rules and "5c5c" not in rules, (node, rules)
    ctx.target.wait_ready(30)
