"""The authoritative catalog of a Galera run, and its log beside the DDL.

MariaDB commits every DDL implicitly, so no transaction can hold a DDL and its log entry
together. The log is therefore written in three steps, with the DDL's effect itself as the
witness of the middle one:

1. `pending`: a row (version N, statement, origin node, the catalog after it) is committed to
   `schemachaos.catalog_log` before the DDL runs;
2. the DDL runs, and the same ALTER sets the table's COMMENT to `schemachaos:v=N` (ddl.py);
3. `done`: the row is marked done with the global write-set position seen after it.

A row left `pending` (the connection was lost in 2 or 3) is decided by the marker: version N
took effect exactly when its table carries `schemachaos:v=N` (a DROP TABLE: the table is gone),
on the origin node (RSU runs there only) or, under TOI, on any node of the primary component
after a full `wsrep_sync_wait`. DDLs are serialized by the controller (one lock for all
clients), so no later DDL can have moved the marker before N is decided: the next DDL first
decides N, and fails as unavailable if it cannot.

The catalog itself is computed by schemasync's own model (`next_catalog`), never read back from
a node: under RSU each node holds only part of the schema, and the log must say what the DDL
asked for, which each node's copy is then compared against.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from schemasync import ddl as d
from schemasync.catalog import Catalog
from targets.galera.server import META_DB

LOG_TABLE = f"`{META_DB}`.`catalog_log`"
BOOTSTRAP_SQL = (
    f"CREATE DATABASE IF NOT EXISTS `{META_DB}`",
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} ("
    "catalog_version BIGINT NOT NULL PRIMARY KEY, state VARCHAR(8) NOT NULL, "
    "origin VARCHAR(64) NOT NULL, activation_ts BIGINT NOT NULL, ddl TEXT NOT NULL, "
    "catalog LONGTEXT NOT NULL) ENGINE=InnoDB",
    f"INSERT IGNORE INTO {LOG_TABLE} VALUES (1, 'done', '', 0, '', "
    f"'{json.dumps(Catalog.empty().to_json())}')",
)


@dataclass(frozen=True)
class Pending:
    """A DDL whose outcome is not known yet: where to look for its marker."""

    version: int
    origin: str
    table: str | None  # where the marker lands; None: a DROP TABLE
    dropped: str | None  # the table a DROP TABLE removes
    catalog: Catalog
    replicated: bool  # by TOI: every node of the primary component can tell


@dataclass
class CatalogState:
    """Every catalog version so far (shared by all clients of one run) and the DDL lock."""

    history: list[Catalog] = field(default_factory=lambda: [Catalog.empty()])
    # version -> {table: version of the last DDL that touched it}: what a node's markers read
    markers: dict[int, dict[str, int]] = field(default_factory=lambda: {1: {}})
    pending: Pending | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def latest(self) -> Catalog:
        return self.history[-1]

    def at(self, version: int) -> Catalog | None:
        if 1 <= version <= len(self.history):
            return self.history[version - 1]
        return None

    def next(self, cmd: d.DdlCommand, stmt: str) -> Catalog:
        """Version latest+1 made by cmd, or d.DdlInvalid (activation is stamped on commit)."""
        from schemasync.catalog import SKIP_INDEX_STATES, next_catalog

        # MariaDB builds an index inside its DDL: it is available when the DDL returns.
        return next_catalog(self.latest, cmd, stmt, 0, 0, frozenset({SKIP_INDEX_STATES}))

    def commit(self, catalog: Catalog, marker_table: str | None, dropped: str | None) -> None:
        """Append a version that took effect (its activation_ts set by the caller)."""
        if catalog.version != self.latest.version + 1:
            raise RuntimeError(f"catalog version {catalog.version} after {self.latest.version}")
        marks = dict(self.markers[self.latest.version])
        if dropped is not None:
            marks.pop(dropped, None)
        if marker_table is not None:
            # A rename moves the table: its old name no longer carries anything.
            for name in list(marks):
                if name not in catalog.tables:
                    marks.pop(name)
            marks[marker_table] = catalog.version
        self.history.append(catalog)
        self.markers[catalog.version] = marks

    def version_of(self, node_markers: dict[str, int]) -> int:
        """The newest version whose tables and markers are exactly the node's; a node whose
        schema is no version's (part of an RSU change) gets its newest marker's version."""
        for version in range(self.latest.version, 0, -1):
            if self.markers[version] == node_markers:
                return version
        return max([1, *node_markers.values()])

    def lines(self) -> list[dict[str, Any]]:
        """catalog.jsonl: one line per version (history.md); safe_ts = activation_ts."""
        out = []
        for cat in self.history:
            line = cat.to_json()
            line["safe_ts"] = line["activation_ts"]
            out.append(line)
        return out
