"""kill -9 of a primary in the middle of a stream of two-partition commits, then restart: every
acknowledged commit is there and no txn is half applied (prepared participants ask the
coordinator's durable decision on recovery)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from schemasync.client import Client, SchemaSyncError
from schemasync.localcluster import LocalCluster
from schemasync.partitioning import partition_of, primary_of
from schemasync.txn_client import Transaction, TxnFailed, run_txn
from tests.test_txn_support import cluster_fixture, connect, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture()


def keys_led_by(table_id: int, node: str, nodes: list[str], partitions: int = 4) -> list[int]:
    return [
        k for k in range(20_000) if primary_of(table_id, partition_of(k, partitions), nodes) == node
    ]


async def read_rows(c: Client, table: str) -> list[dict[str, object]]:
    """A final read, retried while a restarted node's connections are re-established."""
    async with asyncio.timeout(30):
        while True:
            try:
                read = await c.request("read.table", {"table": table, "ts": None})
                rows: list[dict[str, object]] = read["rows"]
                return rows
            except SchemaSyncError:
                await asyncio.sleep(0.2)


@pytest.mark.parametrize("victim", ["n2", "n1"], ids=["primary", "coordinator"])
def test_kill_9_mid_commit_loses_nothing_and_halves_nothing(
    cluster: LocalCluster, victim: str
) -> None:
    """Coordinator n1 runs txns writing one key led by n2 and one led by n3; kill -9 of the
    primary n2 or of the coordinator n1 while commits are in flight."""

    async def main() -> None:
        admin = await connect(cluster, "n3")
        table = f"r_{victim}"
        await admin.ddl(f"CREATE TABLE {table} (v INT32)")
        log = await admin.catalog_log()
        table_id = next(line["tables"][table]["id"] for line in log if table in line["tables"])
        left = keys_led_by(table_id, "n2", cluster.names)
        right = keys_led_by(table_id, "n3", cluster.names)
        counter = itertools.count()
        acked: list[int] = []
        attempted: list[int] = []
        stop = asyncio.Event()

        async def writer() -> None:
            c = await connect(cluster, "n1")
            while not stop.is_set():
                i = next(counter)
                attempted.append(i)
                ops = [
                    {"op": "w", "table": table, "key": left[i], "row": {"v": i}},
                    {"op": "w", "table": table, "key": right[i], "row": {"v": i}},
                ]
                try:
                    await run_txn(c, ops)
                    acked.append(i)
                except TxnFailed:
                    await asyncio.sleep(0.02)
            await c.close()

        async with asyncio.TaskGroup() as tg:
            for _ in range(4):
                tg.create_task(writer())
            await asyncio.sleep(1.5)
            cluster.kill(victim)
            killed_at = len(acked)
            await asyncio.sleep(0.5)
            stop.set()
        assert killed_at > 20
        cluster.start(victim)
        await cluster.wait_ready([victim], 30)
        rows = await read_rows(admin, table)
        present = {r["key"]: r["row"]["v"] for r in rows}  # type: ignore[index]
        for i in acked:
            assert present.get(left[i]) == i and present.get(right[i]) == i, f"lost txn {i}"
        for i in attempted:
            assert (left[i] in present) == (right[i] in present), f"txn {i} half applied"
        await admin.close()

    run(main(), timeout=90)


def test_a_txn_whose_primary_restarted_cannot_commit_half(cluster: LocalCluster) -> None:
    async def main() -> None:
        c = await connect(cluster, "n1")
        await c.ddl("CREATE TABLE r2 (v INT32)")
        log = await c.catalog_log()
        table_id = next(line["tables"]["r2"]["id"] for line in log if "r2" in line["tables"])
        left = keys_led_by(table_id, "n2", cluster.names)
        right = keys_led_by(table_id, "n3", cluster.names)
        for restart_then in ("op", "commit"):
            txn = await Transaction(c).begin()
            await txn.put("r2", left[0], {"v": 1})  # lost with n2's memory
            await txn.put("r2", right[0], {"v": 1})
            cluster.restart("n2")
            await cluster.wait_ready(["n2"], 30)
            other = await connect(cluster, "n3")
            assert (await read_rows(other, "r2")) == []  # nothing applied before the commit
            await other.close()
            await read_rows(c, "r2")  # n1 reconnects to the new n2
            with pytest.raises(TxnFailed) as failed:
                if restart_then == "op":
                    # The new incarnation of n2 would take this op as the txn's first there.
                    await txn.put("r2", left[1], {"v": 1})
                await txn.commit()
            assert failed.value.code == "TXN_ABORTED"
            assert await read_rows(c, "r2") == []
        await c.close()

    run(main(), timeout=90)
