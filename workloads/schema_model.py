"""The schema a workload expects, and the valid DDL it may issue next.

The DDL stream must stay valid while other processes race with it, so the generator keeps its
own model of the catalog, built only from DDL the cluster acknowledged (fed back through
`observe`). A planned DDL marks the names it touches busy until its completion: no second DDL
is planned on a table whose previous one is still in flight. A DDL whose outcome is unknown
(`info`) makes its table uncertain until a probe shows what the node has (`resync`).
The rules mirror the catalog's validation (docs/interfaces.md, system.md) without importing
the system under test: a workload must not share the bugs of what it checks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workloads.column_types import BASE_TYPES, default_literal, type_name, widening_of

DDL_KINDS: tuple[str, ...] = (
    "create_table",
    "drop_table",
    "rename_table",
    "add_column",
    "drop_column",
    "rename_column",
    "alter_type",
    "set_not_null",
    "drop_not_null",
    "set_default",
    "drop_default",
    "create_index",
    "drop_index",
)


@dataclass
class ColumnModel:
    name: str
    type: str
    nullable: bool
    default: str | None  # the SQL literal of the default, None = no default
    no_nulls: bool = False  # a SET NOT NULL is planned: writers stop sending NULL for it


@dataclass
class IndexModel:
    name: str
    columns: tuple[str, ...]
    acked_s: float  # when its CREATE INDEX was acknowledged (it becomes AVAILABLE later)


@dataclass
class TableModel:
    name: str
    columns: list[ColumnModel]
    indexes: dict[str, IndexModel] = field(default_factory=dict)
    next_column: int = 1
    uncertain: bool = False
    rows: dict[int, dict] = field(default_factory=dict)  # key -> last row a write carried

    def column(self, name: str) -> ColumnModel | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def fresh_column(self) -> str:
        name = f"c{self.next_column}"
        self.next_column += 1
        return name


@dataclass(frozen=True)
class DdlPlan:
    """A DDL to issue: the history's invoke value, the names it keeps busy, and the change the
    model takes when the cluster acknowledges it."""

    kind: str
    table: str
    stmt: str
    busy: tuple[str, ...]
    apply: Callable[[SchemaModel, float], None] = field(compare=False, repr=False)
    new_name: str | None = None  # rename_table's new name

    def value(self) -> dict:
        out = {"stmt": self.stmt, "table": self.table, "kind": self.kind}
        if self.new_name is not None:
            out["new_table"] = self.new_name
        return out


@dataclass(frozen=True)
class ModelLimits:
    min_tables: int = 2
    max_tables: int = 5
    max_columns: int = 7
    max_indexes: int = 3
    ghost_s: float = 15.0  # a dropped index may stay in the catalog (STOPPING) this long


Planner = Callable[["SchemaModel", random.Random, float], DdlPlan | None]


class SchemaModel:
    """Tables, columns and indexes as the acknowledged DDL left them."""

    def __init__(self, limits: ModelLimits = ModelLimits()) -> None:
        self.limits = limits
        self.tables: dict[str, TableModel] = {}
        self._busy: dict[str, int] = {}
        self._pending: dict[int, tuple[object, DdlPlan]] = {}
        self._ghosts: list[tuple[str, str, float]] = []  # (table, column, until_s)
        self._next_table = 1
        self._next_index = 1
        self._next_literal = 1
        self.acked: list[tuple[int, int, str]] = []  # (catalog_version, activation_ts, table)

    # -- views -----------------------------------------------------------------------------
    def usable_tables(self) -> list[TableModel]:
        """Tables DML may use: known to exist (a DDL in flight on them is fine, it is the point)."""
        return [t for t in self.tables.values() if not t.uncertain]

    def free_tables(self) -> list[TableModel]:
        return [t for t in self.tables.values() if not t.uncertain and t.name not in self._busy]

    def uncertain_tables(self) -> list[str]:
        return [t.name for t in self.tables.values() if t.uncertain]

    def pending_creates(self) -> int:
        return sum(1 for _, p in self._pending.values() if p.kind == "create_table")

    # -- the DDL life cycle ----------------------------------------------------------------
    def begin(self, op: object, plan: DdlPlan) -> None:
        self._pending[id(op)] = (op, plan)
        for name in plan.busy:
            self._busy[name] = self._busy.get(name, 0) + 1

    def complete(self, op: object, completion: Mapping[str, Any], now_s: float) -> None:
        """Take an `ok` into the model, forget a `fail`, distrust the table after an `info`."""
        entry = self._pending.pop(id(op), None)
        if entry is None or entry[0] is not op:
            return
        plan = entry[1]
        for name in plan.busy:
            left = self._busy.get(name, 0) - 1
            if left <= 0:
                self._busy.pop(name, None)
            else:
                self._busy[name] = left
        kind = completion.get("type")
        if kind == "ok":
            plan.apply(self, now_s)
            value = completion.get("value") or {}
            v, a = value.get("catalog_version"), value.get("activation_ts")
            if isinstance(v, int) and isinstance(a, int):
                self.acked.append((v, a, plan.table))
                del self.acked[:-64]
        elif kind == "fail" and plan.kind == "drop_index" and _diverged(completion):
            plan.apply(self, now_s)  # refused because it is already gone or going
        elif kind == "info" or _diverged(completion):
            self._distrust(plan)

    def _distrust(self, plan: DdlPlan) -> None:
        for name in plan.busy:
            table = self.tables.get(name)
            if table is not None:
                table.uncertain = True
            elif plan.kind in ("create_table", "rename_table") and name == plan.busy[-1]:
                # It may exist now: keep it as uncertain until a probe says.
                self.tables[name] = TableModel(name, [], uncertain=True, next_column=1000)

    def resync(self, table: str, columns: list[dict] | None) -> None:
        """What a probe at now saw of an uncertain table: its columns, or that it is gone."""
        model = self.tables.get(table)
        if model is None or not model.uncertain:
            return
        if columns is None:
            del self.tables[table]
            return
        model.columns = [
            ColumnModel(
                str(c["name"]),
                str(c["type"]),
                bool(c.get("nullable", True)),
                None if c.get("default") is None else _literal_of(str(c["type"]), c["default"]),
            )
            for c in columns
        ]
        names = {c.name for c in model.columns}
        model.indexes = {
            n: i for n, i in model.indexes.items() if all(c in names for c in i.columns)
        }
        model.next_column = max(model.next_column, 1000)
        model.rows.clear()
        model.uncertain = False

    # -- planning --------------------------------------------------------------------------
    def plan(
        self, rng: random.Random, now_s: float, weights: Mapping[str, float]
    ) -> DdlPlan | None:
        """A valid DDL for the model, kind drawn by weight among those possible now."""
        if len(self.tables) + self.pending_creates() < self.limits.min_tables:
            return self._create_table(rng, now_s)
        kinds = [k for k in DDL_KINDS if weights.get(k, 0) > 0]
        w = [float(weights[k]) for k in kinds]
        while kinds:
            i = rng.choices(range(len(kinds)), w)[0]
            plan = self._planners[kinds[i]](self, rng, now_s)
            if plan is not None:
                return plan
            del kinds[i]
            del w[i]
        return None

    def _literal(self, type_: str, current: str | None) -> str:
        n = self._next_literal
        self._next_literal += 1
        return default_literal(type_, n, current)

    def _new_column(
        self, rng: random.Random, name: str, type_: str, in_create: bool
    ) -> ColumnModel:
        """Nullable, nullable with a default, NOT NULL with a default, or (only in CREATE
        TABLE, where no stored row needs filling) NOT NULL without one."""
        shape = rng.random()
        if shape < 0.45:
            return ColumnModel(name, type_, True, None)
        if shape < 0.75:
            return ColumnModel(name, type_, True, self._literal(type_, None))
        if shape < 0.9 or not in_create:
            return ColumnModel(name, type_, False, self._literal(type_, None))
        return ColumnModel(name, type_, False, None)

    def _create_table(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        if len(self.tables) + self.pending_creates() >= self.limits.max_tables:
            return None
        name = f"t{self._next_table}"
        self._next_table += 1
        types = ["INT64"] + [rng.choice(BASE_TYPES) for _ in range(rng.randint(1, 3))]
        columns = [self._new_column(rng, f"c{i + 1}", t, True) for i, t in enumerate(types)]
        defs = [column_sql(c) for c in columns]

        def apply(model: SchemaModel, now: float) -> None:
            cols = [ColumnModel(c.name, c.type, c.nullable, c.default) for c in columns]
            model.tables[name] = TableModel(name, cols, next_column=len(cols) + 1)

        stmt = f"CREATE TABLE {name} ({', '.join(defs)})"
        return DdlPlan("create_table", name, stmt, (name,), apply)

    def _drop_table(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        free = self.free_tables()
        if len(self.usable_tables()) <= self.limits.min_tables or not free:
            return None
        t = rng.choice(free).name

        def apply(model: SchemaModel, now: float) -> None:
            dropped = model.tables.pop(t, None)
            if dropped is not None:
                for i in dropped.indexes.values():
                    model._ghosts.extend((t, c, now + model.limits.ghost_s) for c in i.columns)

        return DdlPlan("drop_table", t, f"DROP TABLE {t}", (t,), apply)

    def _rename_table(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        free = self.free_tables()
        if not free:
            return None
        t = rng.choice(free).name
        new = f"t{self._next_table}"
        self._next_table += 1

        def apply(model: SchemaModel, now: float) -> None:
            table = model.tables.pop(t, None)
            if table is not None:
                table.name = new
                model.tables[new] = table
            # a dropped index still in the catalog (STOPPING) moves with its table
            model._ghosts = [(new if tn == t else tn, c, u) for tn, c, u in model._ghosts]

        stmt = f"ALTER TABLE {t} RENAME TO {new}"
        return DdlPlan("rename_table", t, stmt, (t, new), apply, new_name=new)

    def _add_column(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        free = [t for t in self.free_tables() if len(t.columns) < self.limits.max_columns]
        if not free:
            return None
        table = rng.choice(free)
        t, c = table.name, table.fresh_column()
        col = self._new_column(rng, c, rng.choice(BASE_TYPES), False)
        text = column_sql(col)

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            if tm is not None:
                tm.columns.append(ColumnModel(col.name, col.type, col.nullable, col.default))

        return DdlPlan("add_column", t, f"ALTER TABLE {t} ADD COLUMN {text}", (t,), apply)

    def _indexed(self, table: TableModel, now_s: float) -> set[str]:
        cols = {c for i in table.indexes.values() for c in i.columns}
        self._ghosts = [g for g in self._ghosts if g[2] > now_s]
        cols.update(c for (tn, c, _) in self._ghosts if tn == table.name)
        return cols

    def _drop_column(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        options: list[tuple[TableModel, ColumnModel]] = []
        for table in self.free_tables():
            indexed = self._indexed(table, now_s)
            for col in table.columns:
                rest = [c for c in table.columns if c is not col]
                if col.name in indexed or not any(type_name(c.type) != "BOOLEAN" for c in rest):
                    continue
                options.append((table, col))
        if not options:
            return None
        table, col = rng.choice(options)
        t, c = table.name, col.name

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            if tm is not None:
                tm.columns = [x for x in tm.columns if x.name != c]
                for row in tm.rows.values():
                    row.pop(c, None)

        return DdlPlan("drop_column", t, f"ALTER TABLE {t} DROP COLUMN {c}", (t,), apply)

    def _rename_column(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        free = self.free_tables()
        if not free:
            return None
        table = rng.choice(free)
        col = rng.choice(table.columns)
        t, c, new = table.name, col.name, table.fresh_column()

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            if tm is None:
                return
            cm = tm.column(c)
            if cm is not None:
                cm.name = new
            for i in tm.indexes.values():
                i.columns = tuple(new if x == c else x for x in i.columns)
            for row in tm.rows.values():
                if c in row:
                    row[new] = row.pop(c)
            model._ghosts = [(tn, new if (tn, x) == (t, c) else x, u) for tn, x, u in model._ghosts]

        stmt = f"ALTER TABLE {t} RENAME COLUMN {c} TO {new}"
        return DdlPlan("rename_column", t, stmt, (t,), apply)

    def _pick_column(
        self, rng: random.Random, ok: Callable[[TableModel, ColumnModel], bool]
    ) -> tuple[TableModel, ColumnModel] | None:
        options = [(t, c) for t in self.free_tables() for c in t.columns if ok(t, c)]
        return rng.choice(options) if options else None

    def _alter_type(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        picked = self._pick_column(rng, lambda t, c: widening_of(c.type, rng) is not None)
        if picked is None:
            return None
        table, col = picked
        t, c = table.name, col.name
        new_type = widening_of(col.type, rng)
        assert new_type is not None

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            cm = tm.column(c) if tm is not None else None
            if cm is not None:
                cm.type = new_type

        stmt = f"ALTER TABLE {t} ALTER COLUMN {c} SET DATA TYPE {new_type}"
        return DdlPlan("alter_type", t, stmt, (t,), apply)

    def _column_change(
        self,
        rng: random.Random,
        kind: str,
        ok: Callable[[TableModel, ColumnModel], bool],
        clause: Callable[[ColumnModel], str],
        change: Callable[[ColumnModel, ColumnModel], None],
    ) -> DdlPlan | None:
        picked = self._pick_column(rng, ok)
        if picked is None:
            return None
        table, col = picked
        t, c = table.name, col.name
        text = clause(col)
        target = ColumnModel(col.name, col.type, col.nullable, col.default)
        change(target, col)

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            cm = tm.column(c) if tm is not None else None
            if cm is not None:
                cm.nullable, cm.default = target.nullable, target.default

        return DdlPlan(kind, t, f"ALTER TABLE {t} ALTER COLUMN {c} {text}", (t,), apply)

    def _set_not_null(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        # The catalog does not check stored rows: a read fills a stored null of a NOT NULL
        # column with its default, which no history can tell from a lost write, and an index
        # keeps the null it was given (a stale entry). So SET NOT NULL only on a column with a
        # default that no row written so far holds null in and no index covers; from the plan
        # on, writers send no NULL for it.
        def safe(t: TableModel, c: ColumnModel) -> bool:
            if not c.nullable or c.default is None or c.name in self._indexed(t, now_s):
                return False
            return all(row.get(c.name) is not None for row in t.rows.values())

        def change(new: ColumnModel, old: ColumnModel) -> None:
            new.nullable = False
            old.no_nulls = True

        return self._column_change(rng, "set_not_null", safe, lambda c: "SET NOT NULL", change)

    def _drop_not_null(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        return self._column_change(
            rng,
            "drop_not_null",
            lambda t, c: not c.nullable,
            lambda c: "DROP NOT NULL",
            lambda new, old: setattr(new, "nullable", True),
        )

    def _set_default(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        picked = self._pick_column(rng, lambda t, c: True)
        if picked is None:
            return None
        table, col = picked
        literal = self._literal(col.type, col.default)
        return self._column_change(
            rng,
            "set_default",
            lambda t, c: t is table and c is col,
            lambda c: f"SET DEFAULT {literal}",
            lambda new, old: setattr(new, "default", literal),
        )

    def _drop_default(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        return self._column_change(
            rng,
            "drop_default",
            lambda t, c: c.default is not None,
            lambda c: "DROP DEFAULT",
            lambda new, old: setattr(new, "default", None),
        )

    def _create_index(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        free = [t for t in self.free_tables() if len(t.indexes) < self.limits.max_indexes]
        if not free:
            return None
        table = rng.choice(free)
        width = 2 if len(table.columns) > 1 and rng.random() < 0.2 else 1
        cols = tuple(c.name for c in rng.sample(table.columns, width))
        name = f"i{self._next_index}"
        self._next_index += 1
        t = table.name

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            if tm is not None:
                tm.indexes[name] = IndexModel(name, cols, now)

        stmt = f"CREATE INDEX {name} ON {t} ({', '.join(cols)})"
        return DdlPlan("create_index", t, stmt, (t,), apply)

    def _drop_index(self, rng: random.Random, now_s: float) -> DdlPlan | None:
        options = [(t, i) for t in self.free_tables() for i in t.indexes.values()]
        if not options:
            return None
        table, index = rng.choice(options)
        t, name = table.name, index.name

        def apply(model: SchemaModel, now: float) -> None:
            tm = model.tables.get(t)
            if tm is not None and name in tm.indexes:
                dropped = tm.indexes.pop(name)
                model._ghosts.extend((t, c, now + model.limits.ghost_s) for c in dropped.columns)

        return DdlPlan("drop_index", t, f"DROP INDEX {name}", (t,), apply)

    _planners: ClassVar[dict[str, Planner]] = {
        "create_table": _create_table,
        "drop_table": _drop_table,
        "rename_table": _rename_table,
        "add_column": _add_column,
        "drop_column": _drop_column,
        "rename_column": _rename_column,
        "alter_type": _alter_type,
        "set_not_null": _set_not_null,
        "drop_not_null": _drop_not_null,
        "set_default": _set_default,
        "drop_default": _drop_default,
        "create_index": _create_index,
        "drop_index": _drop_index,
    }


def _diverged(completion: Mapping[str, Any]) -> bool:
    """A definite refusal that says the model and the catalog disagree about the table."""
    code = (completion.get("error") or {}).get("code")
    return completion.get("type") == "fail" and code in ("DDL_INVALID", "TABLE_NOT_FOUND")


def column_sql(col: ColumnModel) -> str:
    """The column definition of CREATE TABLE / ADD COLUMN."""
    text = f"{col.name} {col.type}"
    if not col.nullable:
        text += " NOT NULL"
    if col.default is not None:
        text += f" DEFAULT {col.default}"
    return text


def _literal_of(type_: str, value: Any) -> str:
    """A SQL literal for a default value a probe reported (JSON encoding)."""
    name = type_name(type_)
    if name == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    if name == "VARCHAR":
        return "'" + str(value).replace("'", "''") + "'"
    if name == "VARBINARY":
        return f"X'{value}'"
    return str(value)
