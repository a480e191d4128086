"""Seed 001's requirements on a real 3-node cluster, plus the client's transparent schema retry."""

from __future__ import annotations

import asyncio

import pytest

from schemasync.localcluster import LocalCluster
from schemasync.txn_client import Transaction, TxnFailed, run_txn, schema_cache
from tests.test_txn_support import cluster_fixture, connect, probe_version, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture()


def test_an_alter_of_an_enlisted_table_fails_the_next_op_and_aborts(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE a1 (v INT32)")
        await run_txn(c, [{"op": "w", "table": "a1", "key": 1, "row": {"v": 1}}])
        txn = await Transaction(c).begin()
        assert await txn.get("a1", 1) == {"v": 1}
        await admin.ddl("ALTER TABLE a1 ADD COLUMN w INT32")
        with pytest.raises(TxnFailed) as failed:
            await txn.get("a1", 1)
        assert failed.value.code == "INCOMPATIBLE_SCHEMA" and failed.value.retriable
        value = failed.value.value
        assert value["tables"]["a1"]["schema_version"] == 1
        assert value["ops"][-1]["schema_version"] == 2  # what the primary found at op_ts
        with pytest.raises(TxnFailed) as again:
            await _commit_again(txn)
        assert again.value.code == "TXN_ABORTED"
        # The abort released the txn's read lock: a writer gets the key at once.
        done = await run_txn(c, [{"op": "w", "table": "a1", "key": 1, "row": {"v": 2}}])
        assert done["commit_ts"] is not None
        await c.close()
        await admin.close()

    run(main())


async def _commit_again(txn: Transaction) -> None:
    txn.done = False
    await txn.commit()


def test_an_alter_of_another_table_does_not_disturb(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n2"), await connect(cluster, "n3")
        await admin.ddl("CREATE TABLE b1 (v INT32)")
        await admin.ddl("CREATE TABLE b2 (v INT32)")
        txn = await Transaction(c).begin()
        assert await txn.get("b1", 5) is None
        await admin.ddl("ALTER TABLE b2 ADD COLUMN w INT32")
        await txn.put("b1", 5, {"v": 5})
        value = await txn.commit()
        assert value["commit_ts"] > value["begin_ts"]
        assert {p["commit_schema_version"] for p in value["participants"]} == {1}
        await c.close()
        await admin.close()

    run(main())


def test_create_table_is_visible_to_a_txn_begun_before_it(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n3"), await connect(cluster, "n1")
        txn = await Transaction(c).begin()
        created = await admin.ddl("CREATE TABLE c1 (v VARCHAR(8))")
        assert created["activation_ts"] > txn.begin_ts  # type: ignore[operator]
        await txn.put("c1", 7, {"v": "new"})
        value = await txn.commit()
        assert value["tables"]["c1"]["schema_version"] == 1
        assert value["tables"]["c1"]["base_ts"] > created["activation_ts"]
        await c.close()
        await admin.close()

    run(main())


def test_an_alter_before_the_first_touch_does_not_abort(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE d1 (v INT32)")
        await admin.ddl("CREATE TABLE d2 (v INT32)")
        await run_txn(c, [{"op": "w", "table": "d2", "key": 1, "row": {"v": 1}}])
        txn = await Transaction(c).begin()
        await txn.put("d1", 1, {"v": 1})
        altered = await admin.ddl("ALTER TABLE d2 ADD COLUMN w INT32 DEFAULT 9")
        assert await txn.get("d2", 1) == {"v": 1, "w": 9}  # read on the new schema, upgraded
        value = await txn.commit()
        assert value["tables"]["d2"]["schema_version"] == 2
        assert value["tables"]["d2"]["base_ts"] > altered["activation_ts"]
        assert value["schema_retries"] == 2  # d1 first seen, d2 stale (v1 -> v2)
        await c.close()
        await admin.close()

    run(main())


def test_commit_across_add_nullable_column_succeeds(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n2"), await connect(cluster, "n3")
        await admin.ddl("CREATE TABLE e1 (v INT32)")
        txn = await Transaction(c).begin()
        await txn.put("e1", 1, {"v": 1})
        await txn.put("e1", 2, {"v": 2})
        await admin.ddl("ALTER TABLE e1 ADD COLUMN w VARCHAR(4)")
        value = await txn.commit()
        assert value["tables"]["e1"]["schema_version"] == 1
        versions = {p["commit_schema_version"] for p in value["participants"]}
        assert versions == {await probe_version(c, "e1", value["commit_ts"])} == {2}
        read = await c.request("read.table", {"table": "e1", "ts": None})
        assert [r["row"] for r in read["rows"]] == [{"v": 1, "w": None}, {"v": 2, "w": None}]
        await c.close()
        await admin.close()

    run(main())


def test_commit_across_drop_column_aborts(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n3"), await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE f1 (v INT32, gone INT32)")
        txn = await Transaction(c).begin()
        await txn.put("f1", 1, {"v": 1, "gone": 1})
        await admin.ddl("ALTER TABLE f1 DROP COLUMN gone")
        with pytest.raises(TxnFailed) as failed:
            await txn.commit()
        assert failed.value.code == "INCOMPATIBLE_SCHEMA"
        assert "drop_column" in failed.value.message
        read = await c.request("read.table", {"table": "f1", "ts": None})
        assert read["rows"] == []
        await c.close()
        await admin.close()

    run(main())


def test_ops_after_drop_table_fail_with_table_dropped(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n3")
        await admin.ddl("CREATE TABLE g1 (v INT32)")
        txn = await Transaction(c).begin()
        await txn.put("g1", 1, {"v": 1})
        await admin.ddl("DROP TABLE g1")
        with pytest.raises(TxnFailed) as failed:
            await txn.put("g1", 2, {"v": 2})
        assert failed.value.code == "TABLE_DROPPED"
        assert failed.value.value["ops"][-1]["schema_version"] is None
        await c.close()
        await admin.close()

    run(main())


def test_a_stale_client_schema_is_retried_transparently(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n2"), await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE h1 (v INT32)")
        first = await run_txn(c, [{"op": "w", "table": "h1", "key": 1, "row": {"v": 1}}])
        assert first["tables"]["h1"]["schema_version"] == 1
        assert schema_cache(c).version_of("h1") == 1
        await admin.ddl("ALTER TABLE h1 ADD COLUMN w INT64")
        # The client still believes in version 1: the node answers SCHEMA_VERSION_MISMATCH
        # with version 2, the library loads it and resends, and the txn succeeds.
        value = await run_txn(
            c,
            [
                {"op": "w", "table": "h1", "key": 2, "row": {"v": 2, "w": 5}},
                {"op": "r", "table": "h1", "key": 1},
            ],
        )
        assert value["schema_retries"] == 1
        assert value["tables"]["h1"]["schema_version"] == 2
        assert value["ops"][1]["result"] == {"v": 1, "w": None}
        assert schema_cache(c).version_of("h1") == 2
        implicit = await run_txn(c, [{"op": "r", "table": "h1", "key": 2}])
        assert implicit["ops"][0]["result"] == {"v": 2, "w": 5}
        assert implicit["schema_retries"] == 0
        await c.close()
        await admin.close()

    run(main())


def test_participants_report_the_version_active_at_commit_ts(cluster: LocalCluster) -> None:
    """The counterpart of `local-schema-at-commit`: commit while a DDL is applied, not active."""

    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE k1 (v INT32)")
        txn = await Transaction(c).begin()
        for key in range(8):
            await txn.put("k1", key, {"v": key})
        before = (await c.status())["catalog_version"]
        ddl = asyncio.create_task(admin.ddl("ALTER TABLE k1 ADD COLUMN w INT32"))
        for node in cluster.names:
            while (await cluster.status(node))["catalog_version"] == before:
                await asyncio.sleep(0.005)
        value = await txn.commit()
        await ddl
        active = await probe_version(c, "k1", value["commit_ts"])
        assert {p["commit_schema_version"] for p in value["participants"]} == {active}
        await c.close()
        await admin.close()

    run(main())
