"""The verdict on complete and incomplete histories (history.md, "A complete history"): a cut
history, missing or failed final reads and unhealed faults are unknown with errors that say what
is missing; an anomaly the present events prove is still false; a complete one is valid."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_run, exit_code
from checker.completeness import missing_final_reads, required_tables, unhealed_faults
from tests.runbuilder import common_catalog, complete_events, hlc, write_run
from tests.spark_session import spark  # noqa: F401  (session fixture)

FAST = AnalyzeOptions(with_stats=False)


def _analyze(session: SparkSession, dest: Path, events: list, **kw: Any) -> dict:
    return analyze_run(write_run(dest, events, **kw), spark=session, options=FAST)


@pytest.mark.spark
def test_the_complete_history_is_valid(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    results = _analyze(spark, tmp_path / "run", complete_events())
    assert results["errors"] == [] and results["anomalies"] == []
    assert results["valid"] is True and exit_code(results) == 0


@pytest.mark.spark
def test_a_cut_history_is_unknown_and_says_what_is_missing(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    results = _analyze(spark, tmp_path / "run", complete_events()[:4])
    assert results["valid"] == "unknown" and exit_code(results) == 2
    errors = "\n".join(results["errors"])
    assert "1 invoke without a completion, the last at index 3" in errors
    assert "fault start-partition at index 2 was never healed" in errors
    assert "no final read of t1" in errors
    assert "no final read of index i1 of t1" in errors


@pytest.mark.spark
def test_no_final_reads_is_unknown(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    results = _analyze(spark, tmp_path / "run", complete_events()[:7])
    assert results["valid"] == "unknown"
    assert any(e.startswith("no final read of t1;") for e in results["errors"])


@pytest.mark.spark
def test_a_failed_final_read_is_unknown(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    events = complete_events()
    events[8] = {
        "type": "fail",
        "process": 2,
        "f": "final-read",
        "node": "n1",
        "value": {"table": "t1", "ts": hlc(4500)},
        "error": {"code": "TIMEOUT", "message": "no reply", "retriable": True},
    }
    results = _analyze(spark, tmp_path / "run", events)
    assert results["valid"] == "unknown"
    assert any(e.startswith("final read of t1 failed: TIMEOUT") for e in results["errors"])


@pytest.mark.spark
def test_a_retried_final_read_that_succeeds_completes_the_history(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    events = complete_events()
    failed = {
        "type": "info",
        "process": 3,
        "f": "final-read",
        "node": "n2",
        "value": {"table": "t1"},
        "error": {"code": "UNAVAILABLE", "message": "down", "retriable": True},
    }
    events[7:7] = [{"type": "invoke", "process": 3, "f": "final-read", "value": {"table": "t1"}}]
    events[8:8] = [failed]
    results = _analyze(spark, tmp_path / "run", events)
    assert results["valid"] is True, results["errors"]


@pytest.mark.spark
def test_a_table_only_an_unknown_outcome_wrote_needs_its_final_read(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """The write to t1 times out (info, its ops only in the invoke): it may have applied, so
    t1 still needs its final read; with the final read the history is complete."""
    events = complete_events()
    events[1] = {
        "type": "info",
        "process": 0,
        "f": "txn",
        "node": "n1",
        "value": {"txn_id": "a1"},
        "error": {"code": "TIMEOUT", "message": "no reply", "retriable": False},
    }
    whole = _analyze(spark, tmp_path / "whole", events)
    assert whole["valid"] is True, whole["errors"]
    cut = _analyze(spark, tmp_path / "cut", events[:7] + events[9:])
    assert cut["valid"] == "unknown"
    assert any(e.startswith("no final read of t1;") for e in cut["errors"]), cut["errors"]


@pytest.mark.spark
def test_a_second_table_only_an_unknown_outcome_wrote_needs_its_final_read(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """An ok txn writes t1 and a timed-out one t2 (created at 4300 ms): the ok writes do not
    cover the final catalog, so the timed-out txn's tables are looked up, and t2 needs its
    final read."""
    catalog = common_catalog()
    last = copy.deepcopy(catalog[-1])
    last["tables"]["t2"] = {
        "id": 2,
        "schema_version": 1,
        "columns": [{"id": 1, "name": "c1", "type": "INT32", "nullable": True, "default": None}],
        "indexes": [],
    }
    last.update(
        catalog_version=6,
        activation_ts=hlc(4300),
        safe_ts=hlc(3800),
        ddl="CREATE TABLE t2 (c1 INT32)",
    )
    catalog.append(last)
    row = {"c1": 7}
    timed_out = [
        {"type": "invoke", "process": 3, "f": "txn",
         "value": {"ops": [{"op": "w", "table": "t2", "key": 1, "row": row}]}},
        {"type": "info", "process": 3, "f": "txn", "node": "n2", "value": {"txn_id": "b1"},
         "error": {"code": "TIMEOUT", "message": "no reply", "retriable": False}},
    ]  # fmt: skip
    read_t2 = [
        {"type": "invoke", "process": 2, "f": "final-read", "value": {"table": "t2"}},
        {"type": "ok", "process": 2, "f": "final-read", "node": "n1", "value": {
            "table": "t2", "ts": hlc(4500), "schema_version": 1, "rows": []}},
    ]  # fmt: skip
    events = complete_events()
    cut = _analyze(spark, tmp_path / "cut", events[:2] + timed_out + events[2:], catalog=catalog)
    assert cut["valid"] == "unknown"
    assert any(e.startswith("no final read of t2;") for e in cut["errors"]), cut["errors"]
    assert not any("of t1" in e for e in cut["errors"]), cut["errors"]
    whole = _analyze(
        spark, tmp_path / "whole", events[:2] + timed_out + events[2:] + read_t2, catalog=catalog
    )
    assert whole["valid"] is True, (whole["errors"], whole["anomalies"])


def test_the_tables_a_write_requires_to_be_read() -> None:
    """By id through a rename, none when dropped, nothing for a name no catalog had."""
    old = {"tables": {"a": {"id": 1}, "gone": {"id": 2}}}
    end = {"tables": {"b": {"id": 1}, "c": {"id": 3}}}
    assert required_tables({"a", "gone", "never"}, end, [old, end]) == {"b"}
    assert required_tables({"c"}, end, [old, end]) == {"c"}
    assert required_tables({"a"}, None, [old]) == set()
    assert required_tables(set(), end, [old, end]) == set()


@pytest.mark.spark
def test_an_anomaly_in_a_cut_history_is_false(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    events = complete_events()[:5]
    events[4] = copy.deepcopy(events[4])
    events[4]["value"]["catalog_version"] = 4  # v5 is active at 4200 ms: an ap-violation
    results = _analyze(spark, tmp_path / "run", events)
    assert results["valid"] is False and exit_code(results) == 1
    assert {a["class"] for a in results["anomalies"]} == {"ap-violation"}
    assert results["errors"], "the missing parts are still named"


def _failed_read(schema_version: int) -> list[dict[str, Any]]:
    """The only client op: a txn whose read ran at 3100 ms (t1 schema 3 in the catalog),
    reporting `schema_version`, then failed; nothing in the history completed ok."""
    op = {"op": "r", "table": "t1", "key": 1}
    return [
        {"type": "invoke", "process": 0, "f": "txn", "value": {"ops": [op]}},
        {"type": "fail", "process": 0, "f": "txn", "node": "n1",
         "error": {"code": "INCOMPATIBLE_SCHEMA", "message": "schema changed", "retriable": True},
         "value": {"txn_id": "f1", "begin_ts": hlc(3050), "commit_ts": None,
                   "ops": [{**op, "op_ts": hlc(3100), "node": "n2",
                            "schema_version": schema_version, "result": None}],
                   "tables": {"t1": {"base_ts": hlc(3050), "schema_version": 3}},
                   "participants": []}},
    ]  # fmt: skip


@pytest.mark.spark
def test_an_anomaly_is_reported_when_nothing_completed_ok(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """A run where no op succeeded did not get going (unknown), but what its events prove is
    still reported and makes it false (history.md, "A complete history")."""
    results = _analyze(spark, tmp_path / "off", _failed_read(2))
    assert results["valid"] is False and exit_code(results) == 1
    assert [(a["class"], a["events"]) for a in results["anomalies"]] == [("ap-violation", [1])]
    assert any("did not get going" in e for e in results["errors"])
    near_miss = _analyze(spark, tmp_path / "right", _failed_read(3))
    assert near_miss["valid"] == "unknown" and near_miss["anomalies"] == []
    assert any("did not get going" in e for e in near_miss["errors"])
    with_stats = analyze_run(tmp_path / "off", spark=spark)  # the statistics of no ok op
    assert with_stats["valid"] is False and with_stats["stats"]["events"] == 2


@pytest.mark.spark
def test_activation_out_of_order_is_reported_not_a_crash(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    catalog = common_catalog()
    catalog[3]["activation_ts"] = hlc(500)  # version 4 before version 2 and 3
    results = _analyze(spark, tmp_path / "run", complete_events(), catalog=catalog)
    assert results["valid"] is False
    assert "activation-order" in {a["class"] for a in results["anomalies"]}


@pytest.mark.spark
def test_a_torn_last_line_is_unknown(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    run = write_run(tmp_path / "run", complete_events())
    text = (run / "history.jsonl").read_text()
    (run / "history.jsonl").write_text(text[: len(text) - 30])
    results = analyze_run(run, spark=spark, options=FAST)
    assert results["valid"] == "unknown"
    assert any("truncated" in e for e in results["errors"])


def test_faults_closed_by_their_stop_or_a_heal_all() -> None:
    def ev(i: int, f: str) -> dict:
        return {"index": i, "f": f}

    assert unhealed_faults([ev(0, "start-clock"), ev(1, "stop-clock")]) == []
    assert unhealed_faults([ev(0, "start-partition"), ev(1, "heal-partition")]) == []
    assert unhealed_faults([ev(0, "start-kill"), ev(1, "start-pause"), ev(2, "heal-all")]) == []
    (only,) = unhealed_faults([ev(0, "start-kill"), ev(1, "stop-pause")])
    assert "start-kill at index 0" in only
    # a heal-all before a start does not close it
    assert len(unhealed_faults([ev(0, "heal-all"), ev(1, "start-pause")])) == 1

    def fault(i: int, f: str, fault_id: int) -> dict:
        return {"index": i, "f": f, "value_json": f'{{"fault": {fault_id}, "kind": "kill"}}'}

    # one kind overlapping itself: a stop closes the start with its fault id, not the earliest
    (only,) = unhealed_faults(
        [fault(10, "start-kill", 1), fault(11, "start-kill", 2), fault(12, "stop-kill", 2)]
    )
    assert "start-kill at index 10" in only
    # without ids, the earliest open start
    (only,) = unhealed_faults([ev(10, "start-kill"), ev(11, "start-kill"), ev(12, "stop-kill")])
    assert "start-kill at index 11" in only


def test_final_reads_follow_a_renamed_table_and_skip_a_dropped_one() -> None:
    t = {"id": 7, "schema_version": 1, "columns": [], "indexes": []}
    old = {"tables": {"a": t, "gone": {**t, "id": 8}}}
    end = {"tables": {"b": {**t, "indexes": [{"name": "ix", "columns": [], "state": "AVAILABLE"}]}}}
    reads = [{"index": 5, "type": "ok", "table": "b", "index_name": None}]
    errors, undecided = missing_final_reads({"a", "gone"}, reads, end, [old, end])
    assert errors == [
        "no final read of index ix of b (AVAILABLE at the end); the index classes of b are "
        "undecided"
    ]
    assert undecided == {"b"}


@pytest.mark.spark
@pytest.mark.parametrize("python_validation_max_bytes", [0, 32 * 1024 * 1024])
@pytest.mark.parametrize(
    ("line", "path", "value"),
    [
        (2, ("value", "participants", 0, "commit_schema_version"), None),
        (2, ("value", "participants", 0, "commit_schema_version"), "4"),
        (2, ("value", "ops", 0, "key"), None),
        (2, ("value", "ops", 0, "node"), None),
        (5, ("value", "catalog_version"), 1 << 70),
        (2, ("value", "tables", "t1", "base_ts"), 1.5),
        # a client operation from a process that is not a client's (an integer)
        (1, ("process",), "elle-worker-1"),
        (5, ("process",), "monitor"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_contract_error_at_any_size(
    line: int,
    path: tuple,
    value: object,
    python_validation_max_bytes: int,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """Null or a string where the contract says int, or an int no 64-bit column holds: unknown,
    naming the line, whether the whole file is validated in Python first or only by Spark."""
    events = complete_events()
    target: Any = events[line - 1]
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    run = write_run(tmp_path / "run", events)
    options = AnalyzeOptions(
        with_stats=False, python_validation_max_bytes=python_validation_max_bytes
    )
    results = analyze_run(run, spark=spark, options=options)
    assert results["valid"] == "unknown" and results["anomalies"] == []
    assert any(f"history.jsonl line {line}" in e for e in results["errors"]), results["errors"]


@pytest.mark.spark
def test_integers_are_compared_exactly(spark: SparkSession) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    from checker.durability import same_value

    pairs = [
        ("9007199254740993", "9007199254740992", False),  # equal as doubles
        ("9223372036854775807", "9223372036854775807", True),
        ("1", "1.0", True),
        ("1.5", "1.50", True),
        ("a", "a", True),
        ("a", None, False),
        (None, None, True),
    ]
    df = spark.createDataFrame([(a, b) for a, b, _ in pairs], "a string, b string")
    got = [r[0] for r in df.select(same_value(F.col("a"), F.col("b"))).collect()]
    assert got == [same for _, _, same in pairs]


@pytest.mark.spark
@pytest.mark.parametrize("python_validation_max_bytes", [0, 32 * 1024 * 1024])
def test_indexes_with_gaps_are_the_contracts(
    python_validation_max_bytes: int,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """history.md: `index` is "unique, ascending from 0", not one more each line."""
    events = [{"index": 3 * i, "time": (4000 + 10 * i) * 1_000_000, **e}
              for i, e in enumerate(complete_events())]  # fmt: skip
    run = write_run(tmp_path / "run", events, renumber=False)
    options = AnalyzeOptions(
        with_stats=False, python_validation_max_bytes=python_validation_max_bytes
    )
    results = analyze_run(run, spark=spark, options=options)
    assert results["valid"] is True and results["errors"] == [], results["errors"]


@pytest.mark.spark
# lines 3 and 9 begin a partition (the check of the partitions' edges alone catches them), 4 not
@pytest.mark.parametrize("repeated_at", [None, 3, 4, 9])
def test_index_order_is_checked_across_partitions(
    repeated_at: int | None,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """Judged by Spark alone over partitions of about 512 bytes: gaps, at the partitions' edges
    too, are valid; a line repeating the index before it is named, wherever the edges fall."""
    events = [{"index": 3 * i, "time": (4000 + 10 * i) * 1_000_000, **e}
              for i, e in enumerate(complete_events())]  # fmt: skip
    if repeated_at is not None:
        events[repeated_at - 1]["index"] = events[repeated_at - 2]["index"]
    run = write_run(tmp_path / "run", events, renumber=False)
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, "512")
    try:
        assert spark.read.text(str(run / "history.jsonl")).rdd.getNumPartitions() >= 4
        options = AnalyzeOptions(with_stats=False, python_validation_max_bytes=0)
        results = analyze_run(run, spark=spark, options=options)
    finally:
        spark.conf.set(key, before)
    if repeated_at is None:
        assert results["valid"] is True and results["errors"] == [], results["errors"]
    else:
        assert results["valid"] == "unknown"
        assert results["errors"][0].startswith(f"history.jsonl line {repeated_at}: field 'index'")


@pytest.mark.spark
def test_a_value_fits_its_type_by_its_json_text(spark: SparkSession) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    from checker.conformance import value_fits

    cases = [  # (JSON text, base type, precision, scale, fits)
        ("2147483647", "INT32", None, None, True),
        ("2147483648", "INT32", None, None, False),
        (str(1 << 70), "INT32", None, None, False),  # beyond INT64: no cast, still out of range
        (str(1 << 63), "INT64", None, None, False),
        ('"12.30"', "DECIMAL", 5, 2, True),  # our encoding: a string
        ("999.99", "DECIMAL", 5, 2, True),  # another harness's: a number
        ("12", "DECIMAL", 5, 2, True),
        ("1.0", "DECIMAL", 5, 2, True),
        ("1000", "DECIMAL", 5, 2, False),
        ("1.005", "DECIMAL", 5, 2, False),
        ('"1.005"', "DECIMAL", 5, 2, False),
        ("true", "DECIMAL", 5, 2, False),
        ('{"a": 1}', "DECIMAL", 5, 2, False),
    ]
    df = spark.createDataFrame(
        [c[:4] for c in cases], "j string, base string, prec int, scale int"
    ).select("*", F.lit(None).cast("int").alias("length"), F.parse_json("j").alias("v"))
    df = df.withColumn("_j", F.to_json("v")).withColumn(
        "_s", F.when(F.col("_j").startswith('"'), F.expr("try_variant_get(v, '$', 'string')"))
    )
    got = [r[0] for r in df.select(value_fits(F.col("_j"), F.col("_s"))).collect()]
    assert got == [c[4] for c in cases]


@pytest.mark.spark
def test_an_int32_beyond_int64_is_a_schema_conformance_anomaly(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """Written, read back and indexed alike (no lost-write, no orphan), but no INT32 holds it."""
    events = complete_events()
    huge = {"c1": 1 << 70, "c2": "a"}
    events[0]["value"]["ops"][0]["row"] = huge
    events[1]["value"]["ops"][0]["row"] = huge
    events[8]["value"]["rows"][0]["row"] = huge
    events[10]["value"]["entries"][0]["values"] = {"c1": huge["c1"]}  # the index agrees
    results = _analyze(spark, tmp_path / "run", events)
    assert results["valid"] is False and results["errors"] == []
    assert {a["class"] for a in results["anomalies"]} == {"schema-conformance"}
    assert "does not fit INT32" in results["anomalies"][0]["explanation"]


@pytest.mark.spark
def test_setup_before_the_workload_is_not_downtime(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    """The history's first op comes 4 s after time 0 (provisioning): no node was unavailable."""
    run = write_run(tmp_path / "run", complete_events())
    results = analyze_run(run, spark=spark, options=AnalyzeOptions())
    stats = results["stats"]
    assert stats["unavailability"] == []
    assert stats["workload_start_s"] == 4.0
    assert 0 < stats["workload_duration_s"] < stats["duration_s"]


@pytest.mark.spark
def test_an_op_on_a_table_gone_at_its_ts_may_have_no_schema_version(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """The primary found no table t9 at op_ts: the op is executed (op_ts, node) with a null
    schema_version and the txn fails TABLE_DROPPED; within the contract, and valid."""
    events = complete_events()
    op = {"op": "r", "table": "t9", "key": 1}
    done = {**op, "op_ts": hlc(4150), "node": "n2", "schema_version": None, "result": None}
    events[7:7] = [
        {"type": "invoke", "process": 4, "f": "txn", "value": {"ops": [op]}},
        {
            "type": "fail",
            "process": 4,
            "f": "txn",
            "node": "n2",
            "value": {"txn_id": "d1", "begin_ts": hlc(4149), "commit_ts": None, "ops": [done],
                      "tables": {}, "participants": []},
            "error": {"code": "TABLE_DROPPED", "message": "no t9", "retriable": False},
        },
    ]  # fmt: skip
    results = _analyze(spark, tmp_path / "run", events)
    assert results["errors"] == [] and results["valid"] is True, results
