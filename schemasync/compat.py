"""Forward compatibility of schema changes (seed 001, system.md): may a txn that began on I commit
on C? One source of truth for the commit path of the nodes and for the checker.

A change I -> C is judged step by step over the catalog versions in between; a step that holds
several simple changes (a diff) is judged as those changes in order, compatible iff all are.
Columns are matched by id, so a dropped and re-added column is a drop plus an add.

Compatible: create table, add a nullable column or one with a default, drop NOT NULL (dropping a
constraint), a type widening of `schemasync.types.widens`, any index change, any change to another
table. Incompatible: drop table, rename table, drop column (unless the `drop-column-compatible`
bug toggle), adding a NOT NULL column without default, any default change, set NOT NULL, any other
type change.

Column rename: the config flag `rename_column_compatible`, default True. We follow the seed:
columns are identified by ids, a stored tuple upgrades by id, so a tuple written on I loses
nothing and breaks no constraint on C. Ignite treats a rename as incompatible; set the flag to
false to get that behaviour.

Backward compatibility: every change is backward incompatible (seed 001, "for the sake of
safety"), so `backward_compatible` is True only when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemasync.catalog import Catalog, Column, Index, Table
from schemasync.types import TypeInvalid, parse_type, widen_value, widens

DROP_COLUMN_COMPATIBLE = "drop-column-compatible"


@dataclass(frozen=True)
class SchemaChange:
    """One simple change of a table; `kind` uses the DDL kind names of history.md."""

    kind: str
    subject: str  # the table, column or index it touches (names as of the old schema)
    old: Any = None
    new: Any = None

    def describe(self) -> str:
        if self.old is None and self.new is None:
            return f"{self.kind} {self.subject}"
        return f"{self.kind} {self.subject}: {self.old!r} -> {self.new!r}"


def diff_tables(old: Table, new: Table | None) -> list[SchemaChange]:
    """The simple changes that turn `old` into `new` (None = dropped), in the seed's order."""
    if new is None:
        return [SchemaChange("drop_table", old.name)]
    changes: list[SchemaChange] = []
    if new.name != old.name:
        changes.append(SchemaChange("rename_table", old.name, old.name, new.name))
    new_cols = {c.id: c for c in new.columns}
    old_ids = {c.id for c in old.columns}
    for oc in old.columns:
        nc = new_cols.get(oc.id)
        if nc is None:
            changes.append(SchemaChange("drop_column", oc.name, oc, None))
            continue
        changes.extend(_column_changes(oc, nc))
    for nc in new.columns:
        if nc.id not in old_ids:
            changes.append(SchemaChange("add_column", nc.name, None, nc))
    changes.extend(_index_changes(old.indexes, new.indexes))
    return changes


def _column_changes(oc: Column, nc: Column) -> list[SchemaChange]:
    changes: list[SchemaChange] = []
    if nc.name != oc.name:
        changes.append(SchemaChange("rename_column", oc.name, oc.name, nc.name))
    if nc.type != oc.type:
        changes.append(SchemaChange("alter_type", oc.name, oc.type, nc.type))
    if oc.nullable and not nc.nullable:
        changes.append(SchemaChange("set_not_null", oc.name))
    elif nc.nullable and not oc.nullable:
        changes.append(SchemaChange("drop_not_null", oc.name))
    if nc.default != oc.default and not _same_widened_default(oc, nc):
        kind = "drop_default" if nc.default is None else "set_default"
        changes.append(SchemaChange(kind, oc.name, oc.default, nc.default))
    return changes


def _same_widened_default(oc: Column, nc: Column) -> bool:
    """A type widening re-encodes the default (FLOAT 1 -> 1.0, INT -> '1'); that is no change."""
    if oc.default is None or nc.default is None or oc.type == nc.type:
        return False
    try:
        return widen_value(parse_type(oc.type), parse_type(nc.type), oc.default) == nc.default
    except TypeInvalid:
        return False


def _index_changes(old: Sequence[Index], new: Sequence[Index]) -> list[SchemaChange]:
    changes: list[SchemaChange] = []
    new_by_id = {i.id: i for i in new}
    old_ids = {i.id for i in old}
    for oi in old:
        ni = new_by_id.get(oi.id)
        if ni is None:
            changes.append(SchemaChange("drop_index", oi.name, oi.state, None))
        elif ni.state != oi.state:  # its column names only change with a column rename
            changes.append(SchemaChange("index_state", oi.name, oi.state, ni.state))
    for ni in new:
        if ni.id not in old_ids:
            changes.append(SchemaChange("create_index", ni.name, None, ni.state))
    return changes


def change_compatible(
    change: SchemaChange, rename_compatible: bool = True, toggles: frozenset[str] = frozenset()
) -> bool:
    """Forward compatibility of one simple change."""
    kind = change.kind
    if kind in ("create_index", "drop_index", "index_state", "drop_not_null"):
        return True
    if kind == "rename_column":
        return rename_compatible
    if kind == "drop_column":
        return DROP_COLUMN_COMPATIBLE in toggles
    if kind == "add_column":
        column = change.new
        assert isinstance(column, Column)
        return column.nullable or column.default is not None
    if kind == "alter_type":
        try:
            return widens(parse_type(change.old), parse_type(change.new))
        except TypeInvalid:
            return False
    # drop_table, rename_table, set_not_null, set_default, drop_default, anything unknown
    return False


def forward_compatible(
    old: Table,
    new: Table | None,
    rename_compatible: bool = True,
    toggles: frozenset[str] = frozenset(),
) -> bool:
    """May a tuple written on `old` live on `new` (the same table, by id, or None if dropped)?"""
    return all(change_compatible(c, rename_compatible, toggles) for c in diff_tables(old, new))


def backward_compatible(old: Table, new: Table | None) -> bool:
    """Every change is backward incompatible: True only when nothing changed."""
    return new is not None and not diff_tables(old, new)


def first_incompatible(
    versions: Sequence[Catalog],
    table_id: int,
    rename_compatible: bool = True,
    toggles: frozenset[str] = frozenset(),
) -> tuple[int, SchemaChange] | None:
    """The first (catalog version, change) on the path I -> C that is not forward compatible,
    or None. `versions` are consecutive catalogs from the one at base_ts to the one at commit_ts;
    the table is followed by id (a table that is missing at the start counts as dropped)."""
    if not versions:
        return None
    prev = versions[0].table_by_id(table_id)
    if prev is None:
        return versions[0].version, SchemaChange("drop_table", f"table id {table_id}")
    for cat in versions[1:]:
        cur = cat.table_by_id(table_id)
        if cur is not None and cur.schema_version == prev.schema_version and cur == prev:
            continue
        for change in diff_tables(prev, cur):
            if not change_compatible(change, rename_compatible, toggles):
                return cat.version, change
        if cur is None:
            return cat.version, SchemaChange("drop_table", prev.name)
        prev = cur
    return None


def step_compatible(
    versions: Sequence[Catalog],
    table_id: int,
    rename_compatible: bool = True,
    toggles: frozenset[str] = frozenset(),
) -> bool:
    """True when every step from versions[0] to versions[-1] is forward compatible."""
    return first_incompatible(versions, table_id, rename_compatible, toggles) is None


def forward_compatible_json(
    old_table: Mapping[str, Any],
    new_table: Mapping[str, Any] | None,
    rename_compatible: bool = True,
    toggles: frozenset[str] | Sequence[str] = frozenset(),
    old_name: str | None = None,
    new_name: str | None = None,
) -> bool:
    """`forward_compatible` on the table dicts of catalog.jsonl. A table dict there is keyed by
    its name; pass the keys as old_name/new_name when the dicts carry no `name` field."""
    old = Table.from_json(old_table, old_name)
    new = None if new_table is None else Table.from_json(new_table, new_name)
    return forward_compatible(old, new, rename_compatible, frozenset(toggles))


def step_compatible_json(
    lines: Sequence[Mapping[str, Any]],
    table_id: int,
    rename_compatible: bool = True,
    toggles: frozenset[str] | Sequence[str] = frozenset(),
) -> bool:
    """`step_compatible` on consecutive catalog.jsonl lines (from I's version to C's)."""
    cats = [Catalog.from_json(line) for line in lines]
    return step_compatible(cats, table_id, rename_compatible, frozenset(toggles))
