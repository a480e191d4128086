"""Bug toggles `no-op-validation` and `drop-column-compatible`: the broken behaviour shows.

The same scenarios with every toggle off are in test_txn_seed001.py (they abort there).
"""

from __future__ import annotations

import pytest

from schemasync.catalog import Catalog
from schemasync.compat import forward_compatible
from schemasync.localcluster import LocalCluster
from schemasync.txn_client import Transaction, run_txn
from tests.test_txn_support import cluster_fixture, connect, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture(("no-op-validation", "drop-column-compatible"))


def test_no_op_validation_lets_an_op_run_across_an_alter(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE o1 (v INT32)")
        await run_txn(c, [{"op": "w", "table": "o1", "key": 1, "row": {"v": 1}}])
        txn = await Transaction(c).begin()
        assert await txn.get("o1", 1) == {"v": 1}
        await admin.ddl("ALTER TABLE o1 ADD COLUMN w INT32")
        assert await txn.get("o1", 1) == {"v": 1}  # a transborder op: no abort
        value = await txn.commit()
        assert value["tables"]["o1"]["schema_version"] == 1
        assert [op["schema_version"] for op in value["ops"]] == [1, 2]  # the witness
        await c.close()
        await admin.close()

    run(main())


def test_drop_column_compatible_commits_across_a_drop_column(cluster: LocalCluster) -> None:
    async def main() -> None:
        c, admin = await connect(cluster, "n3"), await connect(cluster, "n1")
        await admin.ddl("CREATE TABLE o2 (v INT32, gone INT32)")
        txn = await Transaction(c).begin()
        await txn.put("o2", 1, {"v": 1, "gone": 7})
        await admin.ddl("ALTER TABLE o2 DROP COLUMN gone")
        value = await txn.commit()  # aborts with INCOMPATIBLE_SCHEMA when the toggle is off
        assert value["tables"]["o2"]["schema_version"] == 1
        assert {p["commit_schema_version"] for p in value["participants"]} == {2}
        log = await c.catalog_log()
        cats = [Catalog.from_json(line) for line in log]
        v1 = next(t for cat in cats if (t := cat.table("o2")) and t.schema_version == 1)
        v2 = next(t for cat in cats if (t := cat.table("o2")) and t.schema_version == 2)
        assert not forward_compatible(v1, v2)  # the true rule says no
        read = await c.request("read.table", {"table": "o2", "ts": None})
        assert read["rows"] == [{"key": 1, "row": {"v": 1}}]  # the value 7 was lost
        await c.close()
        await admin.close()

    run(main())
