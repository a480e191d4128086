"""Rows against table schemas: validate a written row, and upgrade a stored row to a newer schema.

A row is `{column_name: JSON-encoded value}` over the non-key columns of one schema version. The
storage keeps each row version with the schema version it was written with; a reader on a newer
version upgrades it step by step through every schema version in between, following columns by
id: a new column gets the default it had when it was added (or NULL), a dropped column disappears,
a renamed one follows its id, a widened type widens the value, and SET NOT NULL (which the catalog
allows only on a column with a default) fills a stored NULL with that default. Stepping through
every version makes the result equal to a store that rewrote every row at each DDL.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from schemasync.catalog import Table
from schemasync.types import TypeInvalid, normalize_value, parse_type, value_problem, widen_value


class RowInvalid(ValueError):
    """A row that does not conform to its table schema."""


def row_problems(table: Table, row: Mapping[str, Any], complete: bool = True) -> list[str]:
    """Why `row` does not conform to `table` (empty when it does). With `complete`, every column
    must be present, as in a stored or read row; otherwise absent columns are not judged."""
    problems: list[str] = []
    names = {c.name for c in table.columns}
    problems.extend(
        f"column {name} does not exist in table {table.name} v{table.schema_version}"
        for name in row
        if name not in names
    )
    for c in table.columns:
        if c.name not in row:
            if complete:
                problems.append(f"column {c.name} is missing")
            continue
        value = row[c.name]
        if value is None:
            if not c.nullable:
                problems.append(f"column {c.name} is NOT NULL but holds NULL")
            continue
        problem = value_problem(parse_type(c.type), value)
        if problem is not None:
            problems.append(f"column {c.name}: {problem}")
    return problems


def conforms(table: Table, row: Mapping[str, Any]) -> bool:
    """True when `row` is a complete, valid row of `table`."""
    return not row_problems(table, row, complete=True)


def complete_row(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """The full stored form of a written row: absent columns take their default (or NULL), values
    are normalized, columns in schema order. Raises RowInvalid."""
    problems = row_problems(table, row, complete=False)
    out: dict[str, Any] = {}
    for c in table.columns:
        value = row.get(c.name, c.default)
        if value is None and not c.nullable and c.name not in row:
            problems.append(f"column {c.name} is NOT NULL and has no default: a value is needed")
        if not problems:
            out[c.name] = normalize_value(parse_type(c.type), value)
    if problems:
        raise RowInvalid("; ".join(problems))
    return out


def to_ids(table: Table, row: Mapping[str, Any]) -> dict[int, Any]:
    """A row keyed by column id instead of name (unknown names raise RowInvalid)."""
    out: dict[int, Any] = {}
    for name, value in row.items():
        c = table.column(name)
        if c is None:
            raise RowInvalid(f"column {name} does not exist in table {table.name}")
        out[c.id] = value
    return out


def to_names(table: Table, row: Mapping[int, Any]) -> dict[str, Any]:
    """A row keyed by column id back to names, in schema order; ids not in `table` are dropped."""
    return {c.name: row[c.id] for c in table.columns if c.id in row}


def upgrade_step(row: Mapping[str, Any], old: Table, new: Table) -> dict[str, Any]:
    """Convert a row of `old` to `new` (same table id, newer schema), by column id."""
    if old.id != new.id:
        raise ValueError(f"table id {old.id} is not table id {new.id}")
    by_id = to_ids(old, row)
    old_cols = {c.id: c for c in old.columns}
    out: dict[str, Any] = {}
    for c in new.columns:
        oc = old_cols.get(c.id)
        if oc is None:
            value = c.default
        elif c.id not in by_id:
            value = oc.default
        else:
            value = by_id[c.id]
            if oc.type != c.type:
                try:
                    value = widen_value(parse_type(oc.type), parse_type(c.type), value)
                except TypeInvalid as e:
                    raise RowInvalid(f"column {c.name}: {e}") from e
        if value is None and not c.nullable:
            value = c.default
        out[c.name] = value
    return out


def upgrade_row(row: Mapping[str, Any], path: Sequence[Table]) -> dict[str, Any]:
    """Upgrade a row written on path[0] to path[-1], one schema version at a time."""
    if not path:
        raise ValueError("empty schema path")
    current = dict(row)
    for old, new in itertools.pairwise(path):
        if new.schema_version <= old.schema_version:
            raise ValueError(
                f"schema path goes from v{old.schema_version} to v{new.schema_version}"
            )
        current = upgrade_step(current, old, new)
    return current


def schema_path(versions: Mapping[int, Table], written: int, reader: int) -> list[Table]:
    """The tables of schema versions written..reader from a table's versions map (e.g.
    `CatalogHistory.table_versions(table_id)`); raises ValueError to downgrade or on a gap."""
    if reader < written:
        raise ValueError(f"cannot downgrade a row from v{written} to v{reader}")
    missing = [v for v in range(written, reader + 1) if v not in versions]
    if missing:
        raise ValueError(f"schema versions {missing} are not known")
    return [versions[v] for v in range(written, reader + 1)]


def upgrade_between(
    row: Mapping[str, Any], versions: Mapping[int, Table], written: int, reader: int
) -> dict[str, Any]:
    """Upgrade a row written at schema version `written` to the reader's version `reader`."""
    return upgrade_row(row, schema_path(versions, written, reader))
