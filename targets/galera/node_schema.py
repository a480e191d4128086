"""What one Galera node holds of the schema: its tables' catalog markers (the version each
DDL wrote into the table comment), its columns, and the write-set seqno it has applied."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from schemasync.catalog import Table
from targets.galera.catalog_log import CatalogState
from targets.galera.ddl import marker_version
from targets.galera.server import APP_DB

LAST_COMMITTED = (
    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
    "WHERE VARIABLE_NAME = 'WSREP_LAST_COMMITTED'"
)
STATUS_SQL = (
    "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
    "WHERE VARIABLE_NAME IN ('WSREP_LAST_COMMITTED', 'WSREP_CLUSTER_STATUS', "
    "'WSREP_LOCAL_STATE_COMMENT')"
)
TABLES_SQL = (
    "SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
)
COLUMNS_SQL = (
    "SELECT COLUMN_NAME, IS_NULLABLE FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
)


@dataclasses.dataclass(frozen=True)
class View:
    """A table as this node has it: the version its marker names, the columns present."""

    name: str
    version: int  # the catalog version of the marker
    schema_version: int
    types: Mapping[str, str]  # column -> interface type, for the columns present
    indexes: Mapping[str, tuple[str, ...]]


def last_committed(cur: Any) -> int:
    cur.execute(LAST_COMMITTED)
    row = cur.fetchone()
    return int(row[0]) if row else 0


def table_markers(cur: Any) -> dict[str, int]:
    cur.execute(TABLES_SQL, (APP_DB,))
    out = {}
    for name, comment in cur.fetchall():
        version = marker_version(comment)
        out[str(name)] = version if version is not None else 0
    return out


def marker(cur: Any, table: str) -> int | None:
    """The table's marker version on this node (0: not ours), None if it is absent."""
    cur.execute(
        "SELECT TABLE_COMMENT FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (APP_DB, table),
    )
    row = cur.fetchone()
    return None if row is None else marker_version(row[0]) or 0


def read_view(cur: Any, state: CatalogState, table: str) -> View | None:
    """The table as this node has it now (None: absent here), typed by the catalog version
    its marker names (or the pending DDL's, applied here but not yet logged as done)."""
    version = marker(cur, table)
    if version is None:
        return None
    cat = state.at(version)
    pending = state.pending
    if cat is None and pending is not None and pending.version == version:
        cat = pending.catalog  # applied here, its log entry not yet marked done
    known: Table | None = cat.table(table) if cat else None
    cur.execute(COLUMNS_SQL, (APP_DB, table))
    present = [str(r[0]) for r in cur.fetchall() if r[0] != "key"]
    types = {}
    for name in present:
        col = known.column(name) if known else None
        types[name] = col.type if col else "VARCHAR(65535)"
    indexes = {i.name: i.columns for i in known.indexes} if known else {}
    sv = known.schema_version if known else 0
    return View(table, version, sv, types, indexes)
