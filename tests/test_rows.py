"""Rows against schemas: validation of written rows and the upgrade of a stored row, by column
id, across every compatible change (and the incompatible ones the storage must still read)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemasync import compat
from schemasync.catalog import CatalogHistory, Table, next_catalog
from schemasync.ddl import DdlInvalid, parse_ddl
from schemasync.rows import (
    RowInvalid,
    complete_row,
    conforms,
    row_problems,
    schema_path,
    to_ids,
    to_names,
    upgrade_between,
    upgrade_row,
    upgrade_step,
)
from schemasync.types import parse_type, widen_value

BASE = (
    "CREATE TABLE t (a INT32, b VARCHAR(4) DEFAULT 'x', c DECIMAL(5,2) NOT NULL DEFAULT 1,"
    " f FLOAT, bin VARBINARY(2), flag BOOLEAN NOT NULL, ts TIMESTAMP)"
)


def history(*stmts: str) -> CatalogHistory:
    h = CatalogHistory()
    for stmt in stmts:
        cat = h.latest()
        h.append(next_catalog(cat, parse_ddl(stmt), stmt, cat.safe_ts + (5 << 16), 500))
    return h


def table_t(h: CatalogHistory, version: int | None = None) -> Table:
    cat = h.latest() if version is None else h.at_version(version)
    found = next(iter(cat.tables.values()))
    return found


def test_complete_row_fills_defaults_and_normalizes() -> None:
    t = table_t(history(BASE))
    row = complete_row(t, {"a": 5, "c": "2.5", "flag": True, "bin": "ABCD"})
    assert row == {
        "a": 5,
        "b": "x",
        "c": "2.50",
        "f": None,
        "bin": "abcd",
        "flag": True,
        "ts": None,
    }
    assert list(row) == [c.name for c in t.columns]
    assert conforms(t, row)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"a": 5}, "flag is NOT NULL and has no default"),
        ({"flag": True, "zz": 1}, "zz does not exist"),
        ({"flag": None}, "flag is NOT NULL"),
        ({"flag": True, "c": None}, "c is NOT NULL"),
        ({"flag": True, "a": 2**31}, "out of range"),
        ({"flag": True, "b": "toolong"}, "does not fit"),
        ({"flag": 1}, "BOOLEAN"),
    ],
)
def test_complete_row_rejects(row: dict[str, Any], why: str) -> None:
    t = table_t(history(BASE))
    with pytest.raises(RowInvalid, match=why):
        complete_row(t, row)


def test_row_problems_complete_rows() -> None:
    t = table_t(history(BASE))
    good = complete_row(t, {"flag": False})
    assert row_problems(t, good) == []
    missing = dict(good)
    del missing["b"]
    assert row_problems(t, missing) == ["column b is missing"]
    assert row_problems(t, missing, complete=False) == []


def test_ids_round_trip() -> None:
    t = table_t(history(BASE))
    row = complete_row(t, {"flag": False, "a": 1})
    assert to_names(t, to_ids(t, row)) == row
    with pytest.raises(RowInvalid):
        to_ids(t, {"nope": 1})


WRITTEN = {"a": 7, "b": "ab", "c": "3.25", "f": 1.5, "bin": "00ff", "flag": True, "ts": 99}

# (compatible DDL, expected row after upgrading WRITTEN)
COMPATIBLE: list[tuple[str, dict[str, Any]]] = [
    ("ALTER TABLE t ADD COLUMN z INT32", {**WRITTEN, "z": None}),
    ("ALTER TABLE t ADD COLUMN z VARCHAR(3) DEFAULT 'q'", {**WRITTEN, "z": "q"}),
    ("ALTER TABLE t ADD COLUMN z INT64 NOT NULL DEFAULT 7", {**WRITTEN, "z": 7}),
    ("ALTER TABLE t ALTER COLUMN c DROP NOT NULL", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE INT64", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN f SET DATA TYPE DOUBLE", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE DECIMAL(9,2)", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN b SET DATA TYPE VARCHAR(40)", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN bin SET DATA TYPE VARBINARY(9)", WRITTEN),
    ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE VARCHAR(11)", {**WRITTEN, "a": "7"}),
    ("ALTER TABLE t ALTER COLUMN flag SET DATA TYPE VARCHAR(5)", {**WRITTEN, "flag": "TRUE"}),
    ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE VARCHAR(8)", {**WRITTEN, "c": "3.25"}),
    (
        "ALTER TABLE t RENAME COLUMN a TO a2",
        {"a2": 7, **{k: v for k, v in WRITTEN.items() if k != "a"}},
    ),
    ("CREATE INDEX ib ON t (b)", WRITTEN),
    ("CREATE TABLE u (x INT32)", WRITTEN),
]


@pytest.mark.parametrize(("stmt", "expected"), COMPATIBLE)
def test_upgrade_across_each_compatible_change(stmt: str, expected: dict[str, Any]) -> None:
    h = history(BASE, stmt)
    old, new = table_t(h, 2), table_t(h)
    assert compat.forward_compatible(old, new, True)
    written = complete_row(old, WRITTEN)
    upgraded = upgrade_row(written, [old, new] if new != old else [old])
    assert upgraded == expected
    assert list(upgraded) == [c.name for c in new.columns]
    assert conforms(new, upgraded)
    # nothing lost: every old column's value is still there, by id
    old_by_id = to_ids(old, written)
    new_by_id = to_ids(new, upgraded)
    for c in old.columns:
        nc = new.column_by_id(c.id)
        assert nc is not None
        assert new_by_id[c.id] == widen_value(
            parse_type(c.type), parse_type(nc.type), old_by_id[c.id]
        )


def test_upgrade_across_incompatible_changes_still_reads() -> None:
    h = history(
        BASE,
        "ALTER TABLE t DROP COLUMN b",
        "ALTER TABLE t ALTER COLUMN a SET DEFAULT 3",
        "ALTER TABLE t ALTER COLUMN a SET NOT NULL",
    )
    written = complete_row(table_t(h, 2), {"flag": False})
    assert written["a"] is None
    upgraded = upgrade_between(written, h.table_versions(table_t(h).id), 1, 4)
    assert "b" not in upgraded
    assert upgraded["a"] == 3  # SET NOT NULL filled the stored NULL with the default
    assert conforms(table_t(h), upgraded)


def test_added_default_is_the_one_at_add_time() -> None:
    """A row written before ADD COLUMN reads the default the column had when it was added, as
    if the store had rewritten every row then; a later SET DEFAULT does not change it."""
    h = history(
        BASE,
        "ALTER TABLE t ADD COLUMN z INT32 DEFAULT 5",
        "ALTER TABLE t ALTER COLUMN z SET DEFAULT 6",
    )
    versions = h.table_versions(table_t(h).id)
    written = complete_row(versions[1], {"flag": True})
    assert upgrade_between(written, versions, 1, 3)["z"] == 5
    assert complete_row(versions[3], {"flag": True})["z"] == 6


def test_compound_path_of_many_steps() -> None:
    h = history(
        BASE,
        "ALTER TABLE t ADD COLUMN z INT32 DEFAULT 1",
        "ALTER TABLE t RENAME COLUMN z TO y",
        "ALTER TABLE t ALTER COLUMN y SET DATA TYPE INT64",
        "ALTER TABLE t ALTER COLUMN y SET DATA TYPE VARCHAR(20)",
        "ALTER TABLE t RENAME COLUMN a TO z",
        "ALTER TABLE t ALTER COLUMN z SET DATA TYPE VARCHAR(11)",
    )
    versions = h.table_versions(table_t(h).id)
    written = complete_row(versions[1], WRITTEN)
    upgraded = upgrade_between(written, versions, 1, 7)
    assert upgraded["y"] == "1"
    assert upgraded["z"] == "7"  # the new z is old a, by id
    assert conforms(versions[7], upgraded)
    assert upgrade_between(written, versions, 1, 1) == written
    with pytest.raises(ValueError, match="downgrade"):
        schema_path(versions, 3, 2)
    with pytest.raises(ValueError, match="not known"):
        schema_path(versions, 1, 9)
    with pytest.raises(ValueError, match="schema path"):
        upgrade_row(written, [versions[2], versions[1]])
    other = table_t(history("CREATE TABLE o (a INT32)"))
    with pytest.raises(ValueError, match="table id"):
        upgrade_step({"a": 1}, other, versions[2])


ROW_VALUES = st.fixed_dictionaries(
    {
        "a": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        "b": st.one_of(st.none(), st.text(max_size=4)),
        "c": st.integers(-99999, 99999).map(lambda n: f"{n}E-2"),
        "f": st.one_of(st.none(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
        "bin": st.one_of(st.none(), st.binary(max_size=2).map(bytes.hex)),
        "flag": st.booleans(),
        "ts": st.one_of(st.none(), st.integers(0, 2**62)),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    row=ROW_VALUES,
    steps=st.lists(st.sampled_from([s for s, _ in COMPATIBLE]), min_size=1, max_size=6),
)
def test_any_compatible_path_keeps_every_value(row: dict[str, Any], steps: list[str]) -> None:
    h = CatalogHistory()
    for stmt in (BASE, *steps):
        cat = h.latest()
        try:
            h.append(next_catalog(cat, parse_ddl(stmt), stmt, cat.safe_ts + 1, 500))
        except DdlInvalid:  # a step that does not apply after the previous ones (e.g. twice)
            continue
    versions = h.table_versions(table_t(h, 2).id)
    last = max(versions)
    path = schema_path(versions, 1, last)
    assert all(compat.forward_compatible(a, b, True) for a, b in itertools.pairwise(path))
    written = complete_row(versions[1], row)
    upgraded = upgrade_row(written, path)
    assert conforms(versions[last], upgraded)
    by_id = to_ids(versions[last], upgraded)
    for c in versions[1].columns:
        assert c.id in by_id
        if written[c.name] is None:
            assert by_id[c.id] is None
