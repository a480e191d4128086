"""The run-directory contract as JSON Schema, and line-by-line validation of its small files.

The JSON Schema is derived from the one statement of the contract (contract.history_shape):
other parts validate what they write with `validator("event")`, and the checker validates
run.json, catalog.jsonl and (when small) history.jsonl with it, naming file, line and field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema

from contract.history_shape import json_schema
from contract.rundir import CATALOG, HISTORY, RUN_JSON


class ContractError(Exception):
    """One violation of the contract: where it is and what is wrong, readable as one line."""

    def __init__(self, file: str, line: int | None, field: str | None, why: str) -> None:
        super().__init__(file, line, field, why)
        self.file = file
        self.line = line
        self.field = field
        self.why = why

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file} line {self.line}"
        what = f" field {self.field!r}:" if self.field else ""
        return f"{where}:{what} {self.why}"


@cache
def schema() -> dict[str, Any]:
    """The contract's JSON Schema (the root validates one event), built once."""
    return json_schema()


@cache
def validator(kind: str = "event") -> jsonschema.protocols.Validator:
    """A validator of one `event`, one `catalog_line` or the `run` document."""
    root = schema()
    target = root if kind == "event" else {**root, "$ref": f"#/$defs/{kind}"}
    cls = jsonschema.validators.validator_for(root)
    return cls(target)


@cache
def fast_check(kind: str = "event") -> Any:
    """The same schema compiled to Python (about 9x faster than `validator`): says only
    whether a document conforms; `first_problem` then names the field of one that does not."""
    root = schema()
    target = root if kind == "event" else {**root, "$ref": f"#/$defs/{kind}"}
    # fastjsonschema rewrites every $ref it resolves in place: it gets a copy of its own
    return fastjsonschema.compile(copy.deepcopy(target))


def conforms(kind: str, document: Any) -> bool:
    """Whether `document` conforms to the `kind` part of the contract."""
    try:
        fast_check(kind)(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def first_problem(kind: str, document: Any) -> tuple[str, str] | None:
    """(field path, why) of the most specific violation, or None if `document` conforms."""
    if conforms(kind, document):
        return None
    errors = list(validator(kind).iter_errors(document))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    # best_match prefers shallow errors; the deepest one names the field a person must fix.
    deepest = max(errors, key=lambda e: len(list(e.absolute_path)))
    chosen = deepest if len(list(deepest.absolute_path)) > len(list(best.absolute_path)) else best
    path = ".".join(str(p) for p in chosen.absolute_path)
    field = path
    if chosen.validator == "required" and isinstance(chosen.validator_value, list):
        missing = [
            r
            for r in chosen.validator_value
            if isinstance(chosen.instance, dict) and r not in chosen.instance
        ]
        if missing:
            field = f"{path}.{missing[0]}" if path else missing[0]
            return field, "missing"
    return field or "(document)", _short(chosen.message)


def _short(message: str) -> str:
    return message if len(message) <= 160 else message[:157] + "..."


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """run.json, validated; raises ContractError naming the field."""
    path = run_dir / RUN_JSON
    if not path.exists():
        raise ContractError(RUN_JSON, None, None, "missing from the run directory")
    try:
        doc = strict_json(path.read_text("utf-8"))
    except json.JSONDecodeError as e:
        raise ContractError(RUN_JSON, e.lineno, None, f"not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:
        raise ContractError(RUN_JSON, None, None, f"not valid JSON ({e})") from None
    problem = first_problem("run", doc)
    if problem is not None:
        raise ContractError(RUN_JSON, None, problem[0], problem[1])
    result: dict[str, Any] = doc
    return result


def read_catalog_lines(run_dir: Path) -> list[dict[str, Any]]:
    """Every catalog.jsonl line, validated and in file order; raises ContractError."""
    path = run_dir / CATALOG
    if not path.exists():
        raise ContractError(CATALOG, None, None, "missing from the run directory")
    lines: list[dict[str, Any]] = []
    line_of: dict[int, int] = {}
    for number, doc in _json_lines(path, CATALOG):
        problem = first_problem("catalog_line", doc)
        if problem is not None:
            raise ContractError(CATALOG, number, problem[0], problem[1])
        version = doc["catalog_version"]
        if version in line_of:  # two answers to cat(ts) for the same version
            raise ContractError(
                CATALOG,
                number,
                "catalog_version",
                f"is {version}, as on line {line_of[version]} (one line per catalog version)",
            )
        line_of[version] = number
        lines.append(doc)
    if not lines:
        raise ContractError(
            CATALOG,
            None,
            None,
            "is empty (at least the first catalog version must be there)",
        )
    return lines


def validate_history_file(path: Path) -> tuple[int, bool]:
    """Validate every event of a (small) history.jsonl against the schema and the index order.

    Returns (events, truncated_tail). A torn final line (no newline and not JSON: a killed
    controller) is reported through the flag, not raised; any other violation raises.
    """
    count = previous = 0
    truncated = False
    for number, doc in _json_lines(path, HISTORY, allow_torn_tail=True):
        if doc is _TORN:
            truncated = True
            break
        problem = first_problem("event", doc)
        if problem is not None:
            raise ContractError(HISTORY, number, problem[0], problem[1])
        # "unique, ascending from 0": the first is 0, each above the one before (gaps allowed)
        if count == 0 and doc["index"] != 0:
            raise ContractError(
                HISTORY,
                number,
                "index",
                f"is {doc['index']}, but the first event's must be 0",
            )
        if count and doc["index"] <= previous:
            raise ContractError(
                HISTORY,
                number,
                "index",
                f"is {doc['index']}, not above line {number - 1}'s {previous} "
                "(indexes are unique and ascending)",
            )
        previous = doc["index"]
        count += 1
    return count, truncated


_TORN: Any = object()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def value_or_none(text: Any) -> Any:
    """A nemesis value's JSON text (as the ingest keeps it) parsed, or None when there is none
    or it cannot be read (nested deeper than Python's parser goes): such a value only informs
    pairing faults and statistics, and never stops the analysis."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return strict_json(text)
    except (ValueError, RecursionError):
        return None


def strict_json(text: str | bytes) -> Any:
    """`text` parsed as JSON proper: Python's parser also takes NaN and Infinity, which JSON
    has not, so a line holding one would be judged on a value no other reader gives it."""
    return json.loads(text, parse_constant=_no_constant)


def _json_lines(path: Path, name: str, allow_torn_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) for each line, streamed so huge files fit in memory."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            complete = raw.endswith(b"\n")
            if not raw.strip():
                if not complete:
                    return
                raise ContractError(name, number, None, "empty line")
            try:
                doc = strict_json(raw)
            except RecursionError:
                raise ContractError(
                    name, number, None, "nested too deeply for the checker to read"
                ) from None
            except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
                if not complete and allow_torn_tail:
                    yield number, _TORN
                    return
                why = "truncated (no newline, not complete JSON)" if not complete else "not JSON"
                raise ContractError(name, number, None, f"{why}: {e}") from None
            if not isinstance(doc, dict):
                raise ContractError(name, number, None, "is not a JSON object")
            yield number, doc
