"""ddl-outcome (anomalies.md), held to its definition both ways with near misses: the window of
catalog states a DDL could have run against, and what each state allows of its statement.

Written from the spec alone: the histories here are built by hand, one boundary at a time
(tests/test_checker_spec_edges.py judges such DDLs end to end, both readings)."""

from __future__ import annotations

from typing import Any

import pytest

from checker.ddl_outcome import DdlCompletion, candidate_states, judge
from checker.ddl_statement import read_statement
from tests.runbuilder import common_catalog

CATALOG = common_catalog()  # 1 empty, 2 CREATE t1 (c1, c2), 3 +c3, 4 -c3, 5 +i1 on c1


def ddl(
    stmt: str,
    kind: str,
    *,
    type: str = "ok",
    invoke: int,
    done: int,
    version: int | None = None,
    code: str | None = None,
    table: str = "t1",
    index: int = 0,
) -> DdlCompletion:
    return DdlCompletion(
        index=index + 1,
        invoke_index=index,
        type=type,
        time=done,
        invoke_time=invoke,
        node="n1",
        stmt=stmt,
        table=table,
        kind=kind,
        error_code=code,
        catalog_version=version,
    )


def versions(d: DdlCompletion, history: list[DdlCompletion]) -> list[int | None]:
    return [s.version for s in candidate_states(d, history, CATALOG)]


# -- the window ------------------------------------------------------------------------------


def test_without_an_earlier_ack_the_window_starts_at_the_setups_version() -> None:
    add = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=20, version=3)
    drop = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=15, done=40, version=4)
    # the setup's version: the newest older than every acknowledged one (3, 4): 2
    assert versions(add, [add, drop]) == [2, 3, 4, 5]
    assert versions(drop, [add, drop]) == [2, 3, 4, 5]
    # an ack strictly before the invoke moves the start to its version
    late = ddl("CREATE INDEX i9 ON t1 (c2)", "create_index", invoke=30, done=50, index=2)
    assert versions(late, [add, drop, late]) == [3, 4, 5]


def test_an_ack_at_the_invokes_own_time_does_not_move_the_start() -> None:
    add = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=30, version=3)
    other = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=30, done=40, version=4)
    assert versions(other, [add, other])[0] == 2


def test_the_window_ends_before_a_version_whose_ddl_was_invoked_after_the_completion() -> None:
    first = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=20, version=3)
    later = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=21, done=40, version=4)
    assert versions(first, [first, later]) == [2, 3]
    # invoked exactly at the completion: not after it, so its version may have existed
    tied = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=20, done=40, version=4)
    assert versions(first, [first, tied]) == [2, 3, 4, 5]


def test_a_version_acknowledged_twice_is_placed_by_its_first_ddl() -> None:
    """Version 3 acknowledged again by a DDL invoked after `drop` completed: it existed
    before, so it stays in `drop`'s window (the window ends only before versions made later)."""
    add = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=20, version=3)
    drop = ddl("ALTER TABLE t1 DROP COLUMN c2", "drop_column", invoke=25, done=30, index=2)
    again = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=40, done=50, version=3)
    assert versions(drop, [add, drop, again]) == [3, 4, 5]


def test_an_unacknowledged_version_is_placed_by_its_statements_invoke() -> None:
    first = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=20, version=3)
    unknown = ddl(
        "ALTER TABLE t1 DROP COLUMN c3", "drop_column", type="info", invoke=25, done=26, index=2
    )
    assert versions(first, [first, unknown]) == [2, 3]


def test_a_version_an_indeterminate_ddl_made_is_not_the_setups() -> None:
    """Nothing acknowledged, and version 4 made by a DROP of c3 whose outcome is unknown: the
    setup's version is 3 (with c3), so an ADD of c3 refused as invalid is explained."""
    drop = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", type="info", invoke=5, done=30)
    add = ddl(
        "ALTER TABLE t1 ADD COLUMN c3 INT32",
        "add_column",
        type="fail",
        code="DDL_INVALID",
        invoke=10,
        done=20,
        index=2,
    )
    states = candidate_states(add, [drop, add], CATALOG[:4])
    assert [s.version for s in states] == [3, 4]
    assert judge(add, [drop, add], CATALOG[:4]) is None


def test_a_version_an_indeterminate_ddl_made_after_the_completion_is_left_out() -> None:
    """An ADD of c1 succeeds while every version has c1; a DROP of c1 invoked after it
    completed, of unknown outcome, made version 4: version 4 is not in the window, and the
    success is an anomaly (judged end to end: the info DDL reaches the window)."""
    drop_c1 = {
        "catalog_version": 4,
        "activation_ts": 4,
        "ddl": "ALTER TABLE t1 DROP COLUMN c1",
        "tables": {
            "t1": {
                **CATALOG[2]["tables"]["t1"],
                "columns": CATALOG[2]["tables"]["t1"]["columns"][1:],
            }
        },
    }
    catalog = [*CATALOG[:3], drop_c1]
    add = ddl("ALTER TABLE t1 ADD COLUMN c1 INT32", "add_column", invoke=10, done=20, version=5)
    drop = ddl(
        "ALTER TABLE t1 DROP COLUMN c1", "drop_column", type="info", invoke=25, done=30, index=2
    )
    assert [s.version for s in candidate_states(add, [add, drop], catalog)] == [3]
    found = judge(add, [add, drop], catalog)
    assert found is not None and "column c1 exists in t1" in found
    assert judge(drop, [add, drop], catalog) is None  # an info DDL is never judged


def test_a_catalog_that_starts_at_an_acknowledged_version_starts_from_the_empty_catalog() -> None:
    create = ddl("CREATE TABLE t1 (c1 INT32)", "create_table", invoke=10, done=20, version=2)
    lines = [c for c in CATALOG if c["catalog_version"] >= 2]
    states = candidate_states(create, [create], lines)
    assert [s.version for s in states] == [None, 2, 3, 4, 5]
    assert judge(create, [create], lines) is None  # the empty catalog allowed it


# -- successes -------------------------------------------------------------------------------

SUCCESS_CASES = [
    # (statement, kind, table, anomaly?) judged over versions 4..5 (an ack of v4 came first)
    ("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", "t1", False),
    ("ALTER TABLE t1 ADD COLUMN c1 INT32", "add_column", "t1", True),
    ("ALTER TABLE t1 ADD COLUMN C1 INT32", "add_column", "t1", True),  # unquoted: folded
    ('ALTER TABLE t1 ADD COLUMN "C1" INT32', "add_column", "t1", False),  # quoted: exact
    ("ALTER TABLE t1 ADD COLUMN IF NOT EXISTS c1 INT32", "add_column", "t1", False),
    ("ALTER TABLE t1 DROP COLUMN c2", "drop_column", "t1", False),
    ("ALTER TABLE t1 DROP COLUMN c3", "drop_column", "t1", True),
    ("ALTER TABLE t1 RENAME COLUMN c2 TO c9", "rename_column", "t1", False),
    ("ALTER TABLE t1 RENAME COLUMN c2 TO c1", "rename_column", "t1", True),
    ("ALTER TABLE t1 ALTER COLUMN c3 SET NOT NULL", "set_not_null", "t1", True),
    ("ALTER TABLE t1 ALTER COLUMN c1 SET DATA TYPE INT64", "alter_type", "t1", False),
    ("ALTER TABLE t2 ADD COLUMN c3 INT32", "add_column", "t2", True),
    ("CREATE TABLE t1 (c1 INT32)", "create_table", "t1", True),
    ("CREATE TABLE t2 (c1 INT32)", "create_table", "t2", False),
    ("CREATE TABLE IF NOT EXISTS t1 (c1 INT32)", "create_table", "t1", False),
    ("DROP TABLE t1", "drop_table", "t1", False),
    ("DROP TABLE t2", "drop_table", "t2", True),
    ("DROP TABLE IF EXISTS t2", "drop_table", "t2", False),
    ("ALTER TABLE t1 RENAME TO t2", "rename_table", "t1", False),
    ("ALTER TABLE t2 RENAME TO t3", "rename_table", "t2", True),
    ("CREATE INDEX i9 ON t1 (c2)", "create_index", "t1", False),
    ("CREATE INDEX i1 ON t1 (c2)", "create_index", "t1", False),  # no i1 at version 4
    ("CREATE INDEX i9 ON t1 (c3)", "create_index", "t1", True),
    ("DROP INDEX i1", "drop_index", "t1", False),
    ("DROP INDEX i9", "drop_index", "t1", True),
    ("DROP INDEX IF EXISTS i9", "drop_index", "t1", False),
    # a statement this reader does not follow is judged by its table alone
    ("ALTER TABLE t1 ADD CONSTRAINT k CHECK (c1 > 0)", "add_column", "t1", False),
]


@pytest.mark.parametrize(("stmt", "kind", "table", "anomaly"), SUCCESS_CASES)
def test_a_success_is_an_anomaly_only_when_no_state_allows_it(
    stmt: str, kind: str, table: str, anomaly: bool
) -> None:
    setup = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=1, done=2, version=4)
    d = ddl(stmt, kind, invoke=10, done=20, version=6, table=table, index=2)
    found = judge(d, [setup, d], CATALOG)
    assert (found is not None) == anomaly, found


def test_one_allowing_state_in_the_window_explains_a_success() -> None:
    """ADD COLUMN c3 is refused by version 3 alone: a window 2..3 still has version 2."""
    add = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=10, done=20, version=3)
    again = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=5, done=25, index=2)
    assert judge(again, [add, again], CATALOG[:3]) is None
    # acknowledged before the second one's invoke: only version 3 remains, which has c3
    late = ddl("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", invoke=21, done=25, index=2)
    found = judge(late, [add, late], CATALOG[:3])
    assert found is not None and "column c3 exists in t1" in found and "version 3" in found


# -- failures --------------------------------------------------------------------------------

FAILURE_CASES = [
    # (statement, kind, table, code, anomaly?) over versions 4..5
    ("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", "t1", "TABLE_NOT_FOUND", True),
    ("ALTER TABLE t2 ADD COLUMN c3 INT32", "add_column", "t2", "TABLE_NOT_FOUND", False),
    ("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", "t1", "DDL_INVALID", True),
    ("ALTER TABLE t1 ADD COLUMN c1 INT32", "add_column", "t1", "DDL_INVALID", False),
    ("ALTER TABLE t1 ADD COLUMN c3 NOSUCHTYPE", "add_column", "t1", "DDL_INVALID", False),
    ("ALTER TABLE t1 ADD COLUMN c3 INT32 NOT NULL", "add_column", "t1", "DDL_INVALID", False),
    (
        "ALTER TABLE t1 ADD COLUMN c3 INT32 NOT NULL DEFAULT 4",
        "add_column",
        "t1",
        "DDL_INVALID",
        True,
    ),
    ("ALTER TABLE t1 DROP COLUMN c2", "drop_column", "t1", "DDL_INVALID", False),  # i2 at 5
    ("ALTER TABLE t1 DROP COLUMN c1", "drop_column", "t1", "DDL_INVALID", False),  # indexed
    ("ALTER TABLE t1 DROP COLUMN c3", "drop_column", "t1", "DDL_INVALID", False),
    ("ALTER TABLE t1 ALTER COLUMN c1 SET NOT NULL", "set_not_null", "t1", "DDL_INVALID", False),
    ("ALTER TABLE t1 RENAME COLUMN c2 TO c9", "rename_column", "t1", "DDL_INVALID", True),
    ("DROP TABLE t1", "drop_table", "t1", "DDL_INVALID", True),
    ("DROP TABLE t1", "drop_table", "t1", "TABLE_NOT_FOUND", True),
    ("CREATE TABLE t2 (c1 INT32)", "create_table", "t2", "DDL_INVALID", False),
    ("CREATE INDEX i9 ON t1 (c2)", "create_index", "t1", "DDL_INVALID", True),
    ("DROP INDEX i1", "drop_index", "t1", "DDL_INVALID", False),  # no i1 at version 4
    ("DROP INDEX i9", "drop_index", "t1", "DDL_INVALID", False),
    ("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", "t1", "TIMEOUT", False),
    ("ALTER TABLE t1 ADD COLUMN c3 INT32", "add_column", "t1", "UNAVAILABLE", False),
]


@pytest.mark.parametrize(("stmt", "kind", "table", "code", "anomaly"), FAILURE_CASES)
def test_an_error_is_an_anomaly_only_when_every_state_rules_it_out(
    stmt: str, kind: str, table: str, code: str, anomaly: bool
) -> None:
    setup = ddl("ALTER TABLE t1 DROP COLUMN c3", "drop_column", invoke=1, done=2, version=4)
    d = ddl(stmt, kind, type="fail", invoke=10, done=20, code=code, table=table, index=2)
    found = judge(d, [setup, d], CATALOG)
    assert (found is not None) == anomaly, found


def test_index_statements_over_version_five_alone() -> None:
    """After an ack of version 5 (i1 AVAILABLE): creating i1 again cannot succeed, and dropping
    it cannot be invalid; dropping c2 (indexed by i2) still may be refused."""
    setup = ddl("CREATE INDEX i1 ON t1 (c1)", "create_index", invoke=1, done=2, version=5)

    def judged(stmt: str, kind: str, **kw: Any) -> str | None:
        d = ddl(stmt, kind, invoke=10, done=20, index=2, **kw)
        return judge(d, [setup, d], CATALOG)

    assert judged("CREATE INDEX i1 ON t1 (c2)", "create_index", version=6) is not None
    assert judged("DROP INDEX i1", "drop_index", type="fail", code="DDL_INVALID") is not None
    assert judged("DROP INDEX i2", "drop_index", type="fail", code="DDL_INVALID") is not None
    stmt = "ALTER TABLE t1 DROP COLUMN c2"
    assert judged(stmt, "drop_column", type="fail", code="DDL_INVALID") is None


def test_a_table_that_exists_in_only_some_states_explains_table_not_found() -> None:
    """t1 is created at version 2: a window 1..5 has version 1 without it."""
    d = ddl(
        "ALTER TABLE t1 ADD COLUMN c3 INT32",
        "add_column",
        type="fail",
        invoke=10,
        done=20,
        code="TABLE_NOT_FOUND",
    )
    assert versions(d, [d])[0] == 5  # nothing acknowledged: the newest, the setup's
    early = [c for c in CATALOG if c["catalog_version"] <= 2]
    later = ddl("CREATE TABLE t1 (c1 INT32)", "create_table", invoke=30, done=40, version=2)
    assert judge(d, [d, later], early) is None  # window: version 1, no t1
    assert judge(d, [d], early) is not None  # window: version 2 alone, t1 there


def test_an_indeterminate_ddl_is_never_judged() -> None:
    d = ddl("ALTER TABLE t9 DROP COLUMN c9", "drop_column", type="info", invoke=10, done=20)
    assert judge(d, [d], CATALOG) is None


def test_statements_are_read_as_sql_spells_them() -> None:
    s = read_statement("rename_column", 'alter table t1 rename column "c 2" to c9;')
    assert s is not None and s.column == '"c 2"' and s.new_name == "c9"
    s = read_statement("create_index", "CREATE UNIQUE INDEX IF NOT EXISTS i2 ON t1 (c1, c2)")
    assert s is not None and s.guarded and s.index_columns == ("c1", "c2")
    assert read_statement("vacuum", "VACUUM") is None
