"""The DDL grammar of docs/interfaces.md: every statement, its kind, and what does not parse."""

from __future__ import annotations

import pytest

from schemasync import ddl as d
from schemasync.ddl import ColumnDef, DdlInvalid, Literal, parse_ddl
from schemasync.errors import DDL_INVALID, SchemaSyncError

HISTORY_KINDS = {
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
}

CASES: list[tuple[str, d.DdlCommand]] = [
    (
        "CREATE TABLE t (c1 INT32, c2 VARCHAR(16) NOT NULL DEFAULT 'x')",
        d.CreateTable(
            "t",
            (
                ColumnDef("c1", "INT32"),
                ColumnDef("c2", "VARCHAR(16)", True, Literal("string", "x")),
            ),
        ),
    ),
    (
        "create table T1(a decimal(10, 2) default -1.5 null, b boolean default true);",
        d.CreateTable(
            "T1",
            (
                ColumnDef("a", "DECIMAL(10,2)", False, Literal("decimal", "-1.5")),
                ColumnDef("b", "BOOLEAN", False, Literal("bool", "TRUE")),
            ),
        ),
    ),
    ("DROP TABLE t", d.DropTable("t")),
    ("ALTER TABLE t RENAME TO t2", d.RenameTable("t", "t2")),
    (
        "ALTER TABLE t ADD COLUMN c TIMESTAMP NOT NULL DEFAULT 5",
        d.AddColumn("t", ColumnDef("c", "TIMESTAMP", True, Literal("int", "5"))),
    ),
    (
        "alter table t add column c varbinary(4) default x'0AfF'",
        d.AddColumn("t", ColumnDef("c", "VARBINARY(4)", False, Literal("hex", "0aff"))),
    ),
    (
        "ALTER TABLE t ADD COLUMN s VARCHAR(8) DEFAULT 'it''s'",
        d.AddColumn("t", ColumnDef("s", "VARCHAR(8)", False, Literal("string", "it's"))),
    ),
    ("ALTER TABLE t DROP COLUMN c", d.DropColumn("t", "c")),
    ("ALTER TABLE t RENAME COLUMN a TO b", d.RenameColumn("t", "a", "b")),
    ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE int64", d.AlterType("t", "c", "INT64")),
    ("ALTER TABLE t ALTER COLUMN c SET NOT NULL", d.SetNotNull("t", "c")),
    ("ALTER TABLE t ALTER COLUMN c DROP NOT NULL", d.DropNotNull("t", "c")),
    (
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1e3",
        d.SetDefault("t", "c", Literal("decimal", "1e3")),
    ),
    (
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT NULL",
        d.SetDefault("t", "c", Literal("null", "NULL")),
    ),
    ("ALTER TABLE t ALTER COLUMN c DROP DEFAULT", d.DropDefault("t", "c")),
    ("CREATE INDEX i ON t (c1, c2)", d.CreateIndex("i", "t", ("c1", "c2"))),
    ("DROP INDEX i", d.DropIndex("i")),
    ("ALTER INDEX i SET STATE building", d.IndexState("i", "BUILDING")),
    ("ALTER INDEX i SET STATE AVAILABLE", d.IndexState("i", "AVAILABLE")),
    ("ALTER INDEX i SET STATE STOPPING", d.IndexState("i", "STOPPING")),
    ("ALTER INDEX i REMOVE", d.IndexState("i", "REMOVED")),
]


@pytest.mark.parametrize(("stmt", "expected"), CASES)
def test_parse(stmt: str, expected: d.DdlCommand) -> None:
    assert parse_ddl(stmt) == expected


def test_kinds_are_the_history_names() -> None:
    kinds = {parse_ddl(stmt).kind for stmt, _ in CASES}
    assert kinds == HISTORY_KINDS | {"index_state"}


def test_table_attribute() -> None:
    assert parse_ddl("ALTER TABLE t1 DROP COLUMN c").table == "t1"
    assert parse_ddl("CREATE INDEX i ON t9 (a)").table == "t9"
    assert parse_ddl("DROP INDEX i").table is None


@pytest.mark.parametrize(
    "stmt",
    [
        "",
        "SELECT 1",
        "CREATE TABLE t ()",
        "CREATE TABLE t (a)",
        "CREATE TABLE t (a INT32",
        "CREATE TABLE t (a FOO)",
        "CREATE TABLE t (a VARCHAR)",
        "CREATE TABLE t (a DECIMAL(2,5))",
        "CREATE TABLE t (a INT32 NOT NULL NULL)",
        "CREATE TABLE t (a INT32 DEFAULT 1 DEFAULT 2)",
        "CREATE TABLE 1t (a INT32)",
        "DROP TABLE",
        "DROP TABLE t extra",
        "ALTER TABLE t RENAME t2",
        "ALTER TABLE t ADD COLUMN c",
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT",
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT nope",
        "ALTER TABLE t ALTER COLUMN c SET",
        "ALTER TABLE t FROB",
        "CREATE INDEX i ON t ()",
        "CREATE INDEX i t (a)",
        "ALTER INDEX i SET STATE REGISTERED",
        "ALTER INDEX i SET STATE",
        "ALTER TABLE t ADD COLUMN c VARBINARY(2) DEFAULT X'abc'",
        "DROP TABLE t; DROP TABLE u",
        "CREATE TABLE t (a INT32) @",
    ],
)
def test_rejects(stmt: str) -> None:
    with pytest.raises(DdlInvalid) as info:
        parse_ddl(stmt)
    assert isinstance(info.value, SchemaSyncError)
    assert info.value.code == DDL_INVALID
    assert info.value.retriable is False
    assert info.value.message


def test_commands_are_frozen_values() -> None:
    cmd = parse_ddl("DROP TABLE t")
    with pytest.raises(AttributeError):
        cmd.table = "u"  # type: ignore[misc]
    assert hash(cmd) == hash(d.DropTable("t"))
