"""The probe: which catalog version and table schema does this node use at ts.

It waits for metadata completeness first, exactly as every real use of a schema does.
"""

from __future__ import annotations

from typing import Any

from schemasync import errors
from schemasync.catalog import Catalog
from schemasync.deadline import within
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock
from schemasync.schema_sync import SchemaSync


def probe_value(cat: Catalog, table: str | None, ts: int) -> dict[str, Any]:
    """The probe ok value of history.md for ``table`` in catalog ``cat``."""
    t = cat.table(table) if table is not None else None
    return {
        "ts": ts,
        "catalog_version": cat.version,
        "table_schema_version": t.schema_version if t is not None else None,
        "columns": [c.to_json() for c in t.columns] if t is not None else None,
    }


async def handle_probe(
    body: dict[str, Any], clock: HybridClock, schema_sync: SchemaSync, timeout_s: float
) -> dict[str, Any]:
    table = body.get("table")
    ts = body.get("ts")
    if table is not None and not isinstance(table, str):
        raise errors.invalid_request("probe: table must be a string or null")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
        raise errors.invalid_request("probe: ts must be a non-negative HLC integer or null")
    at = clock.now() if ts is None else ts
    try:
        async with within(timeout_s):
            cat = await schema_sync.active_catalog(at)
    except TimeoutError:
        raise SchemaSyncError(
            errors.UNAVAILABLE,
            f"safe time {schema_sync.safe_time.current} did not reach ts {at} - DD "
            f"within {timeout_s:.1f}s",
            True,
        ) from None
    return probe_value(cat, table, at)


def handle_schema_get(body: dict[str, Any], schema_sync: SchemaSync) -> dict[str, Any]:
    """A table's columns at one of its schema versions (the client library's schema cache)."""
    name = body.get("table")
    version = body.get("version")
    if not isinstance(name, str) or not isinstance(version, int):
        raise errors.invalid_request("schema.get needs {table: str, version: int}")
    for cat in reversed(list(schema_sync.catalogs)):
        t = cat.table(name)
        if t is not None and t.schema_version == version:
            return {
                "table": name,
                "schema_version": t.schema_version,
                "columns": [c.to_json() for c in t.columns],
            }
    raise SchemaSyncError(
        errors.TABLE_NOT_FOUND, f"table {name!r} has no schema version {version} here", False
    )
