"""The checker's own model of the catalog's column types: what a type string of catalog.jsonl
means and which type changes are exact conversions (seed 001), kept apart from the system under
test so that the judge never borrows the rules it judges.

Type strings are the interface types of docs/interfaces.md (`INT32`, `DECIMAL(12,2)`,
`VARCHAR(24)`, ...). A string outside that list is not an error of the run: the checker says it
does not know the type, and leaves the values of such a column unjudged.

Exact conversions (seed 001, "Column type"): integral to a wider integral (INT32 -> INT64),
FLOAT -> DOUBLE, DECIMAL to more precision at the same scale (system.md), a longer VARCHAR or
VARBINARY, and "anything to VARCHAR with enough capacity". A value converts to text exactly only
where the interface gives its values one text form with a longest spelling: integers (decimal
digits), BOOLEAN (TRUE/FALSE) and DECIMAL (digits with exactly `scale` fraction digits). FLOAT,
DOUBLE, TIMESTAMP and VARBINARY travel as JSON numbers or hex with no text form of their own, so
"enough capacity" has no meaning for them and the change is not exact. TIMESTAMP has no precision
parameter, so the seed's date-time widening has nothing to widen.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# The integral types by width; each holds every value of the ones before it.
INTEGRAL = ("INT32", "INT64")
INTEGRAL_BITS = {"INT32": 32, "INT64": 64}
FLOATING = ("FLOAT", "DOUBLE")
PLAIN = (*INTEGRAL, *FLOATING, "BOOLEAN", "TIMESTAMP")
SIZED = ("VARCHAR", "VARBINARY")
KNOWN = (*PLAIN, *SIZED, "DECIMAL")

_SPELLING = re.compile(r"\s*([A-Za-z][A-Za-z0-9]*)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*")


@dataclass(frozen=True)
class SqlType:
    """A known column type; `length` for VARCHAR/VARBINARY, `precision`/`scale` for DECIMAL."""

    base: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None


@functools.lru_cache(maxsize=4096)
def column_type(text: str) -> SqlType | None:
    """The type a catalog type string names, or None when the checker does not know it (an
    unknown name, or parameters that do not fit the name). Cached: a long catalog repeats the
    same few strings in every version."""
    m = _SPELLING.fullmatch(text)
    if m is None:
        return None
    base = m.group(1).upper()
    a = None if m.group(2) is None else int(m.group(2))
    b = None if m.group(3) is None else int(m.group(3))
    if base in PLAIN:
        return SqlType(base) if a is None else None
    if base in SIZED:
        return SqlType(base, length=a) if a is not None and b is None and a >= 1 else None
    if base == "DECIMAL" and a is not None and b is not None and a >= 1 and 0 <= b <= a:
        return SqlType(base, precision=a, scale=b)
    return None


def longest_text(t: SqlType) -> int | None:
    """Characters of the longest text form of a value of `t`, or None if `t` has no text form.

    Integers: a minus sign and every digit of the most negative value. BOOLEAN: `FALSE`.
    DECIMAL(p,s): a sign, the p - s integer digits (a lone 0 when there are none), and a point
    with s digits when s > 0."""
    if t.base in INTEGRAL:
        return len(str(-(2 ** (INTEGRAL_BITS[t.base] - 1))))
    if t.base == "BOOLEAN":
        return len("FALSE")
    if t.base == "DECIMAL":
        assert t.precision is not None and t.scale is not None
        whole = max(t.precision - t.scale, 1)
        return 1 + whole + (t.scale + 1 if t.scale > 0 else 0)
    return None


def exact_conversion(old: SqlType, new: SqlType) -> bool:
    """True when `new` is another type into which every value of `old` converts exactly."""
    if old == new:
        return False
    if old.base in INTEGRAL and new.base in INTEGRAL:
        return INTEGRAL_BITS[new.base] > INTEGRAL_BITS[old.base]
    if old.base in FLOATING and new.base in FLOATING:
        return FLOATING.index(new.base) > FLOATING.index(old.base)
    if old.base == "DECIMAL" and new.base == "DECIMAL":
        assert old.precision is not None and new.precision is not None
        return new.scale == old.scale and new.precision > old.precision
    if old.base in SIZED and new.base == old.base:
        assert old.length is not None and new.length is not None
        return new.length > old.length
    if new.base == "VARCHAR":
        assert new.length is not None
        width = longest_text(old)
        return width is not None and new.length >= width
    return False


def same_value(old: SqlType, new: SqlType, old_value: Any, new_value: Any) -> bool:
    """Is `new_value` (JSON encoding, of type `new`) what `old_value` (of `old`) converts to?

    A type change carries a column's default into the new type: that re-encoding (7 -> "7" for
    INT32 -> VARCHAR) is the same default, not a default change. BOOLEAN text is compared
    without case, as SQL engines spell CAST(TRUE AS VARCHAR) either way."""
    if old_value is None or new_value is None:
        return old_value is None and new_value is None
    if new.base == "VARCHAR" and old.base != "VARCHAR":
        if not isinstance(new_value, str):
            return False
        if old.base == "BOOLEAN":
            return isinstance(old_value, bool) and new_value.upper() == str(old_value).upper()
        if old.base == "DECIMAL":
            return _decimal(old_value) is not None and new_value == _decimal_text(old, old_value)
        return _integer(old_value) and new_value == str(old_value)
    if old.base in ("DECIMAL", *INTEGRAL, *FLOATING):
        a, b = _decimal(old_value), _decimal(new_value)
        return a is not None and a == b
    if old.base == "VARBINARY":
        return isinstance(new_value, str) and str(old_value).lower() == new_value.lower()
    return same_json(old_value, new_value)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: 1 and 1.0 are one number, but true is not 1 (as Python would have it)."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _decimal(value: Any) -> Decimal | None:
    """A number or a decimal string as an exact Decimal (None when it is neither)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        d = Decimal(value)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _decimal_text(t: SqlType, value: Any) -> str | None:
    """A DECIMAL value's text: exactly `scale` fraction digits, no sign on zero."""
    d = _decimal(value)
    if d is None or t.scale is None:
        return None
    text = format(d.quantize(Decimal(1).scaleb(-t.scale)), "f")
    return text.removeprefix("-") if Decimal(text) == 0 else text
