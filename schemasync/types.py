"""The SQL column types of the catalog, their values and the widenings between them.

Values always travel in their JSON encoding (docs/interfaces.md): INT*/FLOAT/DOUBLE as numbers,
DECIMAL as a string with exactly `scale` fraction digits, VARCHAR as str, VARBINARY as a lowercase
hex string, BOOLEAN as bool, TIMESTAMP as int epoch microseconds. So a stored row, a wire row and
a history row are the same dict, and the checker judges values with the functions of this module.

Widenings (seed 001, "exact conversion from the old type to the new one", and system.md):
INT32 -> INT64; FLOAT -> DOUBLE; DECIMAL(p,s) -> DECIMAL(p',s) with p' > p (same scale);
VARCHAR(n) -> VARCHAR(m) and VARBINARY(n) -> VARBINARY(m) with m > n; and seed 001's "anything to
VARCHAR with enough capacity" for the types with one exact text form: INT32, INT64, BOOLEAN and
DECIMAL (FLOAT/DOUBLE, VARBINARY and TIMESTAMP have no canonical text here, so they do not).
TIMESTAMP has no precision parameter, so it has no widening.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

INT32 = "INT32"
INT64 = "INT64"
FLOAT = "FLOAT"
DOUBLE = "DOUBLE"
DECIMAL = "DECIMAL"
VARCHAR = "VARCHAR"
VARBINARY = "VARBINARY"
BOOLEAN = "BOOLEAN"
TIMESTAMP = "TIMESTAMP"

TYPE_NAMES: tuple[str, ...] = (
    INT32,
    INT64,
    FLOAT,
    DOUBLE,
    DECIMAL,
    VARCHAR,
    VARBINARY,
    BOOLEAN,
    TIMESTAMP,
)
MAX_DECIMAL_PRECISION = 38
MAX_LENGTH = 65536

_INT_RANGE = {INT32: (-(2**31), 2**31 - 1), INT64: (-(2**63), 2**63 - 1)}
_FLOAT32_MAX = struct.unpack(">f", bytes.fromhex("7f7fffff"))[0]
_TEXT_WIDTH = {INT32: 11, INT64: 20, BOOLEAN: 5}
_TYPE_RE = re.compile(
    r"^\s*([A-Za-z0-9]+)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$",
)
_HEX_RE = re.compile(r"^(?:[0-9a-fA-F]{2})*$")
_DECIMAL_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_DECIMAL_CONTEXT = Context(prec=2 * MAX_DECIMAL_PRECISION + 10)


class TypeInvalid(ValueError):
    """A type string or a value that does not fit the type system."""


@dataclass(frozen=True)
class SqlType:
    """One column type: `length` for VARCHAR/VARBINARY, `precision`/`scale` for DECIMAL."""

    name: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.name in (VARCHAR, VARBINARY):
            return f"{self.name}({self.length})"
        if self.name == DECIMAL:
            return f"{self.name}({self.precision},{self.scale})"
        return self.name


@functools.lru_cache(maxsize=4096)
def parse_type(text: str) -> SqlType:
    """Parse `INT32`, `DECIMAL(10,2)`, `varchar(16)`, ... into a SqlType; raises TypeInvalid.

    Cached: a catalog of 10^4 versions names the same few types 10^5 times (SqlType is frozen)."""
    m = _TYPE_RE.match(text)
    if m is None:
        raise TypeInvalid(f"not a type: {text!r}")
    name, a, b = m.group(1).upper(), m.group(2), m.group(3)
    if name not in TYPE_NAMES:
        raise TypeInvalid(f"unknown type {m.group(1)!r} (known: {', '.join(TYPE_NAMES)})")
    if name in (VARCHAR, VARBINARY):
        if a is None or b is not None:
            raise TypeInvalid(f"{name} needs one length: {name}(n)")
        length = int(a)
        if not 1 <= length <= MAX_LENGTH:
            raise TypeInvalid(f"{name} length must be in 1..{MAX_LENGTH}, got {length}")
        return SqlType(name, length=length)
    if name == DECIMAL:
        if a is None or b is None:
            raise TypeInvalid("DECIMAL needs precision and scale: DECIMAL(p,s)")
        p, s = int(a), int(b)
        if not 1 <= p <= MAX_DECIMAL_PRECISION:
            raise TypeInvalid(f"DECIMAL precision must be in 1..{MAX_DECIMAL_PRECISION}, got {p}")
        if not 0 <= s <= p:
            raise TypeInvalid(f"DECIMAL scale must be in 0..{p}, got {s}")
        return SqlType(name, precision=p, scale=s)
    if a is not None:
        raise TypeInvalid(f"{name} takes no parameters")
    return SqlType(name)


def canonical_type(text: str) -> str:
    """The canonical spelling of a type string (`decimal( 5, 2)` -> `DECIMAL(5,2)`)."""
    return str(parse_type(text))


def value_problem(t: SqlType, value: Any) -> str | None:
    """Why `value` (JSON encoding; None is SQL NULL) is not a value of `t`, or None if it is."""
    if value is None:
        return None
    if t.name in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{t} needs an integer, got {value!r}"
        lo, hi = _INT_RANGE[t.name]
        if not lo <= value <= hi:
            return f"{value} is out of range for {t}"
        return None
    if t.name in (FLOAT, DOUBLE):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{t} needs a number, got {value!r}"
        f = float(value)
        if not math.isfinite(f):
            return f"{t} needs a finite number, got {value!r}"
        if t.name == FLOAT and abs(f) > _FLOAT32_MAX:
            return f"{value!r} is out of range for FLOAT"
        return None
    if t.name == DECIMAL:
        return _decimal_problem(t, value)
    if t.name == VARCHAR:
        if not isinstance(value, str):
            return f"{t} needs a string, got {value!r}"
        assert t.length is not None
        if len(value) > t.length:
            return f"string of length {len(value)} does not fit {t}"
        return None
    if t.name == VARBINARY:
        if not isinstance(value, str) or _HEX_RE.match(value) is None:
            return f"{t} needs a hex string, got {value!r}"
        assert t.length is not None
        if len(value) // 2 > t.length:
            return f"{len(value) // 2} bytes do not fit {t}"
        return None
    if t.name == BOOLEAN:
        return None if isinstance(value, bool) else f"BOOLEAN needs true/false, got {value!r}"
    if t.name == TIMESTAMP:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"TIMESTAMP needs integer epoch microseconds, got {value!r}"
        lo, hi = _INT_RANGE[INT64]
        return None if lo <= value <= hi else f"{value} is out of range for TIMESTAMP"
    raise TypeInvalid(f"unknown type {t.name!r}")


def conforms(t: SqlType, value: Any) -> bool:
    """True when `value` is NULL or a value of `t`."""
    return value_problem(t, value) is None


def _decimal_problem(t: SqlType, value: Any) -> str | None:
    if not isinstance(value, str) or _DECIMAL_RE.match(value) is None:
        return f"{t} needs a decimal string, got {value!r}"
    try:
        d = Decimal(value)
    except InvalidOperation:
        return f"{t} needs a decimal string, got {value!r}"
    if not d.is_finite():
        return f"{t} needs a finite decimal, got {value!r}"
    assert t.precision is not None and t.scale is not None
    if len(value) > 4 * MAX_DECIMAL_PRECISION:
        return f"decimal string too long for {t}"
    integer_digits = 0 if d.is_zero() else max(d.adjusted() + 1, 0)
    if integer_digits > t.precision - t.scale:
        return f"{value} has more than {t.precision - t.scale} integer digits for {t}"
    if d != _quantize(d, t.scale):
        return f"{value} has more than {t.scale} fraction digits for {t}"
    return None


def _quantize(d: Decimal, scale: int) -> Decimal:
    return _DECIMAL_CONTEXT.quantize(d, Decimal(1).scaleb(-scale, _DECIMAL_CONTEXT))


def normalize_value(t: SqlType, value: Any) -> Any:
    """The canonical JSON encoding of a valid value: DECIMAL with exactly `scale` fraction digits,
    VARBINARY hex in lowercase, FLOAT/DOUBLE as float. Raises TypeInvalid for an invalid value."""
    problem = value_problem(t, value)
    if problem is not None:
        raise TypeInvalid(problem)
    if value is None:
        return None
    if t.name == DECIMAL:
        assert t.scale is not None
        d = _quantize(Decimal(value), t.scale)
        return format(abs(d) if d.is_zero() else d, "f")
    if t.name == VARBINARY:
        return str(value).lower()
    if t.name in (FLOAT, DOUBLE):
        return float(value)
    return value


def decimal_text_width(t: SqlType) -> int:
    """Longest canonical text of a DECIMAL(p,s): sign, digits, point, and `0.` when p == s."""
    assert t.precision is not None and t.scale is not None
    return 1 + t.precision + (1 if t.scale > 0 else 0) + (1 if t.scale == t.precision else 0)


def _text_width(t: SqlType) -> int | None:
    if t.name == DECIMAL:
        return decimal_text_width(t)
    return _TEXT_WIDTH.get(t.name)


def widens(old: SqlType, new: SqlType) -> bool:
    """True when `new` differs from `old` and every value of `old` converts exactly to `new`."""
    if old == new:
        return False
    if old.name == INT32 and new.name == INT64:
        return True
    if old.name == FLOAT and new.name == DOUBLE:
        return True
    if old.name == DECIMAL and new.name == DECIMAL:
        assert old.precision is not None and new.precision is not None
        return old.scale == new.scale and new.precision > old.precision
    if old.name == new.name and old.name in (VARCHAR, VARBINARY):
        assert old.length is not None and new.length is not None
        return new.length > old.length
    if new.name == VARCHAR and old.name != VARCHAR:
        width = _text_width(old)
        assert new.length is not None
        return width is not None and new.length >= width
    return False


def widen_value(old: SqlType, new: SqlType, value: Any) -> Any:
    """Convert a value of `old` to `new` (a widening or the same type); NULL stays NULL."""
    if value is None:
        return None
    if old == new:
        return value
    if not widens(old, new):
        raise TypeInvalid(f"{old} does not widen to {new}")
    if new.name == VARCHAR and old.name != VARCHAR:
        if old.name == BOOLEAN:
            return "TRUE" if value else "FALSE"
        if old.name == DECIMAL:
            return normalize_value(old, value)
        return str(int(value))
    if new.name == DOUBLE:
        return float(value)
    return value


def literal_to_value(t: SqlType, kind: str, text: str) -> Any:
    """The JSON-encoded value of a DDL literal for a column of type `t`; raises TypeInvalid.

    `kind` is the literal's lexical kind from the DDL parser: int, decimal, string, bool, null,
    hex. Integers fit every numeric type; strings fit VARCHAR, DECIMAL (`'1.5'`) and TIMESTAMP
    (ISO-8601, UTC when no offset is given)."""
    if kind == "null":
        return None
    value: Any
    if t.name in (INT32, INT64):
        if kind != "int":
            raise TypeInvalid(f"{t} default must be an integer, got {text}")
        value = int(text)
    elif t.name in (FLOAT, DOUBLE):
        if kind not in ("int", "decimal"):
            raise TypeInvalid(f"{t} default must be a number, got {text}")
        value = float(text)
    elif t.name == DECIMAL:
        if kind not in ("int", "decimal", "string"):
            raise TypeInvalid(f"{t} default must be a decimal, got {text}")
        value = text
    elif t.name == VARCHAR:
        if kind != "string":
            raise TypeInvalid(f"{t} default must be a string, got {text}")
        value = text
    elif t.name == VARBINARY:
        if kind != "hex":
            raise TypeInvalid(f"{t} default must be X'hex', got {text}")
        value = text
    elif t.name == BOOLEAN:
        if kind != "bool":
            raise TypeInvalid(f"BOOLEAN default must be TRUE or FALSE, got {text}")
        value = text.upper() == "TRUE"
    elif t.name == TIMESTAMP:
        if kind == "int":
            value = int(text)
        elif kind == "string":
            value = _iso_to_micros(text)
        else:
            raise TypeInvalid(f"TIMESTAMP default must be epoch micros or an ISO string: {text}")
    else:
        raise TypeInvalid(f"unknown type {t.name!r}")
    return normalize_value(t, value)


def _iso_to_micros(text: str) -> int:
    try:
        moment = _dt.datetime.fromisoformat(text)
    except ValueError as e:
        raise TypeInvalid(f"not an ISO-8601 timestamp: {text!r}") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    delta = moment - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
