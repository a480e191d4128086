"""The catalog: versioned, immutable snapshots of every table, and the history of its versions.

Pure model of docs/interfaces.md. A DDL is validated against the latest version and produces the
next one (`apply_ddl`, `next_catalog`); `CatalogHistory.active(ts)` is the floor lookup on
activation timestamps that every schema use at a timestamp goes through. Columns, tables and
indexes are identified by ids drawn from one counter (`next_id`), never by names.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from schemasync import ddl as d
from schemasync.ddl import DdlInvalid
from schemasync.types import TypeInvalid, literal_to_value, parse_type, widen_value, widens

REGISTERED = "REGISTERED"
BUILDING = "BUILDING"
AVAILABLE = "AVAILABLE"
STOPPING = "STOPPING"
INDEX_STATES: tuple[str, ...] = (REGISTERED, BUILDING, AVAILABLE, STOPPING)
# Internal ALTER INDEX transitions: state -> the only target it may move to.
INDEX_NEXT_STATE: Mapping[str, str] = {
    REGISTERED: BUILDING,
    BUILDING: AVAILABLE,
    AVAILABLE: STOPPING,
    STOPPING: d.REMOVED,
}
RESERVED_COLUMN = "key"  # the implicit primary key of every table
SKIP_INDEX_STATES = "skip-index-states"


@dataclass(frozen=True)
class Column:
    id: int
    name: str
    type: str  # canonical type string, e.g. "DECIMAL(10,2)"
    nullable: bool
    default: Any  # JSON-encoded value; None = no default

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            "nullable": self.nullable,
            "default": self.default,
        }

    @staticmethod
    def from_json(c: Mapping[str, Any]) -> Column:
        return Column(
            int(c["id"]), str(c["name"]), str(c["type"]), bool(c["nullable"]), c.get("default")
        )


@dataclass(frozen=True)
class Index:
    id: int
    name: str
    columns: tuple[str, ...]
    state: str  # REGISTERED | BUILDING | AVAILABLE | STOPPING

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "columns": list(self.columns),
            "state": self.state,
        }

    @staticmethod
    def from_json(i: Mapping[str, Any]) -> Index:
        """`id` is an extra field of ours; a foreign catalog without it gets a stable id from the
        (global) index name, negative so that it never meets a real id."""
        name = str(i["name"])
        index_id = int(i["id"]) if "id" in i else -1 - zlib.crc32(name.encode())
        return Index(index_id, name, tuple(i["columns"]), str(i["state"]))


@dataclass(frozen=True)
class Table:
    id: int
    name: str
    schema_version: int
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def column_by_id(self, column_id: int) -> Column | None:
        return next((c for c in self.columns if c.id == column_id), None)

    def index(self, name: str) -> Index | None:
        return next((i for i in self.indexes if i.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "schema_version": self.schema_version,
            "columns": [c.to_json() for c in self.columns],
            "indexes": [i.to_json() for i in self.indexes],
        }

    @staticmethod
    def from_json(t: Mapping[str, Any], name: str | None = None) -> Table:
        """Read a table of catalog.jsonl; `name` is its key there (the `name` field is extra)."""
        table_name = name if name is not None else t.get("name")
        if table_name is None:
            raise ValueError("table JSON without a name: pass the catalog.jsonl key")
        return Table(
            int(t["id"]),
            str(table_name),
            int(t["schema_version"]),
            tuple(Column.from_json(c) for c in t["columns"]),
            tuple(Index.from_json(i) for i in t.get("indexes", ())),
        )


@dataclass(frozen=True)
class Catalog:
    version: int
    activation_ts: int
    safe_ts: int
    delay_ms: int
    ddl: str
    tables: Mapping[str, Table]  # by name; never mutated
    next_id: int
    _by_id: Mapping[int, Table] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {t.id: t for t in self.tables.values()})

    @staticmethod
    def empty() -> Catalog:
        """Version 1: no tables, active since ts 0."""
        return Catalog(1, 0, 0, 0, "", {}, 1)

    def table(self, name: str) -> Table | None:
        return self.tables.get(name)

    def table_by_id(self, table_id: int) -> Table | None:
        return self._by_id.get(table_id)

    def index(self, name: str) -> tuple[Table, Index] | None:
        """The index named `name` (names are global) and its table."""
        for t in self.tables.values():
            i = t.index(name)
            if i is not None:
                return t, i
        return None

    def to_json(self) -> dict[str, Any]:
        """One catalog.jsonl line (history.md); `next_id` and ids of indexes are extra fields."""
        return {
            "catalog_version": self.version,
            "activation_ts": self.activation_ts,
            "safe_ts": self.safe_ts,
            "delay_ms": self.delay_ms,
            "ddl": self.ddl,
            "tables": {name: t.to_json() for name, t in self.tables.items()},
            "next_id": self.next_id,
        }

    @staticmethod
    def from_json(line: Mapping[str, Any]) -> Catalog:
        tables = {name: Table.from_json(t, name) for name, t in line["tables"].items()}
        next_id = line.get("next_id")
        if next_id is None:
            ids = [0]
            for t in tables.values():
                ids.append(t.id)
                ids.extend(c.id for c in t.columns)
                ids.extend(i.id for i in t.indexes)
            next_id = max(ids) + 1
        return Catalog(
            int(line["catalog_version"]),
            int(line["activation_ts"]),
            int(line["safe_ts"]),
            int(line["delay_ms"]),
            str(line["ddl"]),
            tables,
            int(next_id),
        )


def activation_ts_of(safe_ts: int, delay_ms: int) -> int:
    """Tu = Tm + DD: the entry's safe_ts moved DD physical milliseconds ahead (logical kept)."""
    return safe_ts + (delay_ms << 16)


def next_catalog(
    latest: Catalog,
    cmd: d.DdlCommand,
    stmt: str,
    safe_ts: int,
    delay_ms: int,
    toggles: frozenset[str] = frozenset(),
) -> Catalog:
    """Version latest+1 made by `cmd`, stamped with the Meta Storage entry's safe_ts and DD."""
    tables, next_id = apply_ddl(latest, cmd, toggles)
    return Catalog(
        latest.version + 1,
        activation_ts_of(safe_ts, delay_ms),
        safe_ts,
        delay_ms,
        stmt,
        tables,
        next_id,
    )


class _Ids:
    def __init__(self, start: int) -> None:
        self.next = start

    def take(self) -> int:
        value = self.next
        self.next += 1
        return value


@dataclass
class _Edit:
    """One DDL's work on a copy of the latest version: the tables as they become, the id
    counter, and the rules it applies under (bug toggles, Ignite's index-state choice)."""

    latest: Catalog
    tables: dict[str, Table]
    ids: _Ids
    toggles: frozenset[str]
    index_state_bumps_version: bool


def apply_ddl(
    latest: Catalog,
    cmd: d.DdlCommand,
    toggles: frozenset[str] = frozenset(),
    *,
    index_state_bumps_version: bool = True,
) -> tuple[dict[str, Table], int]:
    """The tables after `cmd` and the new next_id; raises DdlInvalid when `cmd` does not apply
    to `latest`. Every change to a table bumps its schema_version (index DDL included), except
    an index state change when ``index_state_bumps_version`` is False (Ignite's choice)."""
    apply = _APPLY.get(type(cmd))
    if apply is None:
        raise DdlInvalid(f"unsupported command {cmd!r}")
    edit = _Edit(
        latest, dict(latest.tables), _Ids(latest.next_id), toggles, index_state_bumps_version
    )
    apply(edit, cmd)
    return edit.tables, edit.ids.next


# -- tables ------------------------------------------------------------------------------------


def _create_table(e: _Edit, cmd: d.CreateTable) -> None:
    if cmd.table in e.tables:
        raise DdlInvalid(f"table {cmd.table} already exists")
    columns: list[Column] = []
    for cdef in cmd.columns:
        if any(c.name == cdef.name for c in columns):
            raise DdlInvalid(f"duplicate column {cdef.name} in table {cmd.table}")
        columns.append(_new_column(cmd.table, cdef, e.ids, in_create=True))
    table_id = e.ids.take()
    e.tables[cmd.table] = Table(table_id, cmd.table, 1, tuple(columns), ())


def _drop_table(e: _Edit, cmd: d.DropTable) -> None:
    _table(e.latest, cmd.table)
    del e.tables[cmd.table]


def _rename_table(e: _Edit, cmd: d.RenameTable) -> None:
    table = _table(e.latest, cmd.table)
    if cmd.new_name in e.tables:
        raise DdlInvalid(f"cannot rename table {cmd.table}: table {cmd.new_name} exists")
    del e.tables[cmd.table]
    e.tables[cmd.new_name] = _bump(table, name=cmd.new_name)


# -- columns -----------------------------------------------------------------------------------


def _add_column(e: _Edit, cmd: d.AddColumn) -> None:
    table = _table(e.latest, cmd.table)
    if table.column(cmd.column.name) is not None:
        raise DdlInvalid(f"column {cmd.column.name} already exists in table {cmd.table}")
    column = _new_column(cmd.table, cmd.column, e.ids, in_create=False)
    e.tables[cmd.table] = _bump(table, columns=(*table.columns, column))


def _drop_column(e: _Edit, cmd: d.DropColumn) -> None:
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    if len(table.columns) == 1:
        raise DdlInvalid(f"cannot drop {cmd.column}: the last column of table {cmd.table}")
    for index in table.indexes:
        if column.name in index.columns:
            raise DdlInvalid(f"cannot drop {cmd.column}: index {index.name} uses it")
    rest = tuple(c for c in table.columns if c.id != column.id)
    e.tables[cmd.table] = _bump(table, columns=rest)


def _rename_column(e: _Edit, cmd: d.RenameColumn) -> None:
    """The column keeps its id; the indexes that name it follow the new name."""
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    _check_column_name(cmd.new_name)
    if table.column(cmd.new_name) is not None:
        raise DdlInvalid(f"column {cmd.new_name} already exists in table {cmd.table}")
    renamed = _replace_column(table, replace(column, name=cmd.new_name))
    indexes = tuple(
        replace(i, columns=tuple(cmd.new_name if n == cmd.column else n for n in i.columns))
        for i in table.indexes
    )
    e.tables[cmd.table] = replace(renamed, indexes=indexes)


def _alter_type(e: _Edit, cmd: d.AlterType) -> None:
    """Only a widening (schemasync.types.widens): stored values and the default still fit."""
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    old_t, new_t = parse_type(column.type), parse_type(cmd.type)
    if old_t == new_t:
        raise DdlInvalid(f"column {cmd.column} already has type {column.type}")
    if not widens(old_t, new_t):
        raise DdlInvalid(
            f"cannot change column {cmd.column} from {old_t} to {new_t}: not a widening"
        )
    default = widen_value(old_t, new_t, column.default)
    changed = replace(column, type=str(new_t), default=default)
    e.tables[cmd.table] = _replace_column(table, changed)


def _set_not_null(e: _Edit, cmd: d.SetNotNull) -> None:
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    if not column.nullable:
        raise DdlInvalid(f"column {cmd.column} is already NOT NULL")
    if column.default is None:
        raise DdlInvalid(
            f"cannot SET NOT NULL on {cmd.column}: it has no default to fill stored nulls"
        )
    e.tables[cmd.table] = _replace_column(table, replace(column, nullable=False))


def _drop_not_null(e: _Edit, cmd: d.DropNotNull) -> None:
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    if column.nullable:
        raise DdlInvalid(f"column {cmd.column} is already nullable")
    e.tables[cmd.table] = _replace_column(table, replace(column, nullable=True))


def _set_default(e: _Edit, cmd: d.SetDefault) -> None:
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    value = _literal(column.type, cmd.default, f"default of column {cmd.column}")
    if value is None and not column.nullable:
        raise DdlInvalid(f"column {cmd.column} is NOT NULL: its default cannot be NULL")
    if value == column.default:
        raise DdlInvalid(f"column {cmd.column} already has default {cmd.default.text}")
    e.tables[cmd.table] = _replace_column(table, replace(column, default=value))


def _drop_default(e: _Edit, cmd: d.DropDefault) -> None:
    table = _table(e.latest, cmd.table)
    column = _column(table, cmd.column)
    if column.default is None:
        raise DdlInvalid(f"column {cmd.column} has no default")
    e.tables[cmd.table] = _replace_column(table, replace(column, default=None))


# -- indexes -----------------------------------------------------------------------------------


def _create_index(e: _Edit, cmd: d.CreateIndex) -> None:
    """A new index starts REGISTERED and is built through its states (AVAILABLE at once with
    the skip-index-states bug)."""
    table = _table(e.latest, cmd.table)
    if e.latest.index(cmd.index) is not None:
        raise DdlInvalid(f"index {cmd.index} already exists")
    if len(set(cmd.columns)) != len(cmd.columns):
        raise DdlInvalid(f"index {cmd.index} names a column twice")
    for name in cmd.columns:
        _column(table, name)
    state = AVAILABLE if SKIP_INDEX_STATES in e.toggles else REGISTERED
    index = Index(e.ids.take(), cmd.index, cmd.columns, state)
    e.tables[cmd.table] = _bump(table, indexes=(*table.indexes, index))


def _drop_index(e: _Edit, cmd: d.DropIndex) -> None:
    """An index no reader can use yet goes at once; an AVAILABLE one is STOPPING first."""
    table, index = _index(e.latest, cmd.index)
    if SKIP_INDEX_STATES in e.toggles or index.state in (REGISTERED, BUILDING):
        e.tables[table.name] = _without_index(table, index)
    elif index.state == AVAILABLE:
        stopping = replace(index, state=STOPPING)
        e.tables[table.name] = _with_index(table, stopping, e.index_state_bumps_version)
    else:
        raise DdlInvalid(f"index {cmd.index} is already being dropped ({index.state})")


def _index_state(e: _Edit, cmd: d.IndexState) -> None:
    """The internal ALTER INDEX: only to the state INDEX_NEXT_STATE allows; REMOVED drops it."""
    table, index = _index(e.latest, cmd.index)
    expected = INDEX_NEXT_STATE.get(index.state)
    if cmd.state != expected:
        raise DdlInvalid(
            f"index {cmd.index} is {index.state}: it cannot move to {cmd.state}"
            f" (next is {expected})"
        )
    if cmd.state == d.REMOVED:
        e.tables[table.name] = _without_index(table, index)
    else:
        moved = replace(index, state=cmd.state)
        e.tables[table.name] = _with_index(table, moved, e.index_state_bumps_version)


# Each DDL kind's rule, by its command's class: a new kind is a function and a line here
_APPLY: Mapping[type, Callable[[_Edit, Any], None]] = {
    d.CreateTable: _create_table,
    d.DropTable: _drop_table,
    d.RenameTable: _rename_table,
    d.AddColumn: _add_column,
    d.DropColumn: _drop_column,
    d.RenameColumn: _rename_column,
    d.AlterType: _alter_type,
    d.SetNotNull: _set_not_null,
    d.DropNotNull: _drop_not_null,
    d.SetDefault: _set_default,
    d.DropDefault: _drop_default,
    d.CreateIndex: _create_index,
    d.DropIndex: _drop_index,
    d.IndexState: _index_state,
}


def _table(cat: Catalog, name: str) -> Table:
    table = cat.table(name)
    if table is None:
        raise DdlInvalid(f"table {name} does not exist")
    return table


def _column(table: Table, name: str) -> Column:
    column = table.column(name)
    if column is None:
        raise DdlInvalid(f"column {name} does not exist in table {table.name}")
    return column


def _index(cat: Catalog, name: str) -> tuple[Table, Index]:
    found = cat.index(name)
    if found is None:
        raise DdlInvalid(f"index {name} does not exist")
    return found


def _check_column_name(name: str) -> None:
    if name.lower() == RESERVED_COLUMN:
        raise DdlInvalid(f"column name {name} is reserved for the implicit primary key")


def _literal(type_: str, lit: d.Literal, what: str) -> Any:
    try:
        return literal_to_value(parse_type(type_), lit.kind, lit.text)
    except TypeInvalid as e:
        raise DdlInvalid(f"{what}: {e}") from e


def _new_column(table: str, cdef: d.ColumnDef, ids: _Ids, in_create: bool) -> Column:
    _check_column_name(cdef.name)
    default = None
    if cdef.default is not None:
        default = _literal(cdef.type, cdef.default, f"default of column {cdef.name}")
    if cdef.not_null and cdef.default is not None and default is None:
        raise DdlInvalid(f"column {cdef.name} is NOT NULL: its default cannot be NULL")
    if cdef.not_null and default is None and not in_create:
        raise DdlInvalid(
            f"cannot add NOT NULL column {cdef.name} to table {table} without a default"
        )
    return Column(ids.take(), cdef.name, cdef.type, not cdef.not_null, default)


def _bump(table: Table, **changes: Any) -> Table:
    return replace(table, schema_version=table.schema_version + 1, **changes)


def _replace_column(table: Table, column: Column) -> Table:
    return _bump(table, columns=tuple(column if c.id == column.id else c for c in table.columns))


def _with_index(table: Table, index: Index, bump: bool = True) -> Table:
    indexes = tuple(index if i.id == index.id else i for i in table.indexes)
    return _bump(table, indexes=indexes) if bump else replace(table, indexes=indexes)


def _without_index(table: Table, index: Index) -> Table:
    return _bump(table, indexes=tuple(i for i in table.indexes if i.id != index.id))


class CatalogHistory:
    """The locally applied catalog versions, gap-free, with the floor lookup by activation.

    Activation timestamps must strictly increase with versions, unless `ordered_activation` is
    False (the `mutable-delay` bug): then a version is filed under its own activation_ts like
    Ignite's NavigableMap, a later version replacing an earlier one filed at the same ts.
    """

    def __init__(self, first: Catalog | None = None, *, ordered_activation: bool = True) -> None:
        first = first if first is not None else Catalog.empty()
        self._ordered = ordered_activation
        self._versions: list[Catalog] = [first]
        self._acts: list[int] = [first.activation_ts]
        self._by_act: list[Catalog] = [first]
        self._table_versions: dict[int, dict[int, Table]] = {}
        self._record_tables(first)

    @classmethod
    def from_json_lines(
        cls, lines: Iterable[Mapping[str, Any]], *, ordered_activation: bool = True
    ) -> CatalogHistory:
        cats = sorted((Catalog.from_json(line) for line in lines), key=lambda c: c.version)
        if not cats:
            return cls(ordered_activation=ordered_activation)
        history = cls(cats[0], ordered_activation=ordered_activation)
        for cat in cats[1:]:
            history.append(cat)
        return history

    def append(self, cat: Catalog) -> None:
        """Add the next version; re-appending the latest version unchanged is a no-op."""
        latest = self._versions[-1]
        if cat.version == latest.version and cat == latest:
            return
        if cat.version != latest.version + 1:
            raise ValueError(f"catalog version {cat.version} after {latest.version}: not gap-free")
        if self._ordered:
            if cat.activation_ts <= latest.activation_ts:
                raise ValueError(
                    f"catalog version {cat.version} activates at {cat.activation_ts},"
                    f" not after version {latest.version} ({latest.activation_ts})"
                )
            self._acts.append(cat.activation_ts)
            self._by_act.append(cat)
        else:
            i = bisect.bisect_left(self._acts, cat.activation_ts)
            if i < len(self._acts) and self._acts[i] == cat.activation_ts:
                self._by_act[i] = cat
            else:
                self._acts.insert(i, cat.activation_ts)
                self._by_act.insert(i, cat)
        self._versions.append(cat)
        self._record_tables(cat)

    def _record_tables(self, cat: Catalog) -> None:
        for t in cat.tables.values():
            self._table_versions.setdefault(t.id, {}).setdefault(t.schema_version, t)

    def latest(self) -> Catalog:
        return self._versions[-1]

    def first(self) -> Catalog:
        return self._versions[0]

    def at_version(self, v: int) -> Catalog:
        i = v - self._versions[0].version
        if not 0 <= i < len(self._versions):
            raise KeyError(f"catalog version {v} is not known here")
        return self._versions[i]

    def active(self, ts: int) -> Catalog:
        """The version with the greatest activation_ts <= ts."""
        i = bisect.bisect_right(self._acts, ts) - 1
        if i < 0:
            raise LookupError(f"no catalog version known active at {ts}")
        return self._by_act[i]

    def versions_between(self, ts_a: int, ts_b: int) -> list[Catalog]:
        """Every version from the one active at ts_a to the one active at ts_b, in order, for a
        step-by-step compatibility check. (Unordered activation can make the second older than
        the first; then both are returned, first then second.)"""
        va, vb = self.active(ts_a).version, self.active(ts_b).version
        if vb < va:
            return [self.at_version(va), self.at_version(vb)]
        return [self.at_version(v) for v in range(va, vb + 1)]

    def table_versions(self, table_id: int) -> Mapping[int, Table]:
        """Every known schema version of a table (by id): schema_version -> Table."""
        return self._table_versions.get(table_id, {})

    def __len__(self) -> int:
        return len(self._versions)

    def __iter__(self) -> Iterator[Catalog]:
        return iter(list(self._versions))
