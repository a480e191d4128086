"""The DDL of docs/interfaces.md as PostgreSQL SQL (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemasync import ddl as d
from schemasync.types import TypeInvalid
from targets.postgres.sql import (
    column_meta,
    default_value,
    ident,
    pg_type,
    qualified,
    quote,
    sql_literal,
)


@dataclass(frozen=True)
class DdlPlanSql:
    """A DDL as SQL: the statements, the table whose version it bumps (None: none yet), and
    what happens to `table_versions` (bump, create, drop, rename)."""

    statements: tuple[str, ...]
    table: str | None
    version_change: str
    new_name: str | None = None


def _column_sql(col: d.ColumnDef) -> str:
    text = f"{ident(col.name)} {pg_type(col.type)}"
    if col.not_null:
        text += " NOT NULL"
    value = default_value(col.type, col.default)
    if value is not None:
        text += f" DEFAULT {sql_literal(col.type, value)}"
    return text


def _comment(table: str, column: str, canonical: str, default: Any) -> str:
    meta = quote(column_meta(canonical, default))
    return f"COMMENT ON COLUMN {qualified(table)}.{ident(column)} IS {meta}"


def translate_ddl(
    cmd: d.DdlCommand, current: Mapping[str, Any] | None, index_table: str | None = None
) -> DdlPlanSql:
    """The SQL of one parsed DDL. `current` is the column's metadata (type, default) where the
    statement changes it; `index_table` is DROP INDEX's table, looked up by the caller."""
    if isinstance(cmd, d.CreateTable):
        cols = ", ".join(_column_sql(c) for c in cmd.columns)
        create_stmts = [f"CREATE TABLE {qualified(cmd.table)} (key bigint PRIMARY KEY, {cols})"]
        create_stmts += [
            _comment(cmd.table, c.name, c.type, default_value(c.type, c.default))
            for c in cmd.columns
        ]
        return DdlPlanSql(tuple(create_stmts), cmd.table, "create")
    if isinstance(cmd, d.DropTable):
        return DdlPlanSql((f"DROP TABLE {qualified(cmd.table)}",), cmd.table, "drop")
    if isinstance(cmd, d.RenameTable):
        stmt = f"ALTER TABLE {qualified(cmd.table)} RENAME TO {ident(cmd.new_name)}"
        return DdlPlanSql((stmt,), cmd.table, "rename", cmd.new_name)
    if isinstance(cmd, d.CreateIndex):
        cols = ", ".join(ident(c) for c in cmd.columns)
        stmt = f"CREATE INDEX {ident(cmd.index)} ON {qualified(cmd.table)} ({cols})"
        return DdlPlanSql((stmt,), cmd.table, "bump")
    if isinstance(cmd, d.DropIndex):
        return DdlPlanSql((f"DROP INDEX public.{ident(cmd.index)}",), index_table, "bump")
    if isinstance(cmd, d.IndexState):
        raise TypeInvalid("index state changes are internal to schemasync")
    alter = f"ALTER TABLE {qualified(cmd.table)}"
    if isinstance(cmd, d.AddColumn):
        col = cmd.column
        stmts = (
            f"{alter} ADD COLUMN {_column_sql(col)}",
            _comment(cmd.table, col.name, col.type, default_value(col.type, col.default)),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.DropColumn):
        return DdlPlanSql((f"{alter} DROP COLUMN {ident(cmd.column)}",), cmd.table, "bump")
    if isinstance(cmd, d.RenameColumn):
        stmt = f"{alter} RENAME COLUMN {ident(cmd.column)} TO {ident(cmd.new_name)}"
        return DdlPlanSql((stmt,), cmd.table, "bump")
    if current is None:
        raise TypeInvalid(f"column {cmd.column!r} of {cmd.table!r} does not exist")
    col_type, default = str(current["type"]), current.get("default")
    column = f"ALTER COLUMN {ident(cmd.column)}"
    if isinstance(cmd, d.AlterType):
        new_pg = pg_type(cmd.type)
        stmts = (
            f"{alter} {column} TYPE {new_pg} USING {ident(cmd.column)}::{new_pg}",
            _comment(cmd.table, cmd.column, cmd.type, default),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.SetNotNull):
        # The interface fills stored nulls with the default; PostgreSQL would refuse them.
        # The table lock comes first, or a write could slip a null in between fill and check.
        lock = f"LOCK TABLE {qualified(cmd.table)} IN ACCESS EXCLUSIVE MODE"
        fill = (
            f"UPDATE {qualified(cmd.table)} SET {ident(cmd.column)} = DEFAULT "
            f"WHERE {ident(cmd.column)} IS NULL"
        )
        return DdlPlanSql((lock, fill, f"{alter} {column} SET NOT NULL"), cmd.table, "bump")
    if isinstance(cmd, d.DropNotNull):
        return DdlPlanSql((f"{alter} {column} DROP NOT NULL",), cmd.table, "bump")
    if isinstance(cmd, d.SetDefault):
        value = default_value(col_type, cmd.default)
        stmts = (
            f"{alter} {column} SET DEFAULT {sql_literal(col_type, value)}",
            _comment(cmd.table, cmd.column, col_type, value),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.DropDefault):
        stmts = (
            f"{alter} {column} DROP DEFAULT",
            _comment(cmd.table, cmd.column, col_type, None),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    raise TypeInvalid(f"unsupported DDL {cmd!r}")


# -- values between the history's JSON and psycopg (pure) ------------------------------------
