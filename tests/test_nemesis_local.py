"""The nemeses on the local backend (node processes on this machine, one loopback address
each): a hand-written schedule of clock bump, apply inhibitor, pause and leader kill goes
through run_schedule and the history's measured outcomes show each took effect; and the
network lagging-learner modes, which share the host's iptables and `lo`, stall one learner.

Partitions are not tested here: nodes connect from 127.0.0.1, not from their own address, so
a rule cannot tell which node sent a packet (see the nemesis report)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends import provision
from harness.backends.host_surface import HostSurface
from harness.cluster import Cluster, ClusterSpec
from nemesis import NemesisContext, NemesisStep, heal_all, run_schedule
from nemesis.context import statuses
from nemesis.lagging import start_lagging, stop_lagging
from targets.schemasync import SchemaSyncTarget
from tests.test_harness_support import free_local_base, survivors_elected, wait_for
from workloads.history import HistoryRecorder, read_history

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def local_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, SchemaSyncTarget]]:
    run_id = f"t-nemlocal-{uuid.uuid4().hex[:8]}"
    spec = ClusterSpec(backend="local", nodes=5, voters=3, local_base=free_local_base())
    with provision(spec, run_id, tmp_path_factory.mktemp("nemlocal") / ".tmp") as cluster:
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {"delay_duration_ms": 200})
            target.start_all()
            target.wait_ready(60)
            yield cluster, target
        finally:
            target.teardown()


def _steps() -> list[NemesisStep]:
    clock = {"fault": 0, "kind": "clock"}
    lag = {"fault": 1, "kind": "lagging-learner"}
    pause = {"fault": 2, "kind": "pause"}
    kill = {"fault": 3, "kind": "kill"}
    return [
        NemesisStep(0.0, "start-clock", {**clock, "mode": "bump", "offsets": {"n4": 0.3}}),
        NemesisStep(0.5, "stop-clock", clock),
        NemesisStep(0.6, "start-lagging-learner", {**lag, "mode": "inhibit", "learners": ["n5"]}),
        NemesisStep(2.6, "stop-lagging-learner", lag),
        NemesisStep(2.7, "start-pause", {**pause, "target": "one", "nodes": ["n2"]}),
        NemesisStep(3.2, "stop-pause", pause),
        NemesisStep(3.3, "start-kill", {**kill, "target": "metastore-leader", "nodes": None}),
    ]


def test_local_schedule_clock_inhibit_pause_kill(
    local_cluster: tuple[Cluster, SchemaSyncTarget], tmp_path: Path
) -> None:
    cluster, target = local_cluster
    history = tmp_path / "history.jsonl"
    ctx = NemesisContext(cluster, target, HostSurface(cluster, target, cluster.run_id))
    host_before = time.time() - time.monotonic()

    async def go() -> None:
        with HistoryRecorder(history) as recorder:
            try:
                await run_schedule(_steps(), ctx, recorder, asyncio.Event())
                # the restart waits for the survivors' election, not a fixed 4 s: elections
                # time out in 300-600 ms, yet once on CI the survivors named no new leader 4 s
                # after the kill (the cause was not reproduced here: 5 runs, each elected)
                assert await wait_for(lambda: survivors_elected(ctx), 30), (
                    "the survivors elected no leader in 30 s"
                )
                stop = NemesisStep(0.0, "stop-kill", {"fault": 3, "kind": "kill"})
                await run_schedule([stop], ctx, recorder, asyncio.Event())
            finally:
                await heal_all(ctx, recorder)

    asyncio.run(go())
    assert abs((time.time() - time.monotonic()) - host_before) < 0.05
    target.wait_ready(30)
    events = {e["f"]: e["value"] for e in read_history(history)}
    clock = events["start-clock"]
    moved = clock["after"]["n4"]["wall_offset_s"] - clock["before"]["n4"]["wall_offset_s"]
    assert abs(moved - 0.3) <= 0.05, clock
    assert all(abs(clock["after"][n]["wall_offset_s"]) <= 0.05 for n in ("n1", "n2", "n3", "n5"))
    assert abs(events["stop-clock"]["after"]["n4"]["wall_offset_s"]) <= 0.05
    lag_start, lag_stop = events["start-lagging-learner"], events["stop-lagging-learner"]
    held = lag_start["before"]["learners"]["n5"]["applied_index"]
    assert lag_stop["before"]["learners"]["n5"]["applied_index"] <= held + 1, (lag_start, lag_stop)
    assert lag_stop["before"]["voters_applied_index"] >= held + 4, (lag_start, lag_stop)
    assert events["stop-pause"]["answering"] == ["n2"]
    killed = events["start-kill"]["nodes"]
    assert killed == [events["start-kill"]["leader"]]
    assert "errors" not in events["start-kill"], events["start-kill"]
    assert events["stop-kill"]["leader_before"] not in (None, *killed), events["stop-kill"]
    assert killed[0] in events["stop-kill"]["answered_ms"]
    assert "errors" not in events["heal-all"], events["heal-all"]


@pytest.mark.root
@pytest.mark.parametrize("mode", ["drop", "tbf"])
def test_local_lagging_learner_on_shared_loopback(
    local_cluster: tuple[Cluster, SchemaSyncTarget], needs_root: None, mode: str
) -> None:
    cluster, target = local_cluster
    target.wait_ready(30)
    ctx = NemesisContext(cluster, target, HostSurface(cluster, target, cluster.run_id))

    async def applied() -> dict[str, int]:
        return {n: int(s["applied_index"]) for n, s in (await statuses(ctx)).items()}

    async def go() -> tuple[dict[str, int], dict[str, int], dict[str, object]]:
        params = {"mode": mode, "learners": ["n5"]}
        started = await start_lagging(ctx, params)
        assert "errors" not in started, started
        try:
            await asyncio.sleep(0.5)
            s0 = await applied()
            await asyncio.sleep(2.0)
            s1 = await applied()
        finally:
            stopped = await stop_lagging(ctx, params)
        return s0, s1, stopped

    s0, s1, stopped = asyncio.run(go())
    assert "errors" not in stopped, stopped
    voters = s1["n1"] - s0["n1"]
    assert voters >= 4, (s0, s1)
    assert s1["n5"] - s0["n5"] <= voters // 3, (mode, s0, s1)
    assert s1["n4"] - s0["n4"] >= voters - 2, "the other learner is untouched"
    target.wait_ready(20)  # caught up: every node applied the leader's commit index
