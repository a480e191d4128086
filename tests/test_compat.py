"""Forward compatibility I -> C for every change of system.md's list, step by step; backward
compatibility is always refused. Table-driven: each row is a DDL and the judgment it must get."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from schemasync import compat
from schemasync.catalog import Catalog, CatalogHistory, Table, next_catalog
from schemasync.ddl import parse_ddl

BASE = (
    "CREATE TABLE t (a INT32, b VARCHAR(4) DEFAULT 'x', c DECIMAL(5,2) NOT NULL DEFAULT 1,"
    " f FLOAT, n INT64 NOT NULL DEFAULT 0, bin VARBINARY(2), flag BOOLEAN)"
)
SETUP = (BASE, "CREATE TABLE other (o INT32)", "CREATE INDEX ia ON t (a)")


def history(*stmts: str, toggles: frozenset[str] = frozenset()) -> CatalogHistory:
    h = CatalogHistory()
    for stmt in stmts:
        cat = h.latest()
        h.append(next_catalog(cat, parse_ddl(stmt), stmt, cat.safe_ts + (5 << 16), 500, toggles))
    return h


def t_id(h: CatalogHistory) -> int:
    table = h.at_version(len(SETUP) + 1).table("t")
    assert table is not None
    return table.id


# (ddl applied after SETUP, forward compatible for a txn on table t)
CHANGES: list[tuple[str, bool]] = [
    # compatible
    ("ALTER TABLE t ADD COLUMN z INT32", True),
    ("ALTER TABLE t ADD COLUMN z VARCHAR(3) DEFAULT 'q'", True),
    ("ALTER TABLE t ADD COLUMN z INT64 NOT NULL DEFAULT 7", True),
    ("ALTER TABLE t ALTER COLUMN c DROP NOT NULL", True),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE INT64", True),
    ("ALTER TABLE t ALTER COLUMN f SET DATA TYPE DOUBLE", True),
    ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE DECIMAL(9,2)", True),
    ("ALTER TABLE t ALTER COLUMN b SET DATA TYPE VARCHAR(40)", True),
    ("ALTER TABLE t ALTER COLUMN bin SET DATA TYPE VARBINARY(9)", True),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE VARCHAR(11)", True),
    ("ALTER TABLE t ALTER COLUMN flag SET DATA TYPE VARCHAR(5)", True),
    ("ALTER TABLE t RENAME COLUMN a TO a2", True),  # rename_column_compatible (default)
    ("CREATE INDEX ib ON t (b)", True),
    ("DROP INDEX ia", True),  # REGISTERED: removed at once
    ("ALTER INDEX ia SET STATE BUILDING", True),
    ("CREATE TABLE u (x INT32)", True),
    ("ALTER TABLE other ADD COLUMN p INT32", True),
    ("DROP TABLE other", True),
    ("ALTER TABLE other RENAME TO other2", True),
    # incompatible
    ("DROP TABLE t", False),
    ("ALTER TABLE t RENAME TO t2", False),
    ("ALTER TABLE t DROP COLUMN b", False),
    ("ALTER TABLE t ALTER COLUMN b SET DEFAULT 'y'", False),
    ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 3", False),
    ("ALTER TABLE t ALTER COLUMN b DROP DEFAULT", False),
    ("ALTER TABLE t ALTER COLUMN b SET NOT NULL", False),
]


@pytest.mark.parametrize(("stmt", "expected"), CHANGES)
def test_each_change(stmt: str, expected: bool) -> None:
    h = history(*SETUP, stmt)
    tid = t_id(h)
    before, after = h.at_version(len(SETUP) + 1), h.latest()
    versions = [before, after]
    assert compat.step_compatible(versions, tid) is expected
    old = before.table_by_id(tid)
    assert old is not None
    new = after.table_by_id(tid)
    assert compat.forward_compatible(old, new, True) is expected
    # backward: every change to t is incompatible; no change to t is no change at all
    changed_t = new != old
    assert compat.backward_compatible(old, new) is (not changed_t)
    # the JSON helper agrees (with and without the extra `name` field)
    old_json = before.to_json()["tables"]["t"]
    new_json = next(
        (tj for tj in after.to_json()["tables"].values() if tj["id"] == tid),
        None,
    )
    assert compat.forward_compatible_json(old_json, new_json, True) is expected
    bare_old = {k: v for k, v in old_json.items() if k != "name"}
    bare_new = None if new_json is None else {k: v for k, v in new_json.items() if k != "name"}
    new_name = None if new is None else new.name
    assert compat.forward_compatible_json(bare_old, bare_new, True, (), "t", new_name) is expected
    lines = [before.to_json(), after.to_json()]
    assert compat.step_compatible_json(lines, tid) is expected


def test_change_kinds_found_by_diff() -> None:
    """Each DDL on t is exactly one simple change of its own kind; a DDL elsewhere is none."""
    for stmt, _ in CHANGES:
        h = history(*SETUP, stmt)
        tid = t_id(h)
        old = h.at_version(len(SETUP) + 1).table_by_id(tid)
        assert old is not None
        found = [c.kind for c in compat.diff_tables(old, h.latest().table_by_id(tid))]
        cmd = parse_ddl(stmt)
        on_t = cmd.table == "t" or cmd.kind in ("drop_index", "index_state")  # ia is on t
        assert found == ([cmd.kind] if on_t else []), stmt


def test_rename_column_follows_the_flag() -> None:
    h = history(*SETUP, "ALTER TABLE t RENAME COLUMN a TO a2")
    versions = [h.at_version(len(SETUP) + 1), h.latest()]
    assert compat.step_compatible(versions, t_id(h), rename_compatible=True)
    assert not compat.step_compatible(versions, t_id(h), rename_compatible=False)


def test_drop_column_compatible_toggle() -> None:
    h = history(*SETUP, "ALTER TABLE t DROP COLUMN b")
    versions = [h.at_version(len(SETUP) + 1), h.latest()]
    assert not compat.step_compatible(versions, t_id(h))
    toggles = frozenset({"drop-column-compatible"})
    assert compat.step_compatible(versions, t_id(h), True, toggles)
    # the toggle does not excuse a dropped table
    h2 = history(*SETUP, "DROP TABLE t")
    assert not compat.step_compatible([h2.at_version(4), h2.latest()], t_id(h2), True, toggles)


def test_changes_that_ddl_never_produces_are_still_judged() -> None:
    """A foreign catalog.jsonl may hold them: narrowing or other type changes, a NOT NULL column
    added without default."""
    h = history(*SETUP)
    old = h.latest().table("t")
    assert old is not None

    def with_col(name: str, **changes: Any) -> Table:
        return replace(
            old,
            columns=tuple(replace(c, **changes) if c.name == name else c for c in old.columns),
        )

    assert not compat.forward_compatible(old, with_col("n", type="INT32"), True)
    assert not compat.forward_compatible(old, with_col("a", type="DOUBLE"), True)
    assert not compat.forward_compatible(old, with_col("a", type="NOPE"), True)
    assert not compat.forward_compatible(old, with_col("c", type="DECIMAL(6,3)"), True)
    new_col = replace(old.columns[0], id=99, name="z", nullable=False, default=None)
    assert not compat.forward_compatible(old, replace(old, columns=(*old.columns, new_col)), True)
    assert compat.forward_compatible(old, old, True)


def test_compound_change_is_judged_as_its_steps() -> None:
    """Between I and C: every step compatible => compatible; one incompatible step anywhere =>
    incompatible, even when the end state looks harmless."""
    ok = history(
        *SETUP,
        "ALTER TABLE t ADD COLUMN z INT32",
        "ALTER TABLE t ALTER COLUMN a SET DATA TYPE INT64",
        "CREATE TABLE u (x INT32)",
        "ALTER TABLE t RENAME COLUMN z TO z2",
    )
    tid = t_id(ok)
    versions = [ok.at_version(v) for v in range(len(SETUP) + 1, len(ok) + 1)]
    assert compat.step_compatible(versions, tid)
    assert compat.first_incompatible(versions, tid) is None
    # the direct diff of I and C is the same simple changes, all compatible
    old, new = versions[0].table_by_id(tid), versions[-1].table_by_id(tid)
    assert old is not None
    assert {c.kind for c in compat.diff_tables(old, new)} == {"add_column", "alter_type"}

    # DROP NOT NULL then SET NOT NULL: I and C look the same, the second step is incompatible
    bad = history(
        *SETUP,
        "ALTER TABLE t ALTER COLUMN c DROP NOT NULL",
        "ALTER TABLE t ALTER COLUMN c SET NOT NULL",
    )
    versions = [bad.at_version(v) for v in range(len(SETUP) + 1, len(bad) + 1)]
    assert versions[0].table_by_id(tid) is not None
    i_cols = versions[0].table_by_id(tid).columns  # type: ignore[union-attr]
    c_cols = versions[-1].table_by_id(tid).columns  # type: ignore[union-attr]
    assert i_cols == c_cols
    assert not compat.step_compatible(versions, tid)
    found = compat.first_incompatible(versions, tid)
    assert found is not None and found[0] == versions[-1].version
    assert found[1].kind == "set_not_null"

    # drop a column and re-add one with the same name: a drop (by id), so incompatible
    readd = history(*SETUP, "ALTER TABLE t DROP COLUMN b", "ALTER TABLE t ADD COLUMN b INT32")
    versions = [readd.at_version(len(SETUP) + 1), readd.latest()]  # not consecutive: one diff
    kinds = [c.kind for c in compat.diff_tables(versions[0].table("t"), versions[1].table("t"))]  # type: ignore[arg-type]
    assert kinds == ["drop_column", "add_column"]
    assert not compat.step_compatible(versions, tid)

    # drop the table and create another of the same name: by id, the txn's table is gone
    recreate = history(*SETUP, "DROP TABLE t", BASE)
    versions = [recreate.at_version(v) for v in range(len(SETUP) + 1, len(recreate) + 1)]
    assert not compat.step_compatible(versions, tid)


def test_step_compatible_on_a_history_window() -> None:
    h = history(*SETUP, "ALTER TABLE t ADD COLUMN z INT32", "ALTER TABLE t DROP COLUMN z")
    tid = t_id(h)
    start = h.at_version(len(SETUP) + 1).activation_ts
    mid = h.at_version(len(SETUP) + 2).activation_ts
    end = h.latest().activation_ts
    assert compat.step_compatible(h.versions_between(start, mid + 1), tid)
    assert not compat.step_compatible(h.versions_between(start, end), tid)
    assert compat.step_compatible(h.versions_between(end, end + 100), tid)
    assert compat.step_compatible([h.latest()], tid)
    missing: list[Catalog] = [Catalog.empty(), h.latest()]
    assert not compat.step_compatible(missing, tid)


def test_every_kind_of_the_list_is_covered() -> None:
    kinds = {parse_ddl(stmt).kind for stmt, _ in CHANGES}
    assert kinds >= {
        "create_table",
        "drop_table",
        "rename_table",
        "add_column",
        "drop_column",
        "rename_column",
        "alter_type",
        "set_not_null",
        "drop_not_null",
        "set_default",
        "drop_default",
        "create_index",
        "drop_index",
        "index_state",
    }
