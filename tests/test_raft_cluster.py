"""Meta Storage Raft on real processes: leader crash during DDL, learner catch-up by snapshot."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from schemasync.client import Client, SchemaSyncError
from schemasync.hlc import add_ms
from schemasync.localcluster import LocalCluster

pytestmark = pytest.mark.cluster

SNAPSHOT_THRESHOLD = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("raft"),
        base_addr="127.0.2",
        config_overrides={"snapshot_threshold": SNAPSHOT_THRESHOLD, "request_timeout_ms": 8000},
    ) as c:
        yield c


async def catalog_logs(c: LocalCluster, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    logs = {}
    for name in names:
        client = await c.client(name)
        logs[name] = await client.catalog_log()
        await client.close()
    return logs


def assert_gap_free_and_ordered(entries: list[dict[str, Any]]) -> None:
    assert [e["catalog_version"] for e in entries] == list(range(1, len(entries) + 1))
    acts = [e["activation_ts"] for e in entries]
    assert all(a < b for a, b in itertools.pairwise(acts)), "activation not increasing"


async def wait_caught_up(c: LocalCluster, name: str, version: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            st = await c.status(name, 1.0)
            if st["catalog_version"] >= version:
                return
        except SchemaSyncError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} did not reach catalog version {version}")
        await asyncio.sleep(0.1)


def test_leader_kill_during_ddl_stream_loses_no_acked_ddl(cluster: LocalCluster) -> None:
    asyncio.run(_leader_kill(cluster))


async def _leader_kill(c: LocalCluster) -> None:
    setup = await c.client("n4")
    await setup.ddl("CREATE TABLE s (a INT32)")
    await setup.close()
    acked: list[tuple[str, dict[str, Any]]] = []
    failures: list[str] = []
    stop = asyncio.Event()
    killed: list[str] = []

    async def stream(node: str, k: int) -> None:
        client = await c.client(node)
        i = 0
        while not stop.is_set():
            stmt = f"ALTER TABLE s ADD COLUMN w{k}_{i} INT32"
            i += 1
            try:
                acked.append((stmt, await client.ddl(stmt)))
            except SchemaSyncError as e:
                assert e.retriable, f"{stmt}: {e}"
                failures.append(e.code)
        await client.close()

    async def killer() -> None:
        while len(acked) < 6:
            await asyncio.sleep(0.02)
        leader = await c.leader()
        c.kill(leader)
        killed.append(leader)
        before = len(acked)
        deadline = time.monotonic() + 30
        while len(acked) < before + 15:
            assert time.monotonic() < deadline, f"stream stalled after killing {leader}"
            await asyncio.sleep(0.05)
        stop.set()

    async with asyncio.timeout(60), asyncio.TaskGroup() as tg:
        # Learners and a follower forward to the leader; one client may sit on the victim.
        tg.create_task(stream("n4", 1))
        tg.create_task(stream("n5", 2))
        tg.create_task(killer())

    old_leader = killed[0]
    new_leader = await c.leader()
    assert new_leader != old_leader
    live = [n for n in c.names if n != old_leader]
    newest = max(r["catalog_version"] for _, r in acked)
    for name in live:
        await wait_caught_up(c, name, newest, 10)
    logs = await catalog_logs(c, live)
    reference = logs[new_leader]
    assert_gap_free_and_ordered(reference)
    for name in live:
        assert logs[name] == reference[: len(logs[name])]
    by_version = {e["catalog_version"]: e for e in reference}
    for stmt, reply in acked:
        entry = by_version[reply["catalog_version"]]
        assert entry["ddl"] == stmt, f"acked {stmt!r} lost: version holds {entry['ddl']!r}"
        assert entry["activation_ts"] == reply["activation_ts"]

    # The killed voter restarts from its own disk and converges.
    c.start(old_leader)
    await wait_caught_up(c, old_leader, len(reference), 20)
    restarted = (await catalog_logs(c, [old_leader]))[old_leader]
    assert restarted[: len(reference)] == reference


def test_stopped_learner_catches_up_by_snapshot(cluster: LocalCluster) -> None:
    asyncio.run(_learner_catch_up(cluster))


async def _learner_catch_up(c: LocalCluster) -> None:
    learner = "n5"
    before = await c.status(learner)
    c.kill(learner)
    setup = await c.client("n1")
    await setup.ddl("CREATE TABLE lag (a INT32)")
    await setup.close()

    async def writer(node: str, k: int, count: int) -> None:
        client = await c.client(node)
        for i in range(count):
            await client.ddl(f"ALTER TABLE lag ADD COLUMN x{k}_{i} INT64")
        await client.close()

    async with asyncio.timeout(60), asyncio.TaskGroup() as tg:
        for k, node in enumerate(["n1", "n2", "n4"]):
            tg.create_task(writer(node, k, 18))  # 54 DDL plus the CREATE, with CAS conflicts

    leader = await c.leader()
    lst = await c.status(leader)
    assert lst["log_base_index"] > before["applied_index"], "log was not compacted past the learner"

    c.start(learner)
    await c.wait_ready([learner], 20)
    await wait_caught_up(c, learner, lst["catalog_version"], 20)
    assert "installed snapshot" in c.log_text(learner)

    logs = await catalog_logs(c, c.names)
    reference = logs[leader]
    assert_gap_free_and_ordered(reference)
    assert len(reference) >= before["catalog_version"] + 55
    for name in c.names:
        assert logs[name] == reference, f"{name} disagrees on the catalog log"

    # Probes at one ts agree everywhere, on the newest version.
    ts = add_ms(reference[-1]["activation_ts"], 1)
    clients: list[Client] = [await c.client(n) for n in c.names]
    answers = [await cl.probe("lag", ts) for cl in clients]
    for cl in clients:
        await cl.close()
    assert {a["catalog_version"] for a in answers} == {reference[-1]["catalog_version"]}
    assert len({repr(a["columns"]) for a in answers}) == 1


async def _lone_restart(c: LocalCluster, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stop the whole cluster, start ``node`` alone (no leader can exist): (status before the
    stop, status after the restart)."""
    client = await c.client("n1")
    await client.ddl("CREATE TABLE lone (a INT32)")
    await client.close()
    await wait_caught_up(c, node, (await c.status("n1"))["catalog_version"], 10)
    before = await c.status(node)
    for name in c.names:
        c.kill(name)
    c.start(node)
    deadline = time.monotonic() + 20
    while True:
        try:
            return before, await c.status(node, 1.0)
        except SchemaSyncError:
            assert time.monotonic() < deadline, "restarted node never answered"
            await asyncio.sleep(0.1)


def test_safe_time_is_recovered_on_restart(cluster: LocalCluster) -> None:
    """Runs last in this module: it stops the cluster."""

    async def go() -> None:
        before, after = await _lone_restart(cluster, "n4")
        assert after["leader"] is None
        assert after["safe_ts"] >= before["safe_ts"] > 0
        assert after["catalog_version"] == before["catalog_version"]
        # Schema use below the recovered safe time needs no leader.
        client = await cluster.client("n4")
        answer = await client.probe("lone", after["safe_ts"])
        await client.close()
        assert answer["catalog_version"] == before["catalog_version"]

    asyncio.run(go())


def test_no_safe_time_recovery_restarts_safe_time_from_zero(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with LocalCluster(
        tmp_path_factory.mktemp("norecovery"),
        base_addr="127.0.2",
        host_offset=20,
        toggles=["no-safe-time-recovery"],
    ) as c:
        before, after = asyncio.run(_lone_restart(c, "n4"))
    assert before["safe_ts"] > 0
    assert after["safe_ts"] == 0
    assert after["catalog_version"] == before["catalog_version"]
