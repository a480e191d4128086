"""Malformed run directories: one readable message naming file, line and field; verdict unknown
(exit 2); never a traceback. Also the Spark-side validation used for big histories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_run, exit_code
from tests.spark_session import spark  # noqa: F401  (session fixture)
from tests.test_checker_classes import make_run

PYTHON_PATH = AnalyzeOptions(with_stats=False)
SPARK_PATH = AnalyzeOptions(
    python_validation_max_bytes=0, with_stats=False
)  # validate with Spark expressions


def lines(run: Path) -> list[str]:
    return (run / "history.jsonl").read_text().splitlines()


def write_lines(run: Path, text: list[str], final_newline: bool = True) -> None:
    (run / "history.jsonl").write_text("\n".join(text) + ("\n" if final_newline else ""))


def _change(fields: dict[str, object], changes: dict[str, object]) -> None:
    """Set each of `changes` in `fields`; None removes the field."""
    for k, v in changes.items():
        if v is None:
            fields.pop(k)
        else:
            fields[k] = v


def edit(line: str, **changes: object) -> str:
    event = json.loads(line)
    _change(event, changes)
    return json.dumps(event)


@pytest.mark.spark
@pytest.mark.parametrize("options", [PYTHON_PATH, SPARK_PATH], ids=["python", "spark"])
def test_truncated_last_line_is_named_and_the_verdict_is_unknown(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
    options: AnalyzeOptions,
) -> None:
    run = make_run("ap-violation", tmp_path / "run")
    text = [*lines(run)[:2], '{"index":2,"time":2102000000,"type":"inv']
    write_lines(run, text, final_newline=False)
    results = analyze_run(run, spark=spark, options=options)
    assert results["valid"] == "unknown" and exit_code(results) == 2
    assert results["errors"][0].startswith("history.jsonl line 3: truncated")
    # the cut also leaves the catalog's AVAILABLE index without its final read
    assert all(e.startswith("no final read") for e in results["errors"][1:])
    assert results["stats"]["events"] == 2


@pytest.mark.spark
def test_truncated_tail_after_an_anomaly_still_reports_it(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    run = make_run("ap-violation", tmp_path / "run")
    write_lines(run, [*lines(run), '{"index":8,"ti'], final_newline=False)
    results = analyze_run(run, spark=spark, options=PYTHON_PATH)
    assert results["valid"] is False
    assert {a["class"] for a in results["anomalies"]} == {"ap-violation"}
    assert "line 9: truncated" in results["errors"][0]


CASES = {
    "missing field": (lambda t: [t[0], edit(t[1], type=None), *t[2:]], "line 2: field 'type': "),
    "unknown type": (lambda t: [t[0], edit(t[1], type="done"), *t[2:]], "line 2: field 'type':"),
    "out-of-order index": (  # line 2's index 2 skips 1, which the contract allows; line 3's 1
        lambda t: [t[0], t[2], t[1], *t[3:]],
        "line 3: field 'index':",
    ),
    "repeated index": (lambda t: [t[0], edit(t[1], index=0), *t[2:]], "line 2: field 'index':"),
    "first index not 0": (lambda t: [edit(t[0], index=1), *t[1:]], "line 1: field 'index':"),
    "index below 0": (  # the smallest int64: the index order's arithmetic must not overflow
        lambda t: [t[0], edit(t[1], index=-(2**63)), *t[2:]],
        "line 2: field 'index':",
    ),
    "missing nested field": (
        lambda t: [*t[:5], edit(t[5], value={"txn_id": "a1"}), *t[6:]],
        "line 6: field 'value.",
    ),
    # the enums and shapes the Spark path checks as the Python one does
    "unknown op": (lambda t: [*t[:4], _ops(t[4], op="x"), *t[5:]], "line 5: field 'value."),
    "op without its table": (
        lambda t: [*t[:4], _ops(t[4], table=None), *t[5:]],
        "line 5: field 'value.",
    ),
    "lookup without its index": (
        lambda t: [*t[:4], _ops(t[4], op="ix", key=None, lookup=1), *t[5:]],
        "line 5: field 'value.",
    ),
    "unknown ddl kind": (
        lambda t: [*t[:4], _ddl(t[4], kind="truncate"), *t[5:]],
        "line 5: field 'value",
    ),
    "ddl without its statement": (
        lambda t: [*t[:4], _ddl(t[4], stmt=None), *t[5:]],
        "line 5: field 'value",
    ),
    "final read without rows": (
        lambda t: [*t[:6], *_final_read(t[6], {"table": "t1", "ts": 5, "schema_version": 1})],
        "line 8: field 'value",
    ),
    "final read of an index without entries": (
        lambda t: [*t[:6], *_final_read(t[6], {"table": "t1", "index": "i1", "ts": 5})],
        "line 8: field 'value",
    ),
    "write row not an object": (
        lambda t: [*t[:4], _ops(t[4], op="w", row=5), *t[5:]],
        "line 5: field 'value.",
    ),
    "txn invoke without ops": (
        lambda t: [*t[:4], edit(t[4], value={"tag": 1}), *t[5:]],
        "line 5: field 'value",
    ),
    "ok txn without participants": (
        lambda t: [*t[:5], _value(t[5], participants=None), *t[6:]],
        "line 6: field 'value",
    ),
    "participant without its node": (
        lambda t: [
            *t[:5],
            _value(
                t[5], participants=[{"table": "t1", "partition": 0, "commit_schema_version": 1}]
            ),
            *t[6:],
        ],
        "line 6: field 'value.",
    ),
    "error without its message": (
        lambda t: [
            *t[:5],
            edit(t[5], type="fail", error={"code": "X", "retriable": True}),
            *t[6:],
        ],
        "line 6: field 'error",
    ),
    "final read without its table": (
        lambda t: [*t[:6], *_final_read(t[6], {"ts": 5, "schema_version": 1, "rows": []})],
        "line 8: field 'value",
    ),
    "final read row not an object": (
        lambda t: [
            *t[:6],
            *_final_read(
                t[6], {"table": "t1", "ts": 5, "schema_version": 1, "rows": [{"key": 1, "row": 5}]}
            ),
        ],
        "line 8: field 'value.",
    ),
    "index entry without its key": (
        lambda t: [
            *t[:6],
            *_final_read(
                t[6], {"table": "t1", "index": "i1", "ts": 5, "entries": [{"values": {"c1": 1}}]}
            ),
        ],
        "line 8: field 'value.",
    ),
    "nemesis value not an object": (
        lambda t: [*t[:6], _nemesis(t[6], 7), *t[7:]],
        "line 7: field 'value",
    ),
    "monitor value a string": (
        lambda t: [*t[:6], edit(_nemesis(t[6], "n1 ok"), process="monitor", f="sample"), *t[7:]],
        "line 7: field 'value",
    ),
}


def _ops(line: str, **changes: object) -> str:
    """`line` (a txn invoke) with its first op changed; None removes a field."""
    event = json.loads(line)
    _change(event["value"]["ops"][0], changes)
    return json.dumps(event)


def _value(line: str, **changes: object) -> str:
    """`line` with fields of its value changed; None removes a field."""
    event = json.loads(line)
    _change(event["value"], changes)
    return json.dumps(event)


def _ddl(line: str, **changes: object) -> str:
    """`line` turned into a DDL invoke; None removes a field."""
    value: dict[str, object] = {
        "stmt": "ALTER TABLE t1 ADD COLUMN c9 INT32",
        "table": "t1",
        "kind": "add_column",
    }
    _change(value, changes)
    return edit(line, f="ddl", value=value)


def _final_read(line: str, value: dict[str, object]) -> list[str]:
    """`line` and the next turned into a final read's invoke and its ok `value`."""
    invoke = json.loads(edit(line, f="final-read", value={"table": "t1"}))
    ok = {**invoke, "index": invoke["index"] + 1, "time": invoke["time"] + 1, "type": "ok",
          "node": "n1", "value": value}  # fmt: skip
    return [json.dumps(invoke), json.dumps(ok)]


def _nemesis(line: str, value: object) -> str:
    event = json.loads(line)
    return json.dumps({"index": event["index"], "time": event["time"], "type": "info",
                       "process": "nemesis", "f": "start-partition", "value": value})  # fmt: skip


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("options", [PYTHON_PATH, SPARK_PATH], ids=["python", "spark"])
def test_malformed_history_names_file_line_and_field(
    case: str,
    options: AnalyzeOptions,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    change, message = CASES[case]
    run = make_run("ap-violation", tmp_path / "run")
    write_lines(run, change(lines(run)))
    results = analyze_run(run, spark=spark, options=options)
    assert results["valid"] == "unknown" and exit_code(results) == 2
    assert results["anomalies"] == []
    assert len(results["errors"]) == 1
    assert results["errors"][0].startswith("history.jsonl " + message), results["errors"]
    assert not (run / "history.parquet").exists()


def test_missing_catalog_is_unknown_with_a_message(tmp_path: Path) -> None:
    run = make_run("ap-violation", tmp_path / "run")
    (run / "catalog.jsonl").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "checker", str(run), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] == "unknown"
    assert results["errors"] == ["catalog.jsonl: missing from the run directory"]
    assert "Traceback" not in proc.stderr


def test_bad_catalog_line_names_line_and_field(tmp_path: Path) -> None:
    from checker.contract import ContractError, read_catalog_lines

    run = make_run("ap-violation", tmp_path / "run")
    cat = (run / "catalog.jsonl").read_text().splitlines()
    broken = json.loads(cat[2])
    del broken["tables"]["t1"]["schema_version"]
    cat[2] = json.dumps(broken)
    (run / "catalog.jsonl").write_text("\n".join(cat) + "\n")
    with pytest.raises(ContractError) as e:
        read_catalog_lines(run)
    assert str(e.value) == "catalog.jsonl line 3: field 'tables.t1.schema_version': missing"


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("catalog_version", 2**70, "is greater than the maximum of 9223372036854775807"),
        ("activation_ts", 1e308, "is greater than the maximum of 9223372036854775807"),
        ("catalog_version", -(2**64), "is less than the minimum of -9223372036854775808"),
    ],
)
def test_a_catalog_int_beyond_64_bits_names_its_line(
    tmp_path: Path, field: str, value: int | float, why: str
) -> None:
    """Every int of the contract is read as 64 bits (a Spark long): one beyond, or a float as
    big, is a contract violation named by line and field, not a crash of the lookups."""
    from checker.contract import ContractError, read_catalog_lines

    run = make_run("ap-violation", tmp_path / "run")
    cat = (run / "catalog.jsonl").read_text().splitlines()
    cat[1] = json.dumps({**json.loads(cat[1]), field: value})
    (run / "catalog.jsonl").write_text("\n".join(cat) + "\n")
    with pytest.raises(ContractError) as e:
        read_catalog_lines(run)
    assert str(e.value) == f"catalog.jsonl line 2: field {field!r}: {value!r} {why}"


@pytest.mark.spark
def test_completion_without_its_invoke_makes_the_verdict_unknown(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    # A near-miss history (valid) whose second DDL lost its invoke: the completion now follows
    # another completion of its process, which breaks Jepsen's pairing.
    run = make_run("lost-ddl", tmp_path / "run")
    text = lines(run)[:2]
    text.append(edit(lines(run)[3], index=2))
    write_lines(run, text)
    results = analyze_run(run, spark=spark, options=PYTHON_PATH)
    assert results["valid"] == "unknown" and exit_code(results) == 2
    assert "1 completion(s) follow no invoke" in results["errors"][0]
    assert all(e.startswith("no final read") for e in results["errors"][1:])
    assert "first: index 2" in results["errors"][0]
    # the same history with the invoke in place is valid
    intact = make_run("lost-ddl", tmp_path / "intact")
    write_lines(intact, lines(intact)[:4])
    edited = [
        edit(x, **{"value": {**json.loads(x)["value"], "activation_ts": 196608000}})
        if json.loads(x)["index"] == 3
        else x
        for x in lines(intact)
    ]
    # and complete: the catalog ends with index i1 AVAILABLE, so its final read is there
    final = [
        {"index": 4, "time": 4500000000, "type": "invoke", "process": 5, "f": "final-read",
         "value": {"table": "t1", "index": "i1"}},
        {"index": 5, "time": 4510000000, "type": "ok", "process": 5, "f": "final-read",
         "node": "n1", "value": {"table": "t1", "index": "i1", "ts": 294912000, "entries": []}},
    ]  # fmt: skip
    write_lines(intact, [*edited, *(json.dumps(e) for e in final)])
    assert analyze_run(intact, spark=spark, options=PYTHON_PATH)["valid"] is True
