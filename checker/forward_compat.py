"""Forward compatibility of one catalog step for one table, as the checker judges it (seed 001,
system.md): may a txn that enlisted the table on the old schema commit on the new one?

The step is read as the simple changes that turn the old table (a catalog.jsonl table dict) into
the new one, each judged on its own; the step is compatible iff all of them are. Columns are
matched by id, so a column dropped and re-added under its name is a drop plus an add.

Compatible: add a column that is nullable or has a default; rename a column when the run says
`rename_column_compatible` (the seed: a tuple upgrades by column id; Ignite says no); drop NOT
NULL; an exact type conversion (`checker.sql_types`); any index change (an index holds no part of
a tuple and adds no constraint on one). Incompatible: drop or rename the table; drop a column;
add a NOT NULL column without a default; set NOT NULL; set, change or drop a default; any other
type change, or one from or to a type the checker does not know. There is no switch for drop
column: a system that commits across one (its `drop-column-compatible` bug toggle) is what the
checker must catch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from checker.sql_types import column_type, exact_conversion, same_json, same_value

Table = Mapping[str, Any]  # a table of catalog.jsonl: {id, schema_version, columns, indexes}


@dataclass(frozen=True)
class Change:
    """One simple change of a table; `kind` is a DDL kind of history.md, `subject` the table or
    column it touches (by its old name), `old`/`new` what changed, when that fits in a word."""

    kind: str
    subject: str
    old: Any = None
    new: Any = None

    def describe(self) -> str:
        """The change as an explanation shows it: `set_default c2 ('x' -> 'tail')`."""
        if self.old is None and self.new is None:
            return f"{self.kind} {self.subject}"
        if isinstance(self.new, AddedColumn):
            return f"{self.kind} {self.subject} {self.new!r}"
        return f"{self.kind} {self.subject} ({self.old!r} -> {self.new!r})"


@dataclass(frozen=True)
class AddedColumn:
    """What an add_column change adds, as much as its judgment needs."""

    type: str
    nullable: bool
    default: Any

    def __repr__(self) -> str:
        text = self.type if self.nullable else f"{self.type} NOT NULL"
        return text if self.default is None else f"{text} DEFAULT {self.default!r}"


def changes(old: Table, new: Table | None, old_name: str, new_name: str | None) -> Iterator[Change]:
    """The simple changes from `old` (named `old_name`) to `new` (None: dropped), in the seed's
    order: the table, then each old column (name, nullability, default, type), then the added
    columns. Index changes are not listed: none of them touches a tuple."""
    if new is None:
        yield Change("drop_table", old_name)
        return
    if new_name != old_name:
        yield Change("rename_table", old_name, old_name, new_name)
    new_columns = {int(c["id"]): c for c in new["columns"]}
    old_ids = set()
    for oc in old["columns"]:
        old_ids.add(int(oc["id"]))
        nc = new_columns.get(int(oc["id"]))
        if nc is None:
            yield Change("drop_column", str(oc["name"]))
        else:
            yield from _column_changes(oc, nc)
    for nc in new["columns"]:
        if int(nc["id"]) not in old_ids:
            default = nc.get("default")
            added = AddedColumn(str(nc["type"]), bool(nc["nullable"]), default)
            yield Change("add_column", str(nc["name"]), None, added)


def _column_changes(oc: Mapping[str, Any], nc: Mapping[str, Any]) -> Iterator[Change]:
    name = str(oc["name"])
    if nc["name"] != oc["name"]:
        yield Change("rename_column", name, name, str(nc["name"]))
    if bool(oc["nullable"]) != bool(nc["nullable"]):
        yield Change("drop_not_null" if nc["nullable"] else "set_not_null", name)
    old_default, new_default = oc.get("default"), nc.get("default")
    if not _same_default(str(oc["type"]), str(nc["type"]), old_default, new_default):
        kind = "drop_default" if new_default is None else "set_default"
        yield Change(kind, name, old_default, new_default)
    if nc["type"] != oc["type"]:
        yield Change("alter_type", name, str(oc["type"]), str(nc["type"]))


def _same_default(old_type: str, new_type: str, old: Any, new: Any) -> bool:
    """Whether no reader could tell the defaults apart; a default carried through an exact type
    conversion (INT32 7 -> VARCHAR '7') is the same default."""
    if old is None or new is None:
        return old is None and new is None
    if same_json(old, new):
        return True
    ot, nt = column_type(old_type), column_type(new_type)
    if ot is None or nt is None:
        return False
    return (ot == nt or exact_conversion(ot, nt)) and same_value(ot, nt, old, new)


def change_compatible(change: Change, rename_column_compatible: bool) -> bool:
    """Forward compatibility of one simple change of the enlisted table."""
    kind = change.kind
    if kind == "drop_not_null":
        return True  # dropping a constraint
    if kind == "rename_column":
        return rename_column_compatible
    if kind == "add_column":
        # a tuple written before lacks the column: fine when it reads as NULL or the default
        added = change.new
        return isinstance(added, AddedColumn) and (added.nullable or added.default is not None)
    if kind == "alter_type":
        old, new = column_type(str(change.old)), column_type(str(change.new))
        return old is not None and new is not None and exact_conversion(old, new)
    # drop_table, rename_table, drop_column, set_not_null, set_default, drop_default
    return False


def first_incompatible(
    old: Table,
    new: Table | None,
    old_name: str,
    new_name: str | None,
    rename_column_compatible: bool = True,
) -> Change | None:
    """The first simple change of the step that is not forward compatible, or None."""
    return next(
        (
            c
            for c in changes(old, new, old_name, new_name)
            if not change_compatible(c, rename_column_compatible)
        ),
        None,
    )


def forward_compatible(
    old: Table,
    new: Table | None,
    old_name: str,
    new_name: str | None,
    rename_column_compatible: bool = True,
) -> bool:
    """May a txn that enlisted `old` commit on `new` (the same table id; None if dropped)?"""
    return first_incompatible(old, new, old_name, new_name, rename_column_compatible) is None
