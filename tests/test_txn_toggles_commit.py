"""Bug toggles `no-commit-validation` and `local-schema-at-commit`: the broken behaviour shows.

DD is 1 s here so that a commit can land between a DDL's apply and its activation. The cluster
also runs `base_ts = "begin"` (Ignite's simplification), whose behaviour is pinned here too.
"""

from __future__ import annotations

import asyncio

import pytest

from schemasync.localcluster import LocalCluster
from schemasync.txn_client import Transaction, TxnFailed
from tests.test_txn_support import cluster_fixture, connect, probe_version, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture(
    ("no-commit-validation", "local-schema-at-commit"), delay_duration_ms=1000, base_ts="begin"
)


def test_no_commit_validation_commits_across_a_drop_column(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n2"), await connect(cluster, "n3")
        await admin.ddl("CREATE TABLE p1 (v INT32, gone INT32)")
        txn = await Transaction(c).begin()
        await txn.put("p1", 1, {"v": 1, "gone": 1})
        await admin.ddl("ALTER TABLE p1 DROP COLUMN gone")
        value = await txn.commit()
        assert value["tables"]["p1"]["schema_version"] == 1
        assert {p["commit_schema_version"] for p in value["participants"]} == {2}
        await c.close()
        await admin.close()

    run(main())


def test_local_schema_at_commit_reports_a_version_not_active_at_commit_ts(
    cluster: LocalCluster,
) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE p2 (v INT32)")
        txn = await Transaction(c).begin()
        for key in range(8):  # partitions on every node
            await txn.put("p2", key, {"v": key})
        before = (await c.status())["catalog_version"]
        ddl = asyncio.create_task(admin.ddl("ALTER TABLE p2 ADD COLUMN w INT32"))
        # Wait until every node applied the new version, which activates only DD later.
        for node in cluster.names:
            while (await cluster.status(node))["catalog_version"] == before:
                await asyncio.sleep(0.005)
        value = await txn.commit()
        await ddl
        active = await probe_version(c, "p2", value["commit_ts"])
        assert active == 1
        reported = {p["commit_schema_version"] for p in value["participants"]}
        assert reported == {2}  # participants used their newest catalog, not the one at ts
        await c.close()
        await admin.close()

    run(main())


def test_base_ts_begin_aborts_on_an_alter_before_the_first_touch(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n3"), await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE q1 (v INT32)")
        txn = await Transaction(c).begin()
        created = await admin.ddl("CREATE TABLE q2 (v INT32)")
        await admin.ddl("ALTER TABLE q1 ADD COLUMN w INT32")
        # A table created after begin is enlisted at its creation: max(begin_ts, creation).
        await txn.put("q2", 1, {"v": 1})
        assert txn.tables["q2"]["base_ts"] == created["activation_ts"]
        # With base_ts = begin, I of q1 is its version at begin_ts: the first op aborts.
        with pytest.raises(TxnFailed) as failed:
            await txn.put("q1", 1, {"v": 1})
        assert failed.value.code == "INCOMPATIBLE_SCHEMA"
        assert failed.value.value["tables"]["q1"] == {"base_ts": txn.begin_ts, "schema_version": 1}
        await c.close()
        await admin.close()

    run(main())
