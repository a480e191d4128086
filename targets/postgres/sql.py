"""Names, literals and values between the interface of docs/interfaces.md and PostgreSQL
(pure: no connection), and how psycopg's errors map to the interface's codes."""

from __future__ import annotations

import json
from typing import Any

from schemasync import ddl as d
from schemasync.types import TypeInvalid, literal_to_value, parse_type

PORT = 5432
META = "schemachaos"  # the schema of the bookkeeping tables; user tables live in `public`
SYNC_MODES = ("async", "remote_apply")
CONNECT_TIMEOUT_S = 5
OP_TIMEOUT_S = 60.0
LSN_NOW = (
    "(CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_replay_lsn(), '0/0') "
    "ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint"
)


def ident(name: str) -> str:
    """A quoted identifier: names keep their case, as the interface's grammar says."""
    return '"' + name.replace('"', '""') + '"'


def qualified(table: str) -> str:
    return f"public.{ident(table)}"


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def pg_type(canonical: str) -> str:
    """The PostgreSQL type that stores every value of an interface type exactly."""
    t = parse_type(canonical)
    if t.name == "INT32":
        return "integer"
    if t.name == "INT64":
        return "bigint"
    if t.name == "FLOAT":
        return "real"
    if t.name == "DOUBLE":
        return "double precision"
    if t.name == "DECIMAL":
        return f"numeric({t.precision},{t.scale})"
    if t.name == "VARCHAR":
        return f"varchar({t.length})"
    if t.name == "VARBINARY":
        return "bytea"  # the length lives in the column's metadata comment
    if t.name == "BOOLEAN":
        return "boolean"
    if t.name == "TIMESTAMP":
        return "timestamp"
    raise TypeInvalid(f"no PostgreSQL type for {canonical!r}")


def sql_literal(canonical: str, value: Any) -> str:
    """A SQL expression for a JSON-encoded value of an interface type (a column default)."""
    if value is None:
        return "NULL"
    name = parse_type(canonical).name
    if name == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    if name in ("INT32", "INT64"):
        return str(int(value))
    if name in ("FLOAT", "DOUBLE"):
        return repr(float(value))
    if name == "DECIMAL":
        return f"{quote(str(value))}::numeric"
    if name == "VARCHAR":
        return quote(str(value))
    if name == "VARBINARY":
        return f"{quote(chr(92) + 'x' + str(value))}::bytea"
    if name == "TIMESTAMP":
        return f"(timestamp 'epoch' + interval '1 microsecond' * {int(value)})"
    raise TypeInvalid(f"no literal for {canonical!r}")


def column_meta(canonical: str, default: Any) -> str:
    """The column comment: the interface type (bytea forgets VARBINARY's length) and the
    default as its JSON encoding, written in the DDL's transaction like everything else."""
    return json.dumps({"type": canonical, "default": default}, sort_keys=True)


def default_value(canonical: str, literal: d.Literal | None) -> Any:
    if literal is None:
        return None
    return literal_to_value(parse_type(canonical), literal.kind, literal.text)


def error_code(e: BaseException) -> tuple[str, bool]:
    """(interface error code, retriable) for what psycopg raised."""
    import psycopg.errors as pe

    if isinstance(e, pe.SerializationFailure):
        return "TXN_ABORTED", True
    if isinstance(e, pe.DeadlockDetected | pe.LockNotAvailable):
        return "LOCK_CONFLICT", True
    if isinstance(e, pe.UndefinedTable):
        return "TABLE_NOT_FOUND", False
    if isinstance(e, pe.UndefinedColumn):
        return "SCHEMA_VERSION_MISMATCH", True
    if isinstance(e, pe.QueryCanceled):
        return "TIMEOUT", True
    if isinstance(e, pe.OperationalError | pe.InterfaceError):
        return "UNAVAILABLE", True
    if isinstance(e, pe.IntegrityError | pe.DataError):
        return "INVALID_REQUEST", False
    return "INTERNAL", False
