"""The column types a workload uses, and the values and default literals it writes in them.

Apart from the schema model so the DML side (`value_for`) and the DDL planner share one
definition of each type's encoding without the values depending on the catalog model.
"""

from __future__ import annotations

import random
import re
from typing import Any

BASE_TYPES: tuple[str, ...] = (
    "INT32",
    "INT64",
    "FLOAT",
    "DOUBLE",
    "DECIMAL(12,2)",
    "VARCHAR(24)",
    "VARBINARY(16)",
    "BOOLEAN",
    "TIMESTAMP",
)
TIMESTAMP_BASE_US = 1_700_000_000_000_000
_PARAMS_RE = re.compile(r"^([A-Z0-9]+)(?:\((\d+)(?:,(\d+))?\))?$")


def type_name(type_: str) -> str:
    return type_.split("(", 1)[0]


def widening_of(type_: str, rng: random.Random) -> str | None:
    """A strictly wider type that holds every value of `type_` exactly, or None."""
    m = _PARAMS_RE.match(type_)
    if m is None:
        return None
    name, a, b = m.group(1), m.group(2), m.group(3)
    if name == "INT32":
        return "INT64"
    if name == "FLOAT":
        return "DOUBLE"
    if name == "DECIMAL" and a is not None and b is not None:
        p = int(a)
        return None if p >= 38 else f"DECIMAL({min(38, p + rng.randint(1, 4))},{b})"
    if name in ("VARCHAR", "VARBINARY") and a is not None:
        n = int(a)
        return None if n >= 4096 else f"{name}({n + rng.randint(1, 16)})"
    return None


def value_for(type_: str, seq: int) -> Any:
    """The JSON encoding of a value of `type_` unique to write number `seq` (BOOLEAN aside):
    a read that returns it names the one write it saw."""
    name = type_name(type_)
    if name in ("INT32", "INT64"):
        return seq
    if name in ("FLOAT", "DOUBLE"):
        return float(seq)
    if name == "DECIMAL":
        m = _PARAMS_RE.match(type_)
        scale = int(m.group(3)) if m is not None and m.group(3) else 0
        return f"{seq}.{'0' * scale}" if scale else str(seq)
    if name == "VARCHAR":
        return f"w{seq}"
    if name == "VARBINARY":
        return seq.to_bytes(8, "big").hex()
    if name == "BOOLEAN":
        return seq % 2 == 0
    if name == "TIMESTAMP":
        return TIMESTAMP_BASE_US + seq
    raise ValueError(f"unknown type {type_!r}")


def default_literal(type_: str, n: int, current: str | None) -> str:
    """A SQL literal for a default of `type_`, different from `current` (the catalog refuses a
    SET DEFAULT that changes nothing)."""
    name = type_name(type_)
    if name == "BOOLEAN":
        return "FALSE" if current == "TRUE" else "TRUE"
    if name in ("INT32", "INT64", "TIMESTAMP"):
        return str(1_000_000 + n)
    if name in ("FLOAT", "DOUBLE"):
        return f"{n}.5"
    if name == "DECIMAL":
        return f"{n}.25"
    if name == "VARCHAR":
        return f"'d{n}'"
    if name == "VARBINARY":
        return f"X'{(n % 65536):04x}'"
    raise ValueError(f"unknown type {type_!r}")
