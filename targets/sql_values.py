"""Values between the history's JSON encoding of the interface types and what a SQL driver
(psycopg, PyMySQL) sends and returns, and a final read's rows in the history's shape (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from schemasync.types import SqlType, TypeInvalid, parse_type

EPOCH = dt.datetime(1970, 1, 1)


def to_db(canonical: str, value: Any) -> Any:
    """A JSON-encoded value of an interface type as the Python value a driver sends."""
    if value is None:
        return None
    name = parse_type(canonical).name
    if name == "VARBINARY":
        return bytes.fromhex(str(value))
    if name == "TIMESTAMP":
        return EPOCH + dt.timedelta(microseconds=int(value))
    if name == "DECIMAL":
        return Decimal(str(value))
    if name in ("FLOAT", "DOUBLE"):
        return float(value)
    return value


def from_db(t: SqlType | None, value: Any) -> Any:
    """What a driver returned, as the history's JSON encoding of the interface type."""
    if value is None:
        return None
    if isinstance(value, memoryview | bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dt.datetime):
        delta = value.replace(tzinfo=None) - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, Decimal):
        if t is not None and t.scale is not None:
            value = value.quantize(Decimal(1).scaleb(-t.scale))
        return format(value, "f")
    if t is not None and t.name == "BOOLEAN":
        return bool(value)  # MariaDB returns a TINYINT
    return value


def sql_type(canonical: str | None) -> SqlType | None:
    """The interface type named, or None when there is none or it does not parse."""
    try:
        return parse_type(canonical) if canonical else None
    except TypeInvalid:
        return None


def table_rows(
    names: Sequence[str], found: Sequence[Sequence[Any]], types: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Rows of `SELECT * ... ORDER BY key` as a final read's `{"key", "row"}` entries."""
    rows = []
    for r in found:
        record = dict(zip(names, r, strict=True))
        key = int(record.pop("key"))
        row = {n: from_db(sql_type(types.get(n)), v) for n, v in record.items()}
        rows.append({"key": key, "row": row})
    return rows
