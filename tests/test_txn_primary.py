"""The primary's pure pieces: stored rows read on a newer schema, index entry values."""

from __future__ import annotations

from schemasync.catalog import CatalogHistory, next_catalog
from schemasync.ddl import parse_ddl
from schemasync.storage import RowVersion
from schemasync.txn_primary import index_column_ids, index_values, row_for_reader


def history(*stmts: str) -> CatalogHistory:
    h = CatalogHistory()
    for i, stmt in enumerate(stmts, 1):
        h.append(next_catalog(h.latest(), parse_ddl(stmt), stmt, i * 1000, 1))
    return h


def test_a_stored_row_is_upgraded_through_every_compatible_change() -> None:
    h = history(
        "CREATE TABLE t (a INT32 NOT NULL DEFAULT 0, b FLOAT, c VARCHAR(4), d DECIMAL(5,2))",
        "ALTER TABLE t ADD COLUMN e INT32 DEFAULT 7",
        "ALTER TABLE t ALTER COLUMN a SET DATA TYPE INT64",
        "ALTER TABLE t ALTER COLUMN b SET DATA TYPE DOUBLE",
        "ALTER TABLE t ALTER COLUMN c SET DATA TYPE VARCHAR(10)",
        "ALTER TABLE t ALTER COLUMN d SET DATA TYPE DECIMAL(9,2)",
        "ALTER TABLE t RENAME COLUMN c TO cc",
        "ALTER TABLE t ADD COLUMN f BOOLEAN",
        "ALTER TABLE t ALTER COLUMN a DROP NOT NULL",
        "ALTER TABLE t ALTER COLUMN a SET DATA TYPE VARCHAR(20)",
    )
    t1 = h.at_version(2).table("t")
    assert t1 is not None and t1.schema_version == 1
    stored = RowVersion(
        5, 1, {c.id: v for c, v in zip(t1.columns, [1, 1.5, "ab", "1.25"], strict=True)}
    )
    newest = h.latest().table("t")
    assert newest is not None
    row = row_for_reader(h, t1.id, stored, newest)
    assert row == {"a": "1", "b": 1.5, "cc": "ab", "d": "1.25", "e": 7, "f": None}
    assert row_for_reader(h, t1.id, RowVersion(6, 1, None), newest) is None


def test_a_row_newer_than_its_reader_is_projected_by_column_id() -> None:
    h = history("CREATE TABLE t (a INT32)", "ALTER TABLE t ADD COLUMN b INT32 DEFAULT 3")
    old, new = h.at_version(2).table("t"), h.at_version(3).table("t")
    assert old is not None and new is not None
    stored = RowVersion(5, 2, {c.id: 9 for c in new.columns})
    assert row_for_reader(h, old.id, stored, old) == {"a": 9}


def test_index_values_follow_column_ids_across_a_rename() -> None:
    h = history("CREATE TABLE t (a INT32, b INT32)", "CREATE INDEX i ON t (b, a)")
    table = h.latest().table("t")
    assert table is not None
    (index,) = table.indexes
    ids = index_column_ids(table, index)
    a, b = (table.column("a"), table.column("b"))
    assert a is not None and b is not None
    assert index_values({a.id: 1, b.id: 2}, ids) == (2, 1)
    assert index_values({a.id: 1}, ids) == (None, 1)
