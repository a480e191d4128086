"""Index states under writers: an index built while rows are inserted and deleted ends with
exactly one entry per row, and an old-schema writer spanning CREATE INDEX is waited for."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from schemasync.client import Client
from schemasync.localcluster import LocalCluster
from schemasync.txn_client import Transaction, TxnFailed, run_txn
from tests.test_txn_support import cluster_fixture, connect, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture()


async def index_state(c: Client, table: str, index: str) -> str | None:
    latest = (await c.catalog_log())[-1]
    for ix in latest["tables"].get(table, {}).get("indexes", []):
        if ix["name"] == index:
            return str(ix["state"])
    return None


async def wait_state(c: Client, table: str, index: str, state: str, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while await index_state(c, table, index) != state:
            await asyncio.sleep(0.05)


async def rows_and_entries(
    c: Client, table: str, index: str, column: str
) -> tuple[dict[int, Any], list[tuple[int, Any]]]:
    read = await c.request("read.table", {"table": table, "ts": None})
    ix = await c.request("read.index", {"table": table, "index": index, "ts": read["ts"]})
    rows = {r["key"]: r["row"][column] for r in read["rows"]}
    entries = [(e["key"], e["values"][column]) for e in ix["entries"]]
    return rows, entries


def test_an_index_built_under_writers_has_one_entry_per_row(cluster: LocalCluster) -> None:
    async def main() -> None:
        admin = await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE w1 (v INT32, g INT32)")
        loader = await connect(cluster, "n2")
        for key in range(40):
            await run_txn(
                loader, [{"op": "w", "table": "w1", "key": key, "row": {"v": key, "g": key % 5}}]
            )
        stop = asyncio.Event()
        committed = 0

        async def writer(node: str, seed: int) -> None:
            nonlocal committed
            c = await connect(cluster, node)
            rng = random.Random(seed)
            while not stop.is_set():
                ops: list[dict[str, Any]] = []
                for _ in range(2):
                    key = rng.randrange(60)
                    if rng.random() < 0.4:
                        ops.append({"op": "d", "table": "w1", "key": key})
                    else:
                        row = {"v": rng.randrange(100), "g": rng.randrange(5)}
                        ops.append({"op": "w", "table": "w1", "key": key, "row": row})
                try:
                    await run_txn(c, ops)
                    committed += 1
                except TxnFailed:
                    await asyncio.sleep(0.01)
            await c.close()

        # An old-schema writer: began before CREATE INDEX, commits after REGISTERED activated.
        old_client = await connect(cluster, "n3")
        old = await Transaction(old_client).begin()
        await old.put("w1", 1000, {"v": 1, "g": 4})
        await old.delete("w1", 7)
        async with asyncio.TaskGroup() as tg:
            for i, node in enumerate(["n1", "n2", "n3", "n1"]):
                tg.create_task(writer(node, i))
            await asyncio.sleep(0.5)
            await admin.ddl("CREATE INDEX w1_g ON w1 (g)")
            await asyncio.sleep(0.5)
            # The driver may not move on while the old writer runs.
            assert await index_state(admin, "w1", "w1_g") == "REGISTERED"
            await old.commit()
            await wait_state(admin, "w1", "w1_g", "AVAILABLE", 20)
            await asyncio.sleep(0.5)
            stop.set()
        assert committed > 10
        rows, entries = await rows_and_entries(admin, "w1", "w1_g", "g")
        assert 1000 in rows
        assert sorted(entries) == sorted(rows.items())  # exactly one entry per row
        found = await run_txn(admin, [{"op": "ix", "table": "w1", "index": "w1_g", "lookup": 4}])
        assert found["ops"][0]["result"] == sorted(k for k, g in rows.items() if g == 4)
        await admin.ddl("DROP INDEX w1_g")
        async with asyncio.timeout(20):
            while await index_state(admin, "w1", "w1_g") is not None:
                await asyncio.sleep(0.05)
        for c in (admin, loader, old_client):
            await c.close()

    run(main(), timeout=90)


def test_an_old_writer_overwriting_a_maintained_entry_leaves_no_orphan(
    cluster: LocalCluster,
) -> None:
    """A writer that began before CREATE INDEX does not maintain the index; when it overwrites
    a row whose entry a writer that began after REGISTERED added, the backfill must remove that
    entry (found in a baseline chaos run: index-orphan)."""

    async def main() -> None:
        admin = await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE w2 (v INT32)")
        await run_txn(admin, [{"op": "w", "table": "w2", "key": 1, "row": {"v": 1}}])
        old_client = await connect(cluster, "n2")
        old = await Transaction(old_client).begin()  # it maintains no index of w2
        created = await admin.ddl("CREATE INDEX w2_v ON w2 (v)")
        new = await Transaction(admin).begin()
        assert new.begin_ts is not None and new.begin_ts >= created["activation_ts"]
        await new.put("w2", 1, {"v": 2})  # maintains w2_v: adds the entry (2, key 1)
        await new.commit()
        await old.put("w2", 1, {"v": 3})  # does not remove (2, key 1): it is stale now
        await old.commit()
        await wait_state(admin, "w2", "w2_v", "AVAILABLE", 20)
        rows, entries = await rows_and_entries(admin, "w2", "w2_v", "v")
        assert rows == {1: 3}
        assert entries == [(1, 3)]
        for c in (admin, old_client):
            await c.close()

    run(main(), timeout=60)
