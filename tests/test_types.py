"""The SQL types: parsing, value validation in the JSON encoding, widenings and widened values."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemasync.types import (
    SqlType,
    TypeInvalid,
    canonical_type,
    conforms,
    literal_to_value,
    normalize_value,
    parse_type,
    value_problem,
    widen_value,
    widens,
)

T = parse_type


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("INT32", "INT32"),
        ("int64", "INT64"),
        (" Float ", "FLOAT"),
        ("DOUBLE", "DOUBLE"),
        ("decimal( 10 , 2 )", "DECIMAL(10,2)"),
        ("DECIMAL(38,0)", "DECIMAL(38,0)"),
        ("varchar(16)", "VARCHAR(16)"),
        ("VARBINARY(3)", "VARBINARY(3)"),
        ("boolean", "BOOLEAN"),
        ("TIMESTAMP", "TIMESTAMP"),
    ],
)
def test_parse_type_canonical(text: str, canonical: str) -> None:
    assert canonical_type(text) == canonical
    assert str(parse_type(text)) == canonical
    assert parse_type(canonical) == parse_type(text)


@pytest.mark.parametrize(
    "text",
    [
        "INT",
        "VARCHAR",
        "VARCHAR(0)",
        "VARCHAR(1,2)",
        "DECIMAL(5)",
        "DECIMAL(2,3)",
        "DECIMAL(39,0)",
        "INT32(4)",
        "BOOLEAN()",
        "",
        "VARCHAR(-1)",
    ],
)
def test_parse_type_rejects(text: str) -> None:
    with pytest.raises(TypeInvalid):
        parse_type(text)


@pytest.mark.parametrize(
    ("type_", "good", "bad"),
    [
        ("INT32", [0, -(2**31), 2**31 - 1], [2**31, -(2**31) - 1, 1.0, True, "1"]),
        ("INT64", [2**63 - 1, -(2**63)], [2**63, 1.5, False, "5"]),
        ("FLOAT", [0, 1.5, -3.4e38], [3.5e38, float("nan"), float("inf"), True, "1.0"]),
        ("DOUBLE", [1, 1e308], [float("inf"), "x", False]),
        (
            "DECIMAL(5,2)",
            ["123.45", "-0.5", "0", "12.300"],
            ["1234.5", "1.234", 1, "abc", "NaN", "1e999999999", " 1", "1_0", "1e-99999"],
        ),
        ("VARCHAR(3)", ["", "abc", "ÿÿÿ"], ["abcd", 1, b"ab"]),
        ("VARBINARY(2)", ["", "00ff", "ABcd"], ["00ff00", "0", "zz", 5]),
        ("BOOLEAN", [True, False], [0, 1, "true"]),
        ("TIMESTAMP", [0, 1_700_000_000_000_000, -1], [1.5, "2024-01-01", True]),
    ],
)
def test_value_problem(type_: str, good: list[object], bad: list[object]) -> None:
    t = parse_type(type_)
    assert conforms(t, None)
    for v in good:
        assert value_problem(t, v) is None, v
    for v in bad:
        assert value_problem(t, v) is not None, v


def test_normalize_value() -> None:
    assert normalize_value(T("DECIMAL(5,2)"), "12.3") == "12.30"
    assert normalize_value(T("DECIMAL(5,2)"), "-0.5") == "-0.50"
    assert normalize_value(T("DECIMAL(3,0)"), "7") == "7"
    assert normalize_value(T("DECIMAL(38,0)"), "9" * 38) == "9" * 38
    assert normalize_value(T("VARBINARY(4)"), "ABcd") == "abcd"
    assert normalize_value(T("DOUBLE"), 3) == 3.0
    assert normalize_value(T("INT32"), None) is None
    with pytest.raises(TypeInvalid):
        normalize_value(T("INT32"), 2**40)


ALL_TYPES = [
    T(s)
    for s in (
        "INT32",
        "INT64",
        "FLOAT",
        "DOUBLE",
        "DECIMAL(5,2)",
        "DECIMAL(7,2)",
        "DECIMAL(7,3)",
        "DECIMAL(2,2)",
        "VARCHAR(4)",
        "VARCHAR(5)",
        "VARCHAR(11)",
        "VARCHAR(20)",
        "VARBINARY(4)",
        "VARBINARY(8)",
        "BOOLEAN",
        "TIMESTAMP",
    )
]

EXPECTED_WIDENINGS = {
    ("INT32", "INT64"),
    ("FLOAT", "DOUBLE"),
    ("DECIMAL(5,2)", "DECIMAL(7,2)"),
    ("DECIMAL(2,2)", "DECIMAL(5,2)"),
    ("DECIMAL(2,2)", "DECIMAL(7,2)"),
    ("VARCHAR(4)", "VARCHAR(5)"),
    ("VARCHAR(4)", "VARCHAR(11)"),
    ("VARCHAR(4)", "VARCHAR(20)"),
    ("VARCHAR(5)", "VARCHAR(11)"),
    ("VARCHAR(5)", "VARCHAR(20)"),
    ("VARCHAR(11)", "VARCHAR(20)"),
    ("VARBINARY(4)", "VARBINARY(8)"),
    # seed 001: anything to VARCHAR with enough capacity (exact text forms only)
    ("INT32", "VARCHAR(11)"),
    ("INT32", "VARCHAR(20)"),
    ("INT64", "VARCHAR(20)"),
    ("BOOLEAN", "VARCHAR(5)"),
    ("BOOLEAN", "VARCHAR(11)"),
    ("BOOLEAN", "VARCHAR(20)"),
    ("DECIMAL(5,2)", "VARCHAR(11)"),
    ("DECIMAL(5,2)", "VARCHAR(20)"),
    ("DECIMAL(7,2)", "VARCHAR(11)"),
    ("DECIMAL(7,2)", "VARCHAR(20)"),
    ("DECIMAL(7,3)", "VARCHAR(11)"),
    ("DECIMAL(7,3)", "VARCHAR(20)"),
    ("DECIMAL(2,2)", "VARCHAR(5)"),
    ("DECIMAL(2,2)", "VARCHAR(11)"),
    ("DECIMAL(2,2)", "VARCHAR(20)"),
}


def test_widens_is_exactly_the_listed_set() -> None:
    found = {(str(a), str(b)) for a, b in itertools.product(ALL_TYPES, ALL_TYPES) if widens(a, b)}
    assert found == EXPECTED_WIDENINGS


def test_narrowing_and_other_changes_do_not_widen() -> None:
    for a, b in [
        ("INT64", "INT32"),
        ("DOUBLE", "FLOAT"),
        ("DECIMAL(7,2)", "DECIMAL(5,2)"),
        ("DECIMAL(5,2)", "DECIMAL(7,3)"),
        ("VARCHAR(5)", "VARCHAR(4)"),
        ("INT32", "DOUBLE"),
        ("INT64", "VARCHAR(19)"),
        ("DECIMAL(2,2)", "VARCHAR(4)"),
        ("TIMESTAMP", "VARCHAR(20)"),
        ("VARCHAR(5)", "INT32"),
        ("INT32", "INT32"),
    ]:
        assert not widens(T(a), T(b)), (a, b)
    with pytest.raises(TypeInvalid):
        widen_value(T("INT64"), T("INT32"), 5)


def values_of(t: SqlType) -> st.SearchStrategy[object]:
    """Every JSON-encoded value a column of type t may hold (NULL included)."""
    if t.name == "INT32":
        base: st.SearchStrategy[object] = st.integers(-(2**31), 2**31 - 1)
    elif t.name in ("INT64", "TIMESTAMP"):
        base = st.integers(-(2**63), 2**63 - 1)
    elif t.name == "FLOAT":
        base = st.floats(width=32, allow_nan=False, allow_infinity=False)
    elif t.name == "DOUBLE":
        base = st.floats(allow_nan=False, allow_infinity=False)
    elif t.name == "DECIMAL":
        assert t.precision is not None and t.scale is not None
        p, s = t.precision, t.scale
        base = st.integers(-(10**p) + 1, 10**p - 1).map(
            lambda n: normalize_value(t, str(n) if s == 0 else f"{n}E-{s}")
        )
    elif t.name == "VARCHAR":
        base = st.text(max_size=t.length)
    elif t.name == "VARBINARY":
        assert t.length is not None
        base = st.binary(max_size=t.length).map(bytes.hex)
    else:
        base = st.booleans()
    return st.one_of(st.none(), base)


WIDENING_PAIRS = sorted(EXPECTED_WIDENINGS)


@pytest.mark.parametrize(("old", "new"), WIDENING_PAIRS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_widened_value_is_a_value_of_the_new_type(old: str, new: str, data: st.DataObject) -> None:
    a, b = T(old), T(new)
    v = data.draw(values_of(a))
    assert conforms(a, v)
    w = widen_value(a, b, v)
    assert conforms(b, w), (v, w)
    assert (w is None) == (v is None)
    json.dumps(w)
    if b.name == "VARCHAR" and a.name in ("INT32", "INT64") and v is not None:
        assert int(str(w)) == v  # exact: the number reads back
    if a.name == b.name and a.name != "FLOAT":
        assert w == v


@pytest.mark.parametrize(
    ("type_", "kind", "text", "value"),
    [
        ("INT32", "int", "-7", -7),
        ("INT64", "int", "9000000000", 9_000_000_000),
        ("DOUBLE", "decimal", "1.5", 1.5),
        ("FLOAT", "int", "2", 2.0),
        ("DECIMAL(5,2)", "decimal", "1.5", "1.50"),
        ("DECIMAL(5,2)", "string", "3", "3.00"),
        ("VARCHAR(3)", "string", "it's"[:3], "it'"),
        ("VARBINARY(2)", "hex", "0aff", "0aff"),
        ("BOOLEAN", "bool", "TRUE", True),
        ("BOOLEAN", "bool", "false", False),
        ("TIMESTAMP", "int", "123", 123),
        ("TIMESTAMP", "string", "1970-01-01T00:00:01", 1_000_000),
        ("TIMESTAMP", "string", "1970-01-01T01:00:00+01:00", 0),
        ("INT32", "null", "NULL", None),
    ],
)
def test_literal_to_value(type_: str, kind: str, text: str, value: object) -> None:
    assert literal_to_value(T(type_), kind, text) == value


@pytest.mark.parametrize(
    ("type_", "kind", "text"),
    [
        ("INT32", "int", "3000000000"),
        ("INT32", "decimal", "1.5"),
        ("INT32", "string", "1"),
        ("DECIMAL(3,1)", "decimal", "1.25"),
        ("VARCHAR(2)", "string", "abc"),
        ("VARCHAR(2)", "int", "1"),
        ("VARBINARY(1)", "hex", "0102"),
        ("BOOLEAN", "int", "1"),
        ("TIMESTAMP", "string", "yesterday"),
    ],
)
def test_literal_to_value_rejects(type_: str, kind: str, text: str) -> None:
    with pytest.raises(TypeInvalid):
        literal_to_value(T(type_), kind, text)
