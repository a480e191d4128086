"""The DDL of docs/interfaces.md as MariaDB statements, each stamped with its catalog version.

Every statement that changes a table also sets the table's COMMENT to `schemachaos:v=<N>`, in
the same ALTER: MariaDB applies one ALTER atomically, so a node holds the marker of version N
exactly when it holds N's change. That is what tells a DDL and its catalog-log entry apart
after a lost connection (catalog_log.py), and what a probe maps a node's schema with.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

from schemasync import ddl as d
from schemasync.catalog import Column, Table
from schemasync.types import TypeInvalid, literal_to_value, parse_type
from targets.galera.server import APP_DB
from targets.sql_values import EPOCH

MARKER_PREFIX = "schemachaos:v="
MARKER_RE = re.compile(r"^schemachaos:v=(\d+)$")


def ident(name: str) -> str:
    """A quoted identifier (backticks): names keep their case; `key` is a reserved word."""
    return "`" + name.replace("`", "``") + "`"


def qualified(table: str) -> str:
    return f"{ident(APP_DB)}.{ident(table)}"


def quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def marker(version: int) -> str:
    return f"{MARKER_PREFIX}{version}"


def marker_version(comment: str | None) -> int | None:
    """The catalog version a table comment names, None if it is not ours."""
    match = MARKER_RE.match(comment or "")
    return int(match.group(1)) if match else None


def maria_type(canonical: str) -> str:
    """The MariaDB type that stores every value of an interface type exactly."""
    t = parse_type(canonical)
    simple = {
        "INT32": "INT",
        "INT64": "BIGINT",
        "FLOAT": "FLOAT",
        "DOUBLE": "DOUBLE",
        "BOOLEAN": "BOOLEAN",
        # microseconds, no time zone: TIMESTAMP would convert through the session's zone
        "TIMESTAMP": "DATETIME(6)",
    }
    if t.name in simple:
        return simple[t.name]
    if t.name == "DECIMAL":
        return f"DECIMAL({t.precision},{t.scale})"
    if t.name == "VARCHAR":
        return f"VARCHAR({t.length})"
    if t.name == "VARBINARY":
        return f"VARBINARY({t.length})"
    raise TypeInvalid(f"no MariaDB type for {canonical!r}")


def micros_text(micros: int) -> str:
    return (EPOCH + dt.timedelta(microseconds=micros)).strftime("%Y-%m-%d %H:%M:%S.%f")


def sql_literal(canonical: str, value: object) -> str:
    """A SQL literal for a JSON-encoded value of an interface type (a column default)."""
    if value is None:
        return "NULL"
    name = parse_type(canonical).name
    if name == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    if name in ("INT32", "INT64"):
        return str(int(str(value)))
    if name in ("FLOAT", "DOUBLE"):
        return repr(float(str(value)))
    if name in ("DECIMAL", "VARCHAR"):
        return quote(str(value))
    if name == "VARBINARY":
        return f"X'{value}'"
    if name == "TIMESTAMP":
        return quote(micros_text(int(str(value))))
    raise TypeInvalid(f"no literal for {canonical!r}")


def column_sql(name: str, canonical: str, nullable: bool, default: object) -> str:
    """A full column definition (MODIFY needs all of it, not just what changes)."""
    text = f"{ident(name)} {maria_type(canonical)}"
    text += " NULL" if nullable else " NOT NULL"
    if default is not None:
        text += f" DEFAULT {sql_literal(canonical, default)}"
    return text


def _def(col: d.ColumnDef) -> str:
    value = (
        None
        if col.default is None
        else literal_to_value(parse_type(col.type), col.default.kind, col.default.text)
    )
    return column_sql(col.name, col.type, not col.not_null, value)


@dataclass(frozen=True)
class DdlSql:
    """A DDL as MariaDB statements: the last one carries the marker (the earlier ones, if any,
    are DML that prepares it); `table` is where the marker ends up (None: the table is gone)."""

    statements: tuple[str, ...]
    table: str | None


def translate_ddl(cmd: d.DdlCommand, version: int, before: Mapping[str, Table]) -> DdlSql:
    """The statements of one parsed DDL at catalog version `version`; `before` is the
    authoritative catalog it applies to (MODIFY restates a column's whole definition)."""
    mark = f"COMMENT={quote(marker(version))}"
    if isinstance(cmd, d.CreateTable):
        cols = ", ".join(["`key` BIGINT NOT NULL PRIMARY KEY", *(_def(c) for c in cmd.columns)])
        stmt = (
            f"CREATE TABLE {qualified(cmd.table)} ({cols}) ENGINE=InnoDB "
            f"DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin {mark}"
        )
        return DdlSql((stmt,), cmd.table)
    if isinstance(cmd, d.DropTable):
        return DdlSql((f"DROP TABLE {qualified(cmd.table)}",), None)
    if isinstance(cmd, d.IndexState):
        raise TypeInvalid("index state changes are internal to schemasync")
    if isinstance(cmd, d.DropIndex):
        owner = next((t for t in before.values() if t.index(cmd.index)), None)
        if owner is None:
            raise TypeInvalid(f"index {cmd.index!r} does not exist")
        stmt = f"ALTER TABLE {qualified(owner.name)} DROP INDEX {ident(cmd.index)}, {mark}"
        return DdlSql((stmt,), owner.name)
    alter = f"ALTER TABLE {qualified(cmd.table)}"
    if isinstance(cmd, d.RenameTable):
        return DdlSql((f"{alter} RENAME TO {qualified(cmd.new_name)}, {mark}",), cmd.new_name)
    if isinstance(cmd, d.CreateIndex):
        cols = ", ".join(ident(c) for c in cmd.columns)
        return DdlSql((f"{alter} ADD INDEX {ident(cmd.index)} ({cols}), {mark}",), cmd.table)
    if isinstance(cmd, d.AddColumn):
        return DdlSql((f"{alter} ADD COLUMN {_def(cmd.column)}, {mark}",), cmd.table)
    if isinstance(cmd, d.DropColumn):
        return DdlSql((f"{alter} DROP COLUMN {ident(cmd.column)}, {mark}",), cmd.table)
    if isinstance(cmd, d.RenameColumn):
        stmt = f"{alter} RENAME COLUMN {ident(cmd.column)} TO {ident(cmd.new_name)}, {mark}"
        return DdlSql((stmt,), cmd.table)
    table = before.get(cmd.table)
    current: Column | None = table.column(cmd.column) if table else None
    if current is None:
        raise TypeInvalid(f"column {cmd.column!r} of {cmd.table!r} does not exist")
    modify = f"{alter} MODIFY COLUMN"
    if isinstance(cmd, d.AlterType):
        col = column_sql(cmd.column, cmd.type, current.nullable, current.default)
        return DdlSql((f"{modify} {col}, {mark}",), cmd.table)
    if isinstance(cmd, d.SetNotNull):
        # The interface fills stored nulls with the default; MariaDB would refuse them.
        fill = (
            f"UPDATE {qualified(cmd.table)} SET {ident(cmd.column)} = "
            f"{sql_literal(current.type, current.default)} WHERE {ident(cmd.column)} IS NULL"
        )
        col = column_sql(cmd.column, current.type, False, current.default)
        stmts = (fill, f"{modify} {col}, {mark}") if current.default is not None else ()
        return DdlSql(stmts or (f"{modify} {col}, {mark}",), cmd.table)
    if isinstance(cmd, d.DropNotNull):
        col = column_sql(cmd.column, current.type, True, current.default)
        return DdlSql((f"{modify} {col}, {mark}",), cmd.table)
    column = f"{alter} ALTER COLUMN {ident(cmd.column)}"
    if isinstance(cmd, d.SetDefault):
        value = literal_to_value(parse_type(current.type), cmd.default.kind, cmd.default.text)
        stmt = f"{column} SET DEFAULT {sql_literal(current.type, value)}, {mark}"
        return DdlSql((stmt,), cmd.table)
    if isinstance(cmd, d.DropDefault):
        return DdlSql((f"{column} DROP DEFAULT, {mark}",), cmd.table)
    raise TypeInvalid(f"unsupported DDL {cmd!r}")
