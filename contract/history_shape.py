"""The history event's shape (history.md), stated once; its three readings are derived here.

Each field is declared with one type. From the declaration come the JSON Schema the checker
validates every line with (`json_schema`), the typed columns the recorder writes beside
history.jsonl (`arrow_schema`) and, through the Arrow one, the checker's Spark schema. A field
whose JSON is polymorphic (a row, a lookup, the columns a probe saw) is kept as JSON text in
the columns (`text=True`). The JSON Schema's $defs also state run.json and a catalog.jsonl
line, whose columns are read by no one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
EVENT_TYPES = ("invoke", "ok", "fail", "info")
CLIENT_FS = ("ddl", "txn", "probe", "final-read")
OP_KINDS = ("r", "w", "d", "ix")
DDL_KINDS = (
    "create_table", "drop_table", "rename_table", "add_column", "drop_column", "rename_column",
    "alter_type", "set_not_null", "drop_not_null", "set_default", "drop_default",
    "create_index", "drop_index", "index_state",
)  # fmt: skip
_DEFS = "#/$defs/"


def ref(name: str) -> dict[str, Any]:
    """A JSON Schema reference to the $def `name`."""
    return {"$ref": _DEFS + name}


@dataclass(frozen=True)
class Scalar:
    """A leaf: its JSON Schema and its column type (an Arrow type's name)."""

    json: Mapping[str, Any]
    column: str = "string"  # int64, string, bool, float64


@dataclass(frozen=True)
class ListOf:
    item: Shape


@dataclass(frozen=True)
class MapOf:
    """A JSON object keyed by names (a table's name), every value of one shape."""

    value: Shape


@dataclass(frozen=True)
class Struct:
    """A JSON object of known fields (extra fields are allowed everywhere); `name`, when set,
    is its $def; `json_as` replaces its JSON Schema where the object's shape depends on the
    event it is in (the event's `value`, stated per kind in the event's rules)."""

    fields: tuple[Field, ...]
    name: str | None = None
    json_as: Mapping[str, Any] | None = None

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)


Shape = Scalar | ListOf | MapOf | Struct


@dataclass(frozen=True)
class Field:
    """One field: its shape; whether it must be present and may be null; `text` when its
    column holds its JSON text; `json=False` for a column the contract does not state."""

    name: str
    shape: Shape
    required: bool = False
    nullable: bool = False
    text: bool = False
    json: bool = True
    comment: str | None = None


INT = Scalar(ref("int"), "int64")  # every int of the contract, read in 64 bits
TS = Scalar(ref("ts"), "int64")  # a timestamp, opaque
COUNT = Scalar({"type": "integer", "minimum": 0, "maximum": I64_MAX}, "int64")
STRING = Scalar({"type": "string"})
NAME = Scalar({"type": "string", "minLength": 1})
BOOL = Scalar({"type": "boolean"}, "bool")
OBJECT = Scalar({"type": "object"})  # any JSON object (a row): text in the columns
NUMBER = Scalar({"type": "number"}, "float64")
PROCESS = Scalar({"oneOf": [ref("int"), {"type": "string", "minLength": 1}]})


def enum(values: Sequence[str]) -> Scalar:
    return Scalar({"enum": list(values)})


DDL_KIND = Scalar(ref("ddl_kind"))


def _f(name: str, shape: Shape, **kw: Any) -> Field:
    return Field(name, shape, **kw)


ERROR = Struct(
    (
        _f("code", STRING, required=True),
        _f("message", STRING, required=True),
        _f("retriable", BOOL, required=True),
    ),
    name="error",
)
COLUMN = Struct(
    (
        _f("id", INT, required=True),
        _f("name", STRING, required=True),
        _f("type", STRING, required=True),
        _f("nullable", BOOL, required=True),
    ),
    name="column",
)
MICRO_OP = Struct(
    (
        _f("op", enum(OP_KINDS), required=True),
        _f("table", STRING, required=True),
        _f("key", INT, nullable=True),
        _f("row", OBJECT, nullable=True, text=True),
        _f("index", STRING),
        _f("lookup", OBJECT, text=True, json=False),
        _f("op_ts", TS, nullable=True),
        _f("node", STRING, nullable=True),
        _f("schema_version", INT, nullable=True),
        _f("result", OBJECT, text=True, json=False),
    ),
    name="micro_op",
)
TABLE_BASE = Struct((_f("base_ts", TS, required=True), _f("schema_version", INT, required=True)))
PARTICIPANT = Struct(
    (
        _f("node", STRING, required=True),
        _f("table", STRING, required=True),
        _f("partition", INT, required=True),
        _f("commit_schema_version", INT, required=True),
    )
)
ROW = Struct((_f("key", INT, required=True), _f("row", OBJECT, required=True, text=True)))
ENTRY = Struct((_f("key", INT, required=True), _f("values", OBJECT, required=True, text=True)))
WAITS = Struct(tuple(_f(n, NUMBER) for n in ("count", "total_ms", "max_ms")))

# Every field a client event's value may hold, whichever its kind (the columns hold the union);
# `VALUE_BY_KIND` says which of them each kind states, and how.
VALUE = Struct(
    (
        _f("stmt", STRING),
        _f("table", STRING),
        _f("kind", DDL_KIND),
        _f("catalog_version", INT),
        _f("activation_ts", TS),
        _f("index", STRING),
        _f("ops", ListOf(MICRO_OP)),
        _f("txn_id", STRING),
        _f("begin_ts", TS),
        _f("commit_ts", TS),
        _f("tables", MapOf(TABLE_BASE)),
        _f("participants", ListOf(PARTICIPANT)),
        _f("ts", TS),
        _f("table_schema_version", INT),
        _f("columns", ListOf(COLUMN), text=True),
        _f("schema_version", INT),
        _f("rows", ListOf(ROW)),
        _f("entries", ListOf(ENTRY)),
        # not in the contract (our own extra field): any numbers
        _f("safe_time_waits", WAITS, json=False),
    ),
    json_as={"type": "object"},
)


@dataclass(frozen=True)
class ValueRule:
    """What the value of a client event of function `f` and completion `types` holds: the
    VALUE fields it states (`required` among them, `nullable` ones may be null), and the event
    fields it requires besides `value`."""

    f: str
    types: tuple[str, ...]
    fields: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    nullable: tuple[str, ...] = ()
    event_required: tuple[str, ...] = ("value",)
    extra: Mapping[str, Any] = field(default_factory=dict)  # more JSON Schema on the value
    of: str | None = None  # the value is this $def (`fields` unused), `required` of it
    value_nullable: bool = False
    comment: str | None = None


_TXN_FIELDS = ("txn_id", "begin_ts", "commit_ts", "ops", "tables", "participants")
TXN_COMPLETION = Struct(
    tuple(
        Field(n, VALUE.field(n).shape, nullable=n in ("txn_id", "begin_ts", "commit_ts"))
        for n in _TXN_FIELDS
    ),
    name="txn_completion",
)
_FINAL_READ = ("table", "ts", "schema_version", "rows", "index", "entries")
VALUE_BY_KIND: tuple[ValueRule, ...] = (
    ValueRule("ddl", ("invoke",), ("stmt", "table", "kind"), ("stmt", "table", "kind"), ("table",)),
    ValueRule(
        "ddl",
        ("ok",),
        ("catalog_version", "activation_ts"),
        ("catalog_version", "activation_ts"),
        event_required=("value", "node"),
    ),
    ValueRule("txn", ("invoke",), ("ops",), ("ops",)),
    ValueRule(
        "txn", ("ok",), required=_TXN_FIELDS, event_required=("value", "node"), of="txn_completion"
    ),
    ValueRule(
        "txn",
        ("fail", "info"),
        event_required=(),
        of="txn_completion",
        value_nullable=True,
        comment="a txn that failed or timed out carries whatever it reached: perhaps nothing",
    ),
    ValueRule("probe", ("invoke",), ("table", "ts"), ("table", "ts"), ("table", "ts")),
    ValueRule(
        "probe",
        ("ok",),
        ("ts", "catalog_version", "table_schema_version", "columns"),
        ("ts", "catalog_version", "table_schema_version", "columns"),
        ("table_schema_version", "columns"),
        event_required=("value", "node"),
    ),
    ValueRule(
        "final-read",
        ("ok",),
        _FINAL_READ,
        ("table", "ts"),
        extra={
            "oneOf": [
                {"required": ["schema_version", "rows"], "not": {"required": ["index"]}},
                {"required": ["index", "entries"]},
            ]
        },
    ),
)

EVENT = Struct(
    (
        _f("index", COUNT, required=True),
        _f("time", INT, required=True),
        _f("type", enum(EVENT_TYPES), required=True),
        _f("process", PROCESS, required=True),
        _f("f", NAME, required=True),
        _f("node", STRING, nullable=True),
        _f("value", VALUE, nullable=True),
        _f(
            "error",
            ERROR,
            nullable=True,
            comment="typed on fail and info only (below); null elsewhere, as absent",
        ),
    ),
    name="event",
)
COLUMNAR_EXTRA = (Field("value_json", OBJECT, text=True),)  # the value's own JSON text

_INDEX = Struct(
    (
        _f("name", STRING, required=True),
        _f("columns", ListOf(STRING), required=True),
        _f(
            "state",
            STRING,
            required=True,
            comment="any state: only AVAILABLE is judged (REGISTERED, BUILDING, STOPPING, "
            "a target's own such as READ_ONLY)",
        ),
    )
)
_CATALOG_TABLE = Struct(
    (
        _f("id", INT, required=True),
        _f("schema_version", INT, required=True),
        _f("columns", ListOf(COLUMN), required=True),
        _f("indexes", ListOf(_INDEX)),
    )
)
CATALOG_LINE = Struct(
    (
        _f("catalog_version", INT, required=True),
        _f("activation_ts", TS, required=True),
        _f("safe_ts", TS, required=True),
        _f("delay_ms", COUNT, required=True),
        _f("ddl", STRING, required=True),
        _f("tables", MapOf(_CATALOG_TABLE), required=True),
    ),
    name="catalog_line",
)
_NAMES = ListOf(STRING)
_RUN_CONFIG = Struct(
    (
        _f("delay_duration_ms", COUNT, required=True),
        _f("max_clock_skew_ms", COUNT, required=True),
        _f("idle_safe_time_interval_ms", COUNT, required=True),
        _f("toggles", _NAMES, required=True),
    )
)
RUN = Struct(
    tuple(
        _f(name, shape, required=True)
        for name, shape in (
            ("test", STRING),
            ("seed", INT),
            ("backend", enum(("docker", "local", "ssh", "sim"))),
            ("target", STRING),
            ("clock", enum(("hlc", "none"))),
            ("nodes", _NAMES),
            ("voters", _NAMES),
            ("learners", _NAMES),
            ("config", _RUN_CONFIG),
            ("nemesis", Scalar({"type": ["object", "array"]})),
            ("workload", OBJECT),
            ("start_wall_ms", INT),
            ("harness_version", STRING),
        )
    ),
    name="run",
)


# ---- the JSON Schema (draft 2020-12) ------------------------------------------------------

_NULL = {"type": "null"}


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    if schema == ref("ts"):
        return ref("ts_or_null")
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"oneOf": [schema, _NULL]}


def _json(shape: Shape) -> dict[str, Any]:
    """A shape's JSON Schema where it is used (a named struct by reference)."""
    if isinstance(shape, Scalar):
        return dict(shape.json)
    if isinstance(shape, ListOf):
        return {"type": "array", "items": _json(shape.item)}
    if isinstance(shape, MapOf):
        return {"type": "object", "additionalProperties": _json(shape.value)}
    if shape.json_as is not None:
        return dict(shape.json_as)
    return ref(shape.name) if shape.name else _object(shape)


def _property(f: Field, nullable: bool | None = None) -> dict[str, Any]:
    schema = _json(f.shape)
    if f.nullable if nullable is None else nullable:
        schema = _or_null(schema)
    return {"$comment": f.comment, **schema} if f.comment else schema


def _object(shape: Struct, rules: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A struct's own JSON Schema: its required fields, the types of those the contract states."""
    schema: dict[str, Any] = {"type": "object"}
    required = [f.name for f in shape.fields if f.required]
    if required:
        schema["required"] = required
    schema["properties"] = {f.name: _property(f) for f in shape.fields if f.json}
    if rules:
        schema["allOf"] = list(rules)
    return schema


def _micro_op_rules() -> list[dict[str, Any]]:
    key, node = MICRO_OP.field("key").shape, MICRO_OP.field("node").shape
    return [
        {"if": {"properties": {"op": {"const": "w"}}}, "then": {"required": ["row"]}},
        {
            "$comment": "a lookup through an index finds keys: it names none of its own",
            "if": {"properties": {"op": {"enum": ["r", "w", "d"]}}},
            "then": {"required": ["key"], "properties": {"key": _json(key)}},
        },
        {"if": {"properties": {"op": {"const": "ix"}}}, "then": {"required": ["index", "lookup"]}},
        {
            "if": {"properties": {"op_ts": ref("int")}, "required": ["op_ts"]},
            "$comment": "schema_version is null when no table of that name exists at op_ts "
            "(TABLE_DROPPED)",
            "then": {"required": ["node", "schema_version"], "properties": {"node": _json(node)}},
        },
    ]


def _value_schema(rule: ValueRule) -> dict[str, Any]:
    value_shape = EVENT.field("value").shape
    assert isinstance(value_shape, Struct)
    if rule.of is not None:
        value = ref(rule.of)
        if rule.required:
            value = {"allOf": [value, {"required": list(rule.required)}]}
    else:
        value = {"type": "object", "required": list(rule.required)}
        value["properties"] = {
            n: _property(value_shape.field(n), n in rule.nullable) for n in rule.fields
        }
        value.update(rule.extra)
    return _or_null(value) if rule.value_nullable else value


def _value_rule(rule: ValueRule) -> dict[str, Any]:
    kind = {"const": rule.types[0]} if len(rule.types) == 1 else {"enum": list(rule.types)}
    then: dict[str, Any] = {"required": list(rule.event_required)} if rule.event_required else {}
    then["properties"] = {"value": _value_schema(rule)}
    condition = {"properties": {"type": kind, "f": {"const": rule.f}}, "required": ["type", "f"]}
    found: dict[str, Any] = {"if": condition}
    if rule.comment:
        found["$comment"] = rule.comment
    found["then"] = then
    return found


def _event_rules() -> list[dict[str, Any]]:
    clients = {"enum": list(CLIENT_FS)}
    return [
        {
            "if": {"properties": {"process": {"const": "nemesis"}}, "required": ["process"]},
            "then": {"properties": {"type": {"const": "info"}}},
        },
        {
            "$comment": "a client operation comes from a client, whose process is an integer",
            "if": {"properties": {"f": clients}, "required": ["f"]},
            "then": {"properties": {"process": ref("int")}},
        },
        {
            "$comment": "a string process other than nemesis is an optional one (monitor "
            "samples): accepted, ignored",
            "if": {"properties": {"process": ref("int")}, "required": ["process"]},
            "then": {"properties": {"f": clients}},
        },
        {
            "if": {
                "properties": {"type": {"enum": ["fail", "info"]}, "process": ref("int")},
                "required": ["type", "process"],
            },
            "then": {"required": ["error"], "properties": {"error": _json(ERROR)}},
        },
        *(_value_rule(rule) for rule in VALUE_BY_KIND),
    ]


def json_schema() -> dict[str, Any]:
    """The run directory's JSON Schema: the root validates one history.jsonl event,
    `$defs.catalog_line` one catalog.jsonl line and `$defs.run` run.json. A copy of its own
    each call: a validator that rewrites what it reads cannot change the next caller's."""
    return copy.deepcopy(_json_schema())


def _json_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://schemachaos.invalid/history_schema.json",
        "title": "schemachaos run directory (shared/spec/history.md)",
        "description": "The root validates one history.jsonl event; $defs.catalog_line "
        "validates one catalog.jsonl line and $defs.run validates run.json. Extra fields are "
        "allowed everywhere.",
        "$ref": ref("event")["$ref"],
        "$defs": {
            "int": {
                "$comment": "as every int of the contract is read: in 64 bits",
                "type": "integer",
                "minimum": I64_MIN,
                "maximum": I64_MAX,
            },
            "ts": {
                "$comment": "opaque on a clock: none run, so of any sign (as Spark reads it)",
                **ref("int"),
            },
            "ts_or_null": {"oneOf": [ref("int"), _NULL]},
            "error": _object(ERROR),
            "ddl_kind": {"enum": list(DDL_KINDS)},
            "micro_op": _object(MICRO_OP, _micro_op_rules()),
            "txn_completion": _object(TXN_COMPLETION),
            "column": _object(COLUMN),
            "event": _object(EVENT, _event_rules()),
            "catalog_line": _object(CATALOG_LINE),
            "run": _object(RUN),
        },
    }


# ---- the columns (Arrow) ------------------------------------------------------------------


def _arrow(shape: Shape, text: bool) -> pa.DataType:
    import pyarrow as pa

    if text:
        return pa.string()
    if isinstance(shape, Scalar):
        return pa.type_for_alias(shape.column)
    if isinstance(shape, ListOf):
        return pa.list_(_arrow(shape.item, False))
    if isinstance(shape, MapOf):
        return pa.map_(pa.string(), _arrow(shape.value, False))
    return pa.struct([pa.field(f.name, _arrow(f.shape, f.text)) for f in shape.fields])


def arrow_schema() -> pa.Schema:
    """The typed columns of an event, as the recorder's copy holds them (its last column,
    `value_json`, the value's whole JSON text); every column nullable."""
    import pyarrow as pa

    return pa.schema(
        [pa.field(f.name, _arrow(f.shape, f.text)) for f in (*EVENT.fields, *COLUMNAR_EXTRA)]
    )
