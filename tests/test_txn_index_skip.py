"""Bug toggle `skip-index-states`: CREATE INDEX is AVAILABLE at once (F1's one-step change), so
an old-schema writer spanning it leaves an orphan entry and a missing one."""

from __future__ import annotations

import asyncio

import pytest

from schemasync.localcluster import LocalCluster
from schemasync.txn_client import Transaction, run_txn
from tests.test_txn_index import index_state, rows_and_entries
from tests.test_txn_support import cluster_fixture, connect, run

pytestmark = pytest.mark.cluster

cluster = cluster_fixture(("skip-index-states",))


def test_an_old_writer_across_a_one_step_index_corrupts_it(cluster: LocalCluster) -> None:
    async def main() -> None:
        admin, c = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE s1 (v INT32, g INT32)")
        await run_txn(c, [{"op": "w", "table": "s1", "key": 1, "row": {"v": 1, "g": 1}}])
        old = await Transaction(c).begin()
        await old.delete("s1", 1)  # on the catalog without the index: no entry change
        await old.put("s1", 2, {"v": 2, "g": 2})
        await admin.ddl("CREATE INDEX s1_g ON s1 (g)")
        assert await index_state(admin, "s1", "s1_g") == "AVAILABLE"
        await old.commit()  # an index change is forward compatible
        await asyncio.sleep(1.0)  # the driver backfills as of the activation
        rows, entries = await rows_and_entries(admin, "s1", "s1_g", "g")
        assert rows == {2: 2}
        assert (1, 1) in entries  # orphan: the row is gone
        assert (2, 2) not in entries  # missing: the row has no entry
        await admin.close()
        await c.close()

    run(main())
