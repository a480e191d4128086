"""The history event's shape is stated once (contract.history_shape): the JSON Schema the
checker validates with, the recorder's Arrow columns and the checker's Spark schema all follow
a change of one field's type, and each layer uses the derived one, not a copy of its own."""

from __future__ import annotations

import dataclasses
from typing import cast

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from checker import contract as checker_contract
from checker import ingest
from contract import history_shape
from contract.history_shape import STRING, Struct, arrow_schema, json_schema
from workloads import history as recorder

INT_REF = {"$ref": "#/$defs/int"}


def _with_value_field(name: str, shape: history_shape.Shape) -> Struct:
    """EVENT with the value's field `name` of another shape: one edit of the one definition."""
    value = history_shape.EVENT.field("value").shape
    assert isinstance(value, Struct)
    fields = tuple(
        dataclasses.replace(f, shape=shape) if f.name == name else f for f in value.fields
    )
    retyped = dataclasses.replace(value, fields=fields)
    return dataclasses.replace(
        history_shape.EVENT,
        fields=tuple(
            dataclasses.replace(f, shape=retyped) if f.name == "value" else f
            for f in history_shape.EVENT.fields
        ),
    )


def _value_of(schema: dict, f: str, type_: str) -> dict:
    """The value an `f` event of type `type_` holds, as the JSON Schema states it."""
    for rule in schema["$defs"]["event"]["allOf"]:
        cond = rule.get("if", {}).get("properties", {})
        if cond.get("f") == {"const": f} and cond.get("type") == {"const": type_}:
            return rule["then"]["properties"]["value"]
    raise AssertionError(f"no rule for {f} {type_}")


def test_one_field_retyped_changes_the_json_the_arrow_and_the_spark_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before_json = json_schema()
    for f in ("ddl", "probe"):  # the completions that state a catalog version
        assert _value_of(before_json, f, "ok")["properties"]["catalog_version"] == INT_REF
    assert arrow_schema().field("value").type.field("catalog_version").type == pa.int64()
    spark_value = cast(T.StructType, ingest.columnar_spark_schema()["value"].dataType)
    assert spark_value["catalog_version"].dataType == T.LongType()

    monkeypatch.setattr(history_shape, "EVENT", _with_value_field("catalog_version", STRING))

    after_json = json_schema()
    for f in ("ddl", "probe"):
        stated = _value_of(after_json, f, "ok")["properties"]
        assert stated["catalog_version"] == {"type": "string"}
        stated["catalog_version"] = INT_REF  # put back, to compare the rest below
    assert arrow_schema().field("value").type.field("catalog_version").type == pa.string()
    spark_value = cast(T.StructType, ingest.columnar_spark_schema()["value"].dataType)
    assert spark_value["catalog_version"].dataType == T.StringType()
    # nothing else moved: the same JSON Schema but for that one field's places
    assert after_json == before_json


def test_a_retyped_event_field_moves_all_three_too(monkeypatch: pytest.MonkeyPatch) -> None:
    event = history_shape.EVENT
    retyped = dataclasses.replace(
        event,
        fields=tuple(
            dataclasses.replace(f, shape=STRING) if f.name == "time" else f for f in event.fields
        ),
    )
    monkeypatch.setattr(history_shape, "EVENT", retyped)
    assert json_schema()["$defs"]["event"]["properties"]["time"] == {"type": "string"}
    assert arrow_schema().field("time").type == pa.string()
    assert ingest.columnar_spark_schema()["time"].dataType == T.StringType()


def test_every_layer_uses_the_derived_shape() -> None:
    # compiled first: fastjsonschema rewrites the $refs of what it compiles, in place
    checker_contract.fast_check("event")
    checker_contract.fast_check("run")
    assert checker_contract.schema() == json_schema()
    assert recorder.COLUMNAR_SCHEMA.equals(arrow_schema(), check_metadata=True)
    assert ingest.columnar_spark_schema() == ingest.COLUMNAR_SCHEMA
    # the parsed line: the recorder's columns but the value's text, plus the parse-error column
    line = [f.name for f in ingest.LINE_SCHEMA.fields]
    assert line == [*(f.name for f in history_shape.EVENT.fields), ingest.CORRUPT]


def test_the_derived_json_schema_is_a_valid_draft_2020_12_schema() -> None:
    import jsonschema

    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    ok = {"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "txn", "value": {"ops": []}}
    assert validator.is_valid(ok)
    assert not validator.is_valid({**ok, "value": {}})  # a txn invoke names its ops
