"""The checker's own forward-compatibility rules (`checker.forward_compat`) against the system's
(`schemasync.compat`), on every kind of simple change, every ordered pair of the types the
workload and the system use, and every nullability and default around them.

The checker must reach its verdicts without the system's code (issue 19: an oracle of its own);
this test is where the two are held against each other. Each side's answer for a step is its
verdict and the set of change kinds it finds incompatible; any disagreement fails, naming the
case. The `drop-column-compatible` bug toggle is the one place they must differ: the checker has
no such switch, since a system that commits across a DROP COLUMN is what it must catch."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from checker import forward_compat as oracle
from schemasync import compat as sut
from schemasync import types as sut_types
from schemasync.catalog import Table as SutTable

# The workload's base types (workloads/column_types.py) and its widenings, the system's test
# types, and VARCHARs on both sides of every type's longest text, plus one type nobody knows.
TYPES: tuple[str, ...] = (
    "INT32",
    "INT64",
    "FLOAT",
    "DOUBLE",
    "BOOLEAN",
    "TIMESTAMP",
    "DECIMAL(2,2)",
    "DECIMAL(3,0)",
    "DECIMAL(5,2)",
    "DECIMAL(9,2)",
    "DECIMAL(12,2)",
    "DECIMAL(14,2)",
    "DECIMAL(12,3)",
    "VARCHAR(4)",
    "VARCHAR(5)",
    "VARCHAR(10)",
    "VARCHAR(11)",
    "VARCHAR(13)",
    "VARCHAR(14)",
    "VARCHAR(19)",
    "VARCHAR(20)",
    "VARCHAR(24)",
    "VARCHAR(40)",
    "VARBINARY(2)",
    "VARBINARY(16)",
    "VARBINARY(20)",
    "GEOMETRY",
)
CANDIDATES: dict[str, tuple[Any, ...]] = {
    "INT32": (7, -12),
    "INT64": (7, -12),
    "FLOAT": (1.5, -0.25),
    "DOUBLE": (1.5, -0.25),
    "BOOLEAN": (True, False),
    "TIMESTAMP": (1_700_000_000_000_000, 0),
    "DECIMAL": ("1", "0.5", "-0.25", "3"),
    "VARCHAR": ("x", "yz"),
    "VARBINARY": ("0a", "ff01"),
}
DROP_COLUMN = frozenset({sut.DROP_COLUMN_COMPATIBLE})


def sample(type_: str, which: int) -> Any:
    """The `which`-th (0 or 1) of two different canonical values of `type_`."""
    try:
        t = sut_types.parse_type(type_)
    except sut_types.TypeInvalid:
        return ("POINT(1 2)", "POINT(3 4)")[which]
    fits = [
        sut_types.normalize_value(t, v)
        for v in CANDIDATES[t.name]
        if sut_types.value_problem(t, v) is None
    ]
    return fits[which]


def carried(old: str, new: str, value: Any) -> Any:
    """The default as the system's catalog re-encodes it for a type change it accepts."""
    try:
        a, b = sut_types.parse_type(old), sut_types.parse_type(new)
    except sut_types.TypeInvalid:
        return value
    return sut_types.widen_value(a, b, value) if sut_types.widens(a, b) else value


def col(cid: int, name: str, type_: str, nullable: bool = True, default: Any = None) -> dict:
    return {"id": cid, "name": name, "type": type_, "nullable": nullable, "default": default}


def table(tid: int, columns: list[dict], indexes: list[dict] | None = None, sv: int = 1) -> dict:
    return {"id": tid, "schema_version": sv, "columns": columns, "indexes": indexes or []}


def shape(c: dict) -> str:
    text = c["type"] + ("" if c["nullable"] else " NOT NULL")
    return text if c["default"] is None else f"{text} DEFAULT {json.dumps(c['default'])}"


@dataclass(frozen=True)
class Step:
    """One catalog step: the tables (by name) before and after, and what the step does."""

    name: str
    kinds: frozenset[str]
    before: dict[str, dict]
    after: dict[str, dict]


def one_table(name: str, kinds: set[str], old: dict, new: dict | None, new_name: str = "t") -> Step:
    after = {} if new is None else {new_name: {**new, "schema_version": 2}}
    return Step(name, frozenset(kinds), {"t": old}, after)


KEY = col(1, "k", "INT64", nullable=False, default=0)


def column_steps() -> Iterator[Step]:
    """Every change of one column c (each type, nullability and default) into every type,
    nullability and default, and its drop, rename, and drop-and-re-add."""
    for t in TYPES:
        for nullable in (True, False):
            for default in (None, sample(t, 0)):
                c = col(2, "c", t, nullable, default)
                old = table(1, [KEY, c])
                yield one_table(f"add column z {shape(c)}", {"add_column"}, table(1, [KEY]), old)
                yield one_table(f"drop column c {shape(c)}", {"drop_column"}, old, table(1, [KEY]))
                re_added = {**c, "id": 3}
                yield one_table(
                    f"drop and re-add column c {shape(c)}",
                    {"drop_column", "add_column"},
                    old,
                    table(1, [KEY, re_added]),
                )
                yield from _alterations(old, c)


def _alterations(old: dict, c: dict) -> Iterator[Step]:
    t, default = c["type"], c["default"]
    for u in TYPES:
        defaults = [None, sample(u, 0), sample(u, 1)]
        if default is not None:
            defaults.append(carried(t, u, default))
        unique = {json.dumps(d): d for d in defaults}.values()
        for nullable in (True, False):
            for d in unique:
                for rename in (False, True):
                    nc = {**c, "type": u, "nullable": nullable, "default": d}
                    if rename:
                        nc["name"] = "c2"
                    kinds = set()
                    kinds |= {"rename_column"} if rename else set()
                    kinds |= {"alter_type"} if u != t else set()
                    if nullable != c["nullable"]:
                        kinds.add("drop_not_null" if nullable else "set_not_null")
                    if json.dumps(d) != json.dumps(default):
                        kinds.add("default")
                    label = f"{'rename c to c2, ' if rename else ''}{shape(c)} -> {shape(nc)}"
                    yield one_table(label, kinds, old, table(1, [KEY, nc]))


def table_and_index_steps() -> Iterator[Step]:
    """Create, drop and rename a table, a change to another table, and every index change."""
    c = col(2, "c", "INT32")
    t = table(1, [KEY, c])
    other = table(2, [col(10, "o", "INT32")])
    yield Step("create table u", frozenset({"create_table"}), {"t": t}, {"t": t, "u": other})
    yield one_table("drop table t", {"drop_table"}, t, None)
    yield one_table("rename table t to t2", {"rename_table"}, t, t, new_name="t2")
    yield one_table(
        "rename table t to t2 and add a column",
        {"rename_table", "add_column"},
        t,
        table(1, [KEY, c, col(3, "z", "INT32")]),
        new_name="t2",
    )
    for name, kind, new_other in (
        ("drop column o of other", "drop_column", table(2, [], sv=2)),
        ("set default of other.o", "default", table(2, [col(10, "o", "INT32", default=5)], sv=2)),
    ):
        yield Step(
            name,
            frozenset({"other_table", kind}),
            {"t": t, "other": other},
            {"t": t, "other": new_other},
        )
    yield Step("drop table other", frozenset({"other_table"}), {"t": t, "other": other}, {"t": t})
    states = ("REGISTERED", "BUILDING", "AVAILABLE", "STOPPING")
    for with_id in (True, False):
        index = functools.partial(_index, with_id)
        ids = "with id" if with_id else "without id"
        for s in states:
            yield one_table(
                f"create index i1 {s} {ids}", {"index"}, t, table(1, [KEY, c], [index(s)])
            )
            yield one_table(
                f"drop index i1 {s} {ids}", {"index"}, table(1, [KEY, c], [index(s)]), t
            )
        for a, b in itertools.pairwise(states):
            yield one_table(
                f"index i1 {a} -> {b} {ids}",
                {"index"},
                table(1, [KEY, c], [index(a)]),
                table(1, [KEY, c], [index(b)]),
            )
        renamed = {**c, "name": "c2"}
        yield one_table(
            f"rename indexed column c {ids}",
            {"rename_column", "index"},
            table(1, [KEY, c], [index("AVAILABLE")]),
            table(1, [KEY, renamed], [index("AVAILABLE", ("c2",))]),
        )


def _index(with_id: bool, state: str, columns: tuple[str, ...] = ("c",)) -> dict:
    """Index i1 as catalog.jsonl holds it; a catalog from another system may lack the id."""
    i = {"name": "i1", "columns": list(columns), "state": state}
    return {"id": 20, **i} if with_id else i


STEPS: list[Step] = [*column_steps(), *table_and_index_steps()]


def judgments(
    step: Step, rename_compatible: bool, toggles: frozenset[str] = frozenset()
) -> Iterator[tuple[str, tuple[bool, list[str]], tuple[bool, list[str]]]]:
    """(table, the checker's answer, the system's answer) for each table before the step; an
    answer is the verdict and the sorted kinds of the changes found incompatible."""
    for name, old in step.before.items():
        new_name, new = next(
            ((n, x) for n, x in step.after.items() if x["id"] == old["id"]), (None, None)
        )
        mine = sorted(
            {
                c.kind
                for c in oracle.changes(old, new, name, new_name)
                if not oracle.change_compatible(c, rename_compatible)
            }
        )
        checker = oracle.forward_compatible(old, new, name, new_name, rename_compatible)
        old_t = SutTable.from_json(old, name)
        new_t = None if new is None else SutTable.from_json(new, new_name)
        theirs = sorted(
            {
                c.kind
                for c in sut.diff_tables(old_t, new_t)
                if not sut.change_compatible(c, rename_compatible, toggles)
            }
        )
        system = sut.forward_compatible(old_t, new_t, rename_compatible, toggles)
        yield name, (checker, mine), (system, theirs)


def test_the_cases_cover_every_change_kind_and_type_pair() -> None:
    kinds = set().union(*(s.kinds for s in STEPS))
    assert kinds >= {
        "add_column",
        "drop_column",
        "rename_column",
        "alter_type",
        "set_not_null",
        "drop_not_null",
        "default",
        "create_table",
        "drop_table",
        "rename_table",
        "other_table",
        "index",
    }
    pairs = {
        (s.before["t"]["columns"][1]["type"], s.after["t"]["columns"][1]["type"])
        for s in STEPS
        if "alter_type" in s.kinds
    }
    assert len(pairs) == len(TYPES) * (len(TYPES) - 1)
    assert len(STEPS) > 20_000


@pytest.mark.parametrize("rename_compatible", [True, False])
def test_checker_agrees_with_the_system_on_every_step(rename_compatible: bool) -> None:
    disagreements = [
        f"{step.name} [table {name}, rename_column_compatible={rename_compatible}]: "
        f"checker {mine}, schemasync {theirs}"
        for step in STEPS
        for name, mine, theirs in judgments(step, rename_compatible)
        if mine != theirs
    ]
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(
        disagreements[:40]
    )


def test_rename_column_is_what_the_run_says() -> None:
    step = next(s for s in STEPS if s.kinds == {"rename_column"})
    for flag in (True, False):
        ((_, (verdict, kinds), _),) = judgments(step, flag)
        assert verdict is flag and kinds == ([] if flag else ["rename_column"]), step.name


def test_the_drop_column_toggle_is_caught_not_followed() -> None:
    """With the bug toggle on, the system commits across a DROP COLUMN; the checker still calls
    it incompatible, and that is the only place the two differ."""
    differ = []
    for step in STEPS:
        for _, (checker, _), (toggled, _) in judgments(step, True, DROP_COLUMN):
            if checker != toggled:
                assert "drop_column" in step.kinds and checker is False and toggled, step.name
                differ.append(step.name)
    dropped = [s for s in STEPS if s.kinds == {"drop_column"}]
    assert len(dropped) == len(TYPES) * 4
    assert {s.name for s in dropped} <= set(differ)


def test_a_default_carried_through_a_widening_is_no_default_change() -> None:
    """INT32 7 -> VARCHAR(11) '7', DECIMAL(5,2) '1.00' -> VARCHAR(14), BOOLEAN -> 'TRUE': the
    catalog re-encodes the default, which the checker must not take for a SET DEFAULT."""
    for old_type, new_type, old, new in (
        ("INT32", "VARCHAR(11)", 7, "7"),
        ("INT32", "INT64", -12, -12),
        ("FLOAT", "DOUBLE", 1.5, 1.5),
        ("DECIMAL(5,2)", "VARCHAR(14)", "1.00", "1.00"),
        ("DECIMAL(5,2)", "DECIMAL(9,2)", "-0.25", "-0.25"),
        ("BOOLEAN", "VARCHAR(5)", True, "TRUE"),
        ("BOOLEAN", "VARCHAR(5)", False, "false"),
        ("VARBINARY(2)", "VARBINARY(16)", "0A", "0a"),
    ):
        before = table(1, [KEY, col(2, "c", old_type, default=old)])
        after = table(1, [KEY, col(2, "c", new_type, default=new)], sv=2)
        assert oracle.first_incompatible(before, after, "t", "t") is None, (old_type, new_type)
    before = table(1, [KEY, col(2, "c", "INT32", default=7)])
    after = table(1, [KEY, col(2, "c", "VARCHAR(11)", default="8")], sv=2)
    change = oracle.first_incompatible(before, after, "t", "t")
    assert change is not None and change.describe() == "set_default c (7 -> '8')"


def test_unknown_types_and_odd_spellings() -> None:
    from checker.sql_types import SqlType, column_type, longest_text

    assert column_type("GEOMETRY") is None
    assert column_type("VARCHAR") is None and column_type("VARCHAR(0)") is None
    assert column_type("DECIMAL(2,3)") is None and column_type("INT32(4)") is None
    assert column_type(" decimal( 5, 2) ") == SqlType("DECIMAL", precision=5, scale=2)
    assert column_type("varchar(16)") == SqlType("VARCHAR", length=16)
    # the longest text of each type is the longest value's own text
    for type_, longest in (
        ("INT32", -(2**31)),
        ("INT64", -(2**63)),
        ("DECIMAL(2,2)", "-0.99"),
        ("DECIMAL(3,0)", "-999"),
        ("DECIMAL(12,3)", "-999999999.999"),
    ):
        t = column_type(type_)
        assert t is not None and longest_text(t) == len(str(longest)), type_
        assert str(Decimal(str(longest))) == str(longest)
