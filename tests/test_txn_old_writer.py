"""Bug toggle `old-writer-no-default` (YugabyteDB #4415, the 2021-04-27 comment), both ways:
a txn that wrote before ADD COLUMN ... NOT NULL DEFAULT 44 and committed after it is stored
under the new version without the column (the read lacks it); with the toggle off the row keeps
the version it was written on and reads back with the default. A row committed before the
ALTER is right either way: the toggle touches only the racing writer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from schemasync.localcluster import LocalCluster
from schemasync.toggles import OLD_WRITER_NO_DEFAULT
from schemasync.txn_client import Transaction, run_txn
from tests.test_txn_support import BASE_ADDR, connect, run

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", params=[(), (OLD_WRITER_NO_DEFAULT,)], ids=["off", "on"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """One 3-node cluster per toggle setting, one after the other (same addresses)."""
    toggles: tuple[str, ...] = request.param
    root = tmp_path_factory.mktemp("old-writer")
    with LocalCluster(root, n=3, voters=3, base_addr=BASE_ADDR, toggles=toggles) as c:
        yield c


def test_a_txn_begun_before_add_column_default_commits_its_row(cluster: LocalCluster) -> None:
    async def main() -> dict[int, Any]:
        c, admin = await connect(cluster, "n1"), await connect(cluster, "n2")
        await admin.ddl("CREATE TABLE y1 (i INT32)")
        await run_txn(c, [{"op": "w", "table": "y1", "key": 1, "row": {"i": 1}}])
        txn = await Transaction(c).begin()
        await txn.put("y1", 7, {"i": 7})
        await admin.ddl("ALTER TABLE y1 ADD COLUMN j INT32 NOT NULL DEFAULT 44")
        value = await txn.commit()  # forward compatible: the commit is allowed
        assert value["tables"]["y1"]["schema_version"] == 1
        read = await c.request("read.table", {"table": "y1", "ts": None})
        assert read["schema_version"] == 2
        await c.close()
        await admin.close()
        return {r["key"]: r["row"] for r in read["rows"]}

    rows = run(main())
    assert rows[1] == {"i": 1, "j": 44}  # committed before the ALTER: upgraded either way
    toggled = OLD_WRITER_NO_DEFAULT in cluster.settings["toggles"]
    assert rows[7] == ({"i": 7} if toggled else {"i": 7, "j": 44})
