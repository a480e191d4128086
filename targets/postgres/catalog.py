"""The system catalogs, read in one statement, as the interface's table JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from targets.postgres.sql import (
    META,
)

CATALOG_SQL = f"""
SELECT c.relname AS name, c.oid::bigint AS oid, tv.schema_version AS version,
  coalesce((SELECT json_agg(json_build_object(
       'id', a.attnum, 'name', a.attname, 'notnull', a.attnotnull,
       'meta', col_description(c.oid, a.attnum),
       'pgtype', format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum)
     FROM pg_attribute a
     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attname <> 'key'), '[]'::json) AS columns,
  coalesce((SELECT json_agg(json_build_object(
       'id', x.indexrelid::bigint, 'name', i.relname,
       'valid', x.indisvalid AND x.indisready,
       'columns', (SELECT json_agg(a.attname ORDER BY k.ord)
                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum))
       ORDER BY i.relname)
     FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
     WHERE x.indrelid = c.oid AND NOT x.indisprimary), '[]'::json) AS indexes
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN {META}.table_versions tv ON tv.table_name = c.relname
WHERE c.relkind = 'r'
"""
CATALOG_COLUMNS = ("name", "oid", "version", "columns", "indexes")
PG_TYPE_NAMES = {
    "integer": "INT32",
    "bigint": "INT64",
    "real": "FLOAT",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp without time zone": "TIMESTAMP",
    "bytea": "VARBINARY(65535)",
}


def interface_type(pgtype: str, meta: Mapping[str, Any]) -> str:
    """The interface type of a column: its comment's, else what PostgreSQL's type says."""
    if isinstance(meta.get("type"), str):
        return str(meta["type"])
    if pgtype.startswith("numeric("):
        return "DECIMAL" + pgtype.removeprefix("numeric").replace(" ", "")
    if pgtype.startswith("character varying("):
        return "VARCHAR" + pgtype.removeprefix("character varying")
    return PG_TYPE_NAMES.get(pgtype, pgtype.upper())


def table_json(row: Sequence[Any]) -> dict[str, Any]:
    """One row of CATALOG_SQL as a catalog.jsonl table (history.md)."""
    _, oid, version, columns, indexes = row
    cols = []
    for c in columns or []:
        meta = json.loads(c["meta"]) if c.get("meta") else {}
        cols.append(
            {
                "id": int(c["id"]),
                "name": str(c["name"]),
                "type": interface_type(str(c["pgtype"]), meta),
                "nullable": not c["notnull"],
                "default": meta.get("default"),
            }
        )
    idx = [
        {
            "id": int(i["id"]),
            "name": str(i["name"]),
            "columns": list(i["columns"] or []),
            "state": "AVAILABLE" if i["valid"] else "BUILDING",
        }
        for i in indexes or []
    ]
    return {
        "id": int(oid),
        "schema_version": int(version) if version is not None else 1,
        "columns": cols,
        "indexes": idx,
    }
