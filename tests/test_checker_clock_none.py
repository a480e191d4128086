"""The real-time checks on a run without comparable timestamps (`"clock": "none"`, as the
PostgreSQL target writes): lost-write and schema-conformance still judge, by real time and by the
schema version each read reported; lost-ddl by version and statement; the index classes against
the last catalog version; the timestamp checks are not applicable (history.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_run
from synthetic import generate_run
from tests.spark_session import spark  # noqa: F401  (session fixture)
from tests.test_checker_classes import HISTORIES, make_run, witnesses

FAST = AnalyzeOptions(with_stats=False)
MS = 1 << 16  # one millisecond of HLC


def clock_none(run: Path) -> Path:
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "clock": "none"}))
    return run


@pytest.mark.spark
@pytest.mark.parametrize(
    "case", ["lost-write", "schema-conformance", "lost-ddl", "index-missing", "index-orphan"]
)
def test_clock_free_checks_find_the_same_witnesses(
    case: str,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    expect = json.loads((HISTORIES / case / "expect.json").read_text())["fires"]
    results = analyze_run(clock_none(make_run(case, tmp_path / case)), spark=spark, options=FAST)
    assert case not in results["not_applicable"]
    assert {"ap-violation", "transborder-op"} <= set(results["not_applicable"])
    # its first half (participants that disagree) needs no clock
    assert "mixed-schema-commit" not in results["not_applicable"]
    assert {a["class"] for a in results["anomalies"]} == {case}, results["anomalies"]
    expected = expect[case]
    if case == "lost-ddl":  # version 4's ack differs only by its activation, opaque here
        expected = [e for e in expected if e != [3]]
    assert witnesses(results, case) == sorted(sorted(e) for e in expected)


def _txn(process: int, name: str, commit_ms: int, c1: int) -> tuple[dict[str, Any], ...]:
    """The invoke and ok events (index and time unset) of a one-write txn on key 7."""
    row = {"c1": c1, "c2": "a"}
    op = {"op": "w", "table": "t1", "key": 7, "row": row}
    ts = commit_ms * MS
    done = {
        **op,
        "op_ts": ts - MS,
        "node": "n1",
        "schema_version": 2,
        "result": None,
    }
    return (
        {"type": "invoke", "process": process, "f": "txn", "value": {"ops": [op]}},
        {"type": "ok", "process": process, "f": "txn",
         "node": "n1", "value": {
             "txn_id": name, "begin_ts": ts - 2 * MS, "commit_ts": ts, "ops": [done],
             "tables": {"t1": {"base_ts": ts - 2 * MS, "schema_version": 2}},
             "participants": [
                 {"node": "n1", "table": "t1", "partition": 0, "commit_schema_version": 2}
             ]}},
    )  # fmt: skip


def _concurrent_writes(run: Path, final_c1: int) -> Path:
    """Two writes of one key overlapping in real time: a is invoked first and acknowledged
    last, b commits after a (commit_ts 2400 ms against 2300 ms)."""
    a_invoke, a_ok = _txn(0, "a", 2300, 1)
    b_invoke, b_ok = _txn(1, "b", 2400, 2)
    timed = [(2200, a_invoke), (2250, b_invoke), (2500, b_ok), (2600, a_ok)]
    events = [{"index": i, "time": ms * 10**6, **e} for i, (ms, e) in enumerate(timed)]
    final = {"table": "t1", "ts": 2900 * MS, "schema_version": 2,
             "rows": [{"key": 7, "row": {"c1": final_c1, "c2": "a"}}]}  # fmt: skip
    events += [
        {"index": 4, "time": 2700 * 10**6, "type": "invoke", "process": 9, "f": "final-read",
         "value": {"table": "t1"}},
        {"index": 5, "time": 2710 * 10**6, "type": "ok", "process": 9, "f": "final-read",
         "node": "n2", "value": final},
    ]  # fmt: skip
    (run / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    # the catalog ends at version 3 (t1 schema 2, no index), so the one final read completes it
    catalog = (run / "catalog.jsonl").read_text().splitlines(keepends=True)
    (run / "catalog.jsonl").write_text("".join(catalog[:3]))
    return run


@pytest.mark.spark
def test_concurrent_writes_either_may_be_last_without_a_clock(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    # The final read shows a, which committed first: with HLC commit order that is b's write
    # lost; without a clock the two overlapped in real time, so either may be last.
    hlc = _concurrent_writes(make_run("lost-write", tmp_path / "hlc"), final_c1=1)
    found = analyze_run(hlc, spark=spark, options=FAST)
    assert witnesses(found, "lost-write") == [[2, 5]], found["anomalies"]
    free = clock_none(_concurrent_writes(make_run("lost-write", tmp_path / "free"), final_c1=1))
    assert analyze_run(free, spark=spark, options=FAST)["valid"] is True
    # neither write shown: lost either way, witnessed by the write that completed last
    gone = clock_none(_concurrent_writes(make_run("lost-write", tmp_path / "gone"), final_c1=3))
    results = analyze_run(gone, spark=spark, options=FAST)
    assert witnesses(results, "lost-write") == [[3, 5]], results["anomalies"]


@pytest.mark.spark
@pytest.mark.parametrize("fault", [None, "lost-write", "schema-conformance"])
def test_model_histories_without_a_clock(
    fault: str | None,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    generate_run(tmp_path, seed=7, events=250, fault=fault, clock="none")
    results = analyze_run(tmp_path, spark=spark, options=FAST)
    assert {a["class"] for a in results["anomalies"]} == ({fault} if fault else set())


def _renamed_then_unknown_write(run: Path, unknown_write: bool) -> Path:
    """t1 key 7 written (ok), t1 renamed to t9, then (if `unknown_write`) a txn writing t9
    key 7 = 5 ends in `info`; the final read of t9 shows 5."""
    a_invoke, a_ok = _txn(0, "a", 2300, 1)
    timed = [(2200, a_invoke), (2300, a_ok)]
    if unknown_write:
        op = {"op": "w", "table": "t9", "key": 7, "row": {"c1": 5, "c2": "a"}}
        timed += [
            (2500, {"type": "invoke", "process": 1, "f": "txn", "value": {"ops": [op]}}),
            (2600, {"type": "info", "process": 1, "f": "txn", "node": "n1", "value": {},
                    "error": {"code": "TIMEOUT", "message": "no reply", "retriable": True}}),
        ]  # fmt: skip
    final = {"table": "t9", "ts": 2900 * MS, "schema_version": 3,
             "rows": [{"key": 7, "row": {"c1": 5, "c2": "a"}}]}  # fmt: skip
    timed += [
        (2700, {"type": "invoke", "process": 9, "f": "final-read", "value": {"table": "t9"}}),
        (2710, {"type": "ok", "process": 9, "f": "final-read", "node": "n2", "value": final}),
    ]
    events = [{"index": i, "time": ms * 10**6, **e} for i, (ms, e) in enumerate(timed)]
    (run / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    lines = (run / "catalog.jsonl").read_text().splitlines(keepends=True)[:3]
    renamed = json.loads(lines[2])
    table = {**renamed["tables"]["t1"], "schema_version": 3}
    renamed.update(
        catalog_version=4,
        activation_ts=2400 * MS,
        safe_ts=2300 * MS,
        ddl="ALTER TABLE t1 RENAME TO t9",
        tables={"t9": table},
    )
    (run / "catalog.jsonl").write_text("".join(lines) + json.dumps(renamed) + "\n")
    return run


@pytest.mark.spark
@pytest.mark.parametrize("clock", ["hlc", "none"])
def test_an_unknown_write_after_a_rename_may_have_overwritten_the_key(
    clock: str,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """A txn that ended in `info` names the table as it was called then (t9); the acknowledged
    write it may have overwritten went to the same table under its old name (t1). The key is
    undecided, not lost; without that txn the final read's 5 is no write's, so t1's is lost."""

    def judged(name: str, unknown_write: bool) -> dict[str, Any]:
        run = _renamed_then_unknown_write(make_run("lost-write", tmp_path / name), unknown_write)
        return analyze_run(clock_none(run) if clock == "none" else run, spark=spark, options=FAST)

    undecided = judged("maybe", unknown_write=True)
    assert undecided["valid"] is True, (undecided["anomalies"], undecided["errors"])
    lost = judged("lost", unknown_write=False)
    assert witnesses(lost, "lost-write") == [[1, 3]], lost["anomalies"]


@pytest.mark.spark
@pytest.mark.parametrize("clock", ["hlc", "none"])
def test_without_a_clock_lost_ddl_compares_version_and_statement_not_activation(
    clock: str,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """An ack of version 4 with its statement but another activation_ts: lost-ddl with a clock,
    nothing without one (the activation is opaque); the ack of another statement at version 4
    is lost-ddl either way."""
    from tests.runbuilder import complete_events, write_run

    def acked(stmt: str) -> list[dict[str, Any]]:
        value = {"stmt": stmt, "table": "t1", "kind": "drop_column"}
        ok = {**value, "catalog_version": 4, "activation_ts": 12345}
        return [
            {"type": "invoke", "process": 30, "f": "ddl", "value": value},
            {"type": "ok", "process": 30, "f": "ddl", "node": "n1", "value": ok},
            *complete_events(),
        ]

    same = write_run(tmp_path / "same", acked("ALTER TABLE t1 DROP COLUMN c3"))
    other = write_run(tmp_path / "other", acked("ALTER TABLE t1 DROP COLUMN c2"))
    if clock == "none":
        same, other = clock_none(same), clock_none(other)
    found = [
        {a["class"] for a in analyze_run(r, spark=spark, options=FAST)["anomalies"]}
        for r in (same, other)
    ]
    assert found == [set() if clock == "none" else {"lost-ddl"}, {"lost-ddl"}], found
