"""The one error of a config that cannot be used: `FILE: KEY: why`, for every config we read.

A scenario file, the nodes file, the nightly matrix, a target's settings and a workload's
options are all refused the same way, so that the command line can print any of them as one
line and exit 254 (bad input) without knowing which reader refused it. Those that are pydantic
models name their problem with `first_problem`: the key as the file writes it (`nemesis.kinds`,
`node[1].port`) and a reason that lists the allowed keys when the key is unknown.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

WHOLE_FILE = "-"  # the key of a problem with the file as a whole (not printed)


class ConfigError(ValueError):
    """`file` (when known), then the `key` as the file writes it (None or WHOLE_FILE for the
    whole file), then why, naming what is allowed."""

    def __init__(self, key: str | None, why: str, *, file: str | os.PathLike[str] | None = None):
        self.file = None if file is None else os.fspath(file)
        self.key = key
        self.why = why
        super().__init__(str(self))

    def __str__(self) -> str:
        key = None if self.key == WHOLE_FILE else self.key
        return ": ".join(part for part in (self.file, key, self.why) if part is not None)


# pydantic's error types in the words of a TOML file (a dict is a table there)
_NEEDS = {
    "int_type": "needs an integer",
    "int_parsing": "needs an integer",
    "int_from_float": "needs an integer",
    "float_type": "needs a number",
    "float_parsing": "needs a number",
    "string_type": "needs a string",
    "bool_type": "needs true or false",
    "bool_parsing": "needs true or false",
    "list_type": "needs a list",
    "dict_type": "needs a table",
    "model_type": "needs a table",
    "model_attributes_type": "needs a table",
}
_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (directly, in a list, or in an Optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _locate(model: type[BaseModel], loc: Sequence[int | str]) -> tuple[str, type[BaseModel] | None]:
    """pydantic's location as the file says it, and the model found there (None at a leaf).
    Parts that are not keys of the file (a union's member tags: `int`, `float`) are dropped."""
    key = ""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        elif current is not None and part in current.model_fields:
            key += f".{part}" if key else part
            current = _submodel(current.model_fields[part].annotation)
    return key, current


def first_problem(model: type[BaseModel], error: ValidationError) -> tuple[str, str]:
    """(key, why) of the first error; key is WHOLE_FILE when the whole file is wrong."""
    first = error.errors()[0]
    loc = list(first["loc"])
    if first["type"] == "extra_forbidden" and loc:
        parent, found = _locate(model, loc[:-1])
        name = str(loc[-1])
        key = f"{parent}.{name}" if parent else name
        allowed = ", ".join(found.model_fields) if found is not None else "none"
        return key, f"unknown key (allowed: {allowed})"
    key, _ = _locate(model, loc)
    kind = first["type"]
    if kind == "missing":
        return key or WHOLE_FILE, "is required"
    if kind in _NEEDS:
        why = _NEEDS[kind]
    elif kind in _BOUNDS:
        sign, bound = _BOUNDS[kind]
        why = f"needs a value {sign} {first.get('ctx', {}).get(bound)}"
    else:  # a literal's or a validator's own message, which names what is allowed
        why = first["msg"].removeprefix("Value error, ")
    if kind != "literal_error" and "input" in first:
        why += f", got {first['input']!r}"
    return key or WHOLE_FILE, why


def one_of(allowed: Iterable[str], what: str) -> Any:
    """An after-validator: every name in a list is one of `allowed` (the error lists them)."""
    known = tuple(allowed)

    def check(names: list[str]) -> list[str]:
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(
                f"unknown {what} {', '.join(map(repr, bad))} (allowed: {', '.join(known)})"
            )
        return names

    return check
