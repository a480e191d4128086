"""The contract's edges, each held both ways on a small complete history (the common catalog):
extra fields that another f's contract types, a process that invokes again after `info`, the
largest legal timestamp, a failed final read that does not repeat its table, copies per node
compared only where the target declares them, any index state, a negative process, a last op
that returned a row, participants that disagree on a run without a clock, a lookup through an
index without a key.

Each test's runs are cases (`case`): every case of the module is judged in one batch per way
of reading the history (READINGS), as `schemachaos analyze` judges many runs, statistics
included, and each test asserts on its own cases' results. A batch of the 59 small runs took
90-108 s warm, about a dozen single analyses' time, where a run at a time cost one each
(test_checker_batch and test_checker_ingest_batch hold a batch's results to each run's alone)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_runs, exit_code
from checker.ingest import _parse_lines
from contract.rundir import HISTORY_COLUMNAR
from tests.spark_session import spark  # noqa: F401  (session fixture)
from tests.test_checker_classes import HISTORIES, make_run
from tests.test_checker_columnar import replay

# The two ways a JSONL history is validated: line by line in Python (a small one, the
# default), and by Spark's per-line checks (any history over the Python limit, here all)
READINGS = {"python": AnalyzeOptions(), "spark": AnalyzeOptions(python_validation_max_bytes=0)}
PATHS = pytest.mark.parametrize("reading", list(READINGS))
INT64_MAX = (1 << 63) - 1
T1_COLUMNS = [
    {"id": 1, "name": "c1", "type": "INT32", "nullable": True, "default": None},
    {"id": 2, "name": "c2", "type": "VARCHAR(4)", "nullable": False, "default": "x"},
]
MISTYPED = "a field is not of its contract type"


def _txn_ok(i: int, process: int, key: int, ts: int, sv: int = 4) -> dict[str, Any]:
    op = {"op": "w", "table": "t1", "key": key, "row": {"c1": key, "c2": "a"}}
    return {
        "index": i,
        "time": 5_001_000_000 + i,
        "type": "ok",
        "process": process,
        "f": "txn",
        "node": "n1",
        "value": {
            "txn_id": f"x{i}",
            "begin_ts": ts,
            "commit_ts": ts + 10,
            "ops": [{**op, "op_ts": ts + 1, "node": "n1", "schema_version": sv, "result": None}],
            "tables": {"t1": {"base_ts": ts, "schema_version": sv}},
            "participants": [
                {"node": "n1", "table": "t1", "partition": 0, "commit_schema_version": sv}
            ],
        },
    }


def _invoke(i: int, process: int, f: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"index": i, "time": 5_000_000_000 + i, "type": "invoke", "process": process, "f": f,
            "value": value}  # fmt: skip


def base() -> list[dict[str, Any]]:
    """A complete, valid history: a write of key 1, a probe, the final reads of t1 and i1."""
    write = {"op": "w", "table": "t1", "key": 1, "row": {"c1": 1, "c2": "a"}}
    probe = {"ts": 393216000, "catalog_version": 5, "table_schema_version": 4,
             "columns": T1_COLUMNS}  # fmt: skip
    read = {"table": "t1", "ts": 400000000, "schema_version": 4,
            "rows": [{"key": 1, "row": {"c1": 1, "c2": "a"}}]}  # fmt: skip
    entries = {"table": "t1", "index": "i1", "ts": 400000000,
               "entries": [{"key": 1, "values": {"c1": 1}}]}  # fmt: skip
    return [
        _invoke(0, 0, "txn", {"ops": [write]}),
        _txn_ok(1, 0, 1, 300000000),
        _invoke(2, 1, "probe", {"table": "t1", "ts": None}),
        {**_invoke(3, 1, "probe", probe), "type": "ok", "node": "n2"},
        _invoke(4, 2, "final-read", {"table": "t1"}),
        {**_invoke(5, 2, "final-read", read), "type": "ok", "node": "n2"},
        _invoke(6, 3, "final-read", {"table": "t1", "index": "i1"}),
        {**_invoke(7, 3, "final-read", entries), "type": "ok", "node": "n2"},
    ]


def write_run(
    dest: Path, events: list[dict[str, Any]], run_changes: dict[str, Any] | None = None
) -> Path:
    run = make_run("common", dest)
    (run / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if run_changes:
        meta = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**meta, **run_changes}))
    return run


Build = Callable[[Path], Path]
CASES: dict[str, Build] = {}  # a case's name -> what writes its run directory at a path
Judged = dict[str, dict[str, dict[str, Any]]]  # reading -> case -> results.json


def case(name: str, build: Build) -> None:
    """Register a run for the module's batches, under a name no other case has."""
    assert name not in CASES, f"two cases named {name}"
    CASES[name] = build


def events_case(
    name: str, events: Callable[[], list[dict[str, Any]]], run_changes: dict[str, Any] | None = None
) -> None:
    """A case of the common catalog whose history is `events()`."""
    case(name, lambda dest: write_run(dest, events(), run_changes))


@pytest.fixture(scope="module")
def judged(
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,  # noqa: F811
) -> Judged:
    """Every case's results, read each way: each reading's runs judged in one batch."""
    out: Judged = {}
    for reading, options in READINGS.items():
        root = tmp_path_factory.mktemp(reading)
        dirs = {name: build(root / name) for name, build in CASES.items()}
        out[reading] = dict(
            zip(dirs, analyze_runs(list(dirs.values()), spark=spark, options=options), strict=True)
        )
    return out


def classes(results: dict[str, Any]) -> set[str]:
    return {a["class"] for a in results["anomalies"]}


events_case("base", base)


@pytest.mark.spark
@PATHS
def test_the_base_history_is_valid(judged: Judged, reading: str) -> None:
    results = judged[reading]["base"]
    assert results["valid"] is True and results["errors"] == [], results


def _extra_fields() -> list[dict[str, Any]]:
    events = base()
    events[1]["value"]["ts"] = "2024-01-01T00:00:00Z"
    events[3]["value"]["rows"] = "none"
    events[0]["value"]["schema_version"] = "latest"
    return events


events_case("extra-fields", _extra_fields)


@pytest.mark.spark
@PATHS
def test_an_extra_field_that_another_fs_contract_types_is_allowed(
    judged: Judged, reading: str
) -> None:
    """`ts` is a probe's integer, `rows` a final read's list, `schema_version` an op's integer:
    as extra fields of a txn, a probe and a txn invoke they may hold anything."""
    results = judged[reading]["extra-fields"]
    assert results["valid"] is True and results["errors"] == [], results


@pytest.mark.spark
def test_spark_flags_a_mistyped_field_of_the_lines_own_contract_only(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """The per-line check big histories get: the same kind of value is an error in the field
    the line's f types and allowed in an extra field."""
    events = base()
    lines = [
        {**events[1], "value": {**events[1]["value"], "ts": "soon"}},  # extra: allowed
        {**events[1], "value": {**events[1]["value"], "commit_ts": "soon"}},  # contract: not
        {**events[3], "value": {**events[3]["value"], "rows": 7}},  # extra: allowed
        {**events[3], "value": {**events[3]["value"], "ts": "soon"}},  # contract: not
        {**events[5], "value": {**events[5]["value"], "rows": "all"}},  # contract: not
        # the contract types a field per f and type: an extra on another type of the same f
        {**events[5], "type": "fail", "value": {"ts": "2024-01-01"}},  # a final read's fail
        {**events[0], "f": "ddl", "value": {"stmt": "DROP TABLE t1", "activation_ts": "soon"}},
        {**events[0], "f": "ddl", "type": "ok", "value": {"activation_ts": "soon"}},
        {**events[0], "value": {**events[0]["value"], "commit_ts": "soon"}},  # a txn invoke's
        {**events[2], "value": {"table": "t1", "ts": "soon"}},  # a probe invoke's ts: typed
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({**e, "index": i}) + "\n" for i, e in enumerate(lines)))
    problems = [r["_problem"] for r in _parse_lines(spark, path).orderBy("index").collect()]
    flagged = [p is not None and MISTYPED in p for p in problems]
    assert flagged == [False, True, False, True, True, False, False, True, False, True]


def _lost_write_with_extra(dest: Path) -> Path:
    run = make_run("lost-write", dest)
    events = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    for e in events:
        if e["f"] == "txn" and e["type"] == "ok":
            e["value"]["ts"] = "later"
    (run / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


case("lost-write", lambda dest: make_run("lost-write", dest))
case("lost-write-extra", _lost_write_with_extra)


@pytest.mark.spark
@PATHS
def test_a_lost_write_is_found_through_a_colliding_extra_field(
    judged: Judged, reading: str
) -> None:
    """The parse keeps the rest of a value whose extra field has another f's type."""
    plain, results = judged[reading]["lost-write"], judged[reading]["lost-write-extra"]
    assert "lost-write" in classes(plain)
    assert results["anomalies"] == plain["anomalies"] and results["valid"] == plain["valid"]


def _after_info(second_process: int) -> list[dict[str, Any]]:
    """Process 0's write of key 2 ends in `info`; then `second_process` writes key 1."""
    write2 = {"op": "w", "table": "t1", "key": 2, "row": {"c1": 2, "c2": "b"}}
    info = {**_invoke(1, 0, "txn", {}), "type": "info", "node": "n1",
            "error": {"code": "TIMEOUT", "message": "timed out", "retriable": True}}  # fmt: skip
    events = base()
    return [
        _invoke(0, 0, "txn", {"ops": [write2]}),
        info,
        {**events[0], "index": 2, "process": second_process},
        {**_txn_ok(3, 0, 1, 300000000), "process": second_process},
        *({**e, "index": e["index"] + 2} for e in events[2:]),
    ]


events_case("reinvoked", lambda: _after_info(0))
events_case("new-process-after-info", lambda: _after_info(9))


@pytest.mark.spark
def test_an_invoke_after_info_by_the_same_process_breaks_the_contract(judged: Judged) -> None:
    reused = judged["python"]["reinvoked"]
    assert reused["valid"] == "unknown" and exit_code(reused) == 2, reused
    assert len(reused["errors"]) == 1 and "info (first: index 2)" in reused["errors"][0]
    # the near miss: the workload's way, a new process after the info
    fresh = judged["python"]["new-process-after-info"]
    assert fresh["valid"] is True and fresh["errors"] == [], fresh


def _probe_at_the_largest_ts(version: int) -> list[dict[str, Any]]:
    answer = {"ts": INT64_MAX, "catalog_version": version, "table_schema_version": 4,
              "columns": T1_COLUMNS}  # fmt: skip
    return [
        *base(),
        _invoke(8, 10, "probe", {"table": "t1", "ts": INT64_MAX}),
        {**_invoke(9, 10, "probe", answer), "type": "ok", "node": "n1"},
    ]


events_case("probe-at-max-right", lambda: _probe_at_the_largest_ts(5))
events_case("probe-at-max-wrong", lambda: _probe_at_the_largest_ts(4))


@pytest.mark.spark
def test_a_probe_at_the_largest_timestamp_is_judged_against_the_last_version(
    judged: Judged,
) -> None:
    right = judged["python"]["probe-at-max-right"]
    assert right["valid"] is True, right
    wrong = judged["python"]["probe-at-max-wrong"]
    assert classes(wrong) == {"ap-violation"}
    assert [a["events"] for a in wrong["anomalies"]] == [[9]]


def _failed_final_read(outcome: str) -> list[dict[str, Any]]:
    events = base()
    error = {"code": "TIMEOUT", "message": "timed out", "retriable": True}
    events[5] = {**_invoke(5, 2, "final-read", {}), "type": outcome, "node": "n2", "error": error}
    del events[5]["value"]
    return events


events_case("final-read-fail", lambda: _failed_final_read("fail"))
events_case("final-read-info", lambda: _failed_final_read("info"))


@pytest.mark.spark
@pytest.mark.parametrize("outcome", ["fail", "info"])
def test_a_failed_final_read_is_named_by_its_invokes_table(judged: Judged, outcome: str) -> None:
    results = judged["python"][f"final-read-{outcome}"]
    assert results["valid"] == "unknown"
    assert results["errors"][0].startswith("final read of t1 failed: TIMEOUT (index 5)"), results


def _diverging() -> list[dict[str, Any]]:
    """n1's and n2's final reads of t1 differ on key 2, which only an `info` txn may have
    written (so lost-write cannot tell)."""
    write2 = {"op": "w", "table": "t1", "key": 2, "row": {"c1": 2, "c2": "b"}}
    info = {**_invoke(3, 5, "txn", {}), "type": "info", "node": "n1",
            "error": {"code": "TIMEOUT", "message": "timed out", "retriable": True}}  # fmt: skip
    events = base()
    both = [{"key": 1, "row": {"c1": 1, "c2": "a"}}, {"key": 2, "row": {"c1": 2, "c2": "b"}}]
    on_n2 = {**events[5]["value"], "rows": both}
    entries = {**events[7]["value"], "entries": [{"key": 1, "values": {"c1": 1}},
                                                 {"key": 2, "values": {"c1": 2}}]}  # fmt: skip
    return [
        *events[:2],
        _invoke(2, 5, "txn", {"ops": [write2]}),
        info,
        _invoke(4, 2, "final-read", {"table": "t1"}),
        {**events[5], "node": "n1"},
        _invoke(6, 6, "final-read", {"table": "t1"}),
        {**_invoke(7, 6, "final-read", on_n2), "type": "ok", "node": "n2"},
        {**events[6], "index": 8},
        {**events[7], "index": 9, "value": entries},
    ]


events_case("diverging-undeclared", _diverging)
events_case("diverging-declared", _diverging, {"capabilities": ["per-node-copies"]})


@pytest.mark.spark
def test_copies_per_node_are_compared_only_where_the_target_declares_them(
    judged: Judged,
) -> None:
    undeclared = judged["python"]["diverging-undeclared"]
    assert undeclared["valid"] is True, undeclared
    assert "replica-divergence" in undeclared["not_applicable"]
    declared = judged["python"]["diverging-declared"]
    assert classes(declared) == {"replica-divergence"}, declared
    assert [a["events"] for a in declared["anomalies"]] == [[5, 7]]


def _renamed_between_reads(dest: Path, n1_c2: str) -> Path:
    """A run with c1 renamed to c9 (t1 schema 5, at 6200 ms) after n1's final read of t1,
    where key 1 has c2 = `n1_c2`, and before n2's (key 1 as written) and the read of i1."""
    events = base()
    n2 = {"table": "t1", "ts": 6300 << 16, "schema_version": 5,
          "rows": [{"key": 1, "row": {"c9": 1, "c2": "a"}}]}  # fmt: skip
    events[5]["node"] = "n1"
    events[5]["value"]["rows"][0]["row"]["c2"] = n1_c2
    events[7]["value"].update(ts=6300 << 16, entries=[{"key": 1, "values": {"c9": 1}}])
    events[6:6] = [_invoke(6, 4, "final-read", {"table": "t1"}),
                   {**_invoke(7, 4, "final-read", n2), "type": "ok", "node": "n2"}]  # fmt: skip
    for i, e in enumerate(events):
        e["index"] = i
    run = write_run(dest, events, {"capabilities": ["per-node-copies"]})
    lines = (run / "catalog.jsonl").read_text().splitlines()
    renamed = json.loads(lines[-1])
    t1 = renamed["tables"]["t1"]
    t1["schema_version"] = 5
    t1["columns"][0]["name"] = "c9"
    t1["indexes"][0]["columns"] = ["c9"]
    renamed.update(catalog_version=6, activation_ts=6200 << 16, safe_ts=6100 << 16,
                   ddl="ALTER TABLE t1 RENAME COLUMN c1 TO c9")  # fmt: skip
    (run / "catalog.jsonl").write_text("\n".join([*lines, json.dumps(renamed)]) + "\n")
    return run


case("renamed-same", lambda dest: _renamed_between_reads(dest, "a"))
case("renamed-differ", lambda dest: _renamed_between_reads(dest, "b"))


@pytest.mark.spark
def test_copies_are_compared_by_column_id_across_a_rename(judged: Judged) -> None:
    """system.md: columns are identified by id. A final read before RENAME COLUMN c1 TO c9
    and one after it hold the same row; a different value in another column differs."""
    results = judged["python"]["renamed-same"]
    assert results["valid"] is True and results["errors"] == [], results
    results = judged["python"]["renamed-differ"]
    assert classes(results) == {"replica-divergence"}, results
    [found] = results["anomalies"]
    assert found["events"] == [5, 7]
    assert "{c1=1, c2=b} on n1 and {c2=a, c9=1} on n2" in found["explanation"], found


def _unknown_index_state(dest: Path) -> Path:
    run = write_run(dest, base())
    lines = (run / "catalog.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    last["tables"]["t1"]["indexes"].append({"name": "i3", "columns": ["c2"], "state": "READ_ONLY"})
    (run / "catalog.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    return run


case("unknown-index-state", _unknown_index_state)


@pytest.mark.spark
def test_an_index_state_the_checker_does_not_know_is_accepted(judged: Judged) -> None:
    results = judged["python"]["unknown-index-state"]
    assert results["valid"] is True and results["errors"] == [], results


def _negative_process() -> list[dict[str, Any]]:
    events = base()
    events[0]["process"] = events[1]["process"] = -1
    return events


events_case("negative-process", _negative_process)


@pytest.mark.spark
@PATHS
def test_a_negative_process_is_a_client(judged: Judged, reading: str) -> None:
    results = judged[reading]["negative-process"]
    assert results["valid"] is True and results["errors"] == [], results
    assert results["anomalies"] == []


def _nan(dest: Path) -> Path:
    run = write_run(dest, base())
    lines = (run / "history.jsonl").read_text().splitlines()
    lines[5] = lines[5].replace('"c1": 1', '"c1": NaN')
    assert "NaN" in lines[5]
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    return run


case("nan", _nan)


@pytest.mark.spark
@PATHS
def test_nan_is_not_json(judged: Judged, reading: str) -> None:
    """Python's parser takes NaN, which JSON has not: a final read holding one is a line that
    breaks the contract (unknown, named), not a value to judge."""
    results = judged[reading]["nan"]
    assert results["valid"] == "unknown" and results["anomalies"] == [], results
    assert results["errors"][0].startswith("history.jsonl line 6"), results


def _nested_too_deep(dest: Path) -> Path:
    heal = {"index": 1, "time": 2, "type": "info", "process": "nemesis", "f": "stop-x",
            "value": {}}  # fmt: skip
    run = write_run(dest, [heal, *({**e, "index": e["index"] + 2} for e in base())])
    # deeper than Python's parser (and Jackson's default limit) goes; written by hand, since
    # Python's encoder stops short of it too
    deep = "[" * 3000 + "]" * 3000
    fault = ('{"index": 0, "time": 1, "type": "info", "process": "nemesis", "f": "start-x", '
             f'"value": {{"deep": {deep}}}}}')  # fmt: skip
    history = run / "history.jsonl"
    history.write_text(fault + "\n" + history.read_text())
    return run


case("nested-too-deep", _nested_too_deep)


@pytest.mark.spark
@PATHS
def test_a_nemesis_value_nested_too_deep_to_parse_is_named_not_a_crash(
    judged: Judged, reading: str
) -> None:
    results = judged[reading]["nested-too-deep"]
    assert results["valid"] in (True, "unknown"), results
    if results["valid"] == "unknown":
        assert results["errors"][0].startswith("history.jsonl line 1"), results


def _catalog_version_twice(dest: Path) -> Path:
    """The catalog's second line again, activating 5 later, as its third line."""
    run = write_run(dest, base())
    lines = (run / "catalog.jsonl").read_text().splitlines()
    again = json.loads(lines[1])
    again["activation_ts"] += 5
    (run / "catalog.jsonl").write_text("\n".join([*lines[:2], json.dumps(again), *lines[2:]]))
    return run


case("catalog-version-twice", _catalog_version_twice)


@pytest.mark.spark
def test_a_catalog_version_on_two_lines_breaks_the_contract(judged: Judged) -> None:
    results = judged["python"]["catalog-version-twice"]
    assert results["valid"] == "unknown", results
    version = json.loads((HISTORIES / "common" / "catalog.jsonl").read_text().splitlines()[1])[
        "catalog_version"
    ]
    assert results["errors"] == [
        f"catalog.jsonl line 3: field 'catalog_version': is {version}, as on "
        "line 2 (one line per catalog version)"
    ], results


def test_the_common_catalog_has_the_index_the_base_reads() -> None:
    last = json.loads((HISTORIES / "common" / "catalog.jsonl").read_text().splitlines()[-1])
    assert {"i1": "AVAILABLE"}.items() <= {i["name"]: i["state"] for i in
                                          last["tables"]["t1"]["indexes"]}.items()  # fmt: skip


def _final_read_at(read_ts: int) -> list[dict[str, Any]]:
    events = base()
    events[5]["value"]["ts"] = read_ts
    return events


events_case("final-read-at-the-commit", lambda: _final_read_at(300000010))
events_case("final-read-after-the-commit", lambda: _final_read_at(300000011))


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "valid"),
    [("final-read-at-the-commit", "unknown"), ("final-read-after-the-commit", True)],
)
def test_a_final_read_not_after_every_acknowledged_commit_leaves_lost_write_undecided(
    judged: Judged, name: str, valid: object
) -> None:
    """The write of key 1 commits at 300000010; a final read at that very ts cannot show it
    (lost-write compares commit_ts < ts), so it proves nothing either way."""
    results = judged["python"][name]
    assert results["valid"] == valid and results["anomalies"] == [], results
    if valid == "unknown":
        assert results["errors"] == [
            "final read of t1 (index 5) was at ts 300000010, not after acknowledged write #1 "
            "committed at ts 300000010: history.md asks for a final read after every "
            "acknowledged write; lost-write of t1 is undecided"
        ]


def _final_read_invoked_before_the_ack() -> list[dict[str, Any]]:
    """The final read of t1 invoked between the txn's invoke and its ok."""
    events = base()
    order = [events[0], events[4], events[1], events[5], *events[2:4], *events[6:]]
    return [{**e, "index": i} for i, e in enumerate(order)]


events_case("clock-free-read-before-the-ack", _final_read_invoked_before_the_ack, {"clock": "none"})
events_case("clock-free-read-after-the-ack", base, {"clock": "none"})


@pytest.mark.spark
@pytest.mark.parametrize("early", [True, False], ids=["invoked-before-the-ack", "after"])
def test_a_clock_free_final_read_invoked_before_a_write_completed_is_undecided(
    judged: Judged, early: bool
) -> None:
    results = judged["python"][f"clock-free-read-{'before' if early else 'after'}-the-ack"]
    if early:
        assert results["valid"] == "unknown", results
        assert results["errors"][0].startswith(
            "final read of t1 (index 3) was invoked before acknowledged write #2 completed"
        ), results["errors"]
    else:
        assert results["valid"] is True and results["errors"] == [], results


def _early_read_of_two_writes() -> list[dict[str, Any]]:
    events = base()
    write2 = {"op": "w", "table": "t1", "key": 2, "row": {"c1": 2, "c2": "a"}}
    later = [_invoke(2, 4, "txn", {"ops": [write2]}), _txn_ok(3, 4, 2, 270000000)]
    both = [{"key": 1, "row": {"c1": 1, "c2": "a"}}, {"key": 2, "row": {"c1": 2, "c2": "a"}}]
    rest = [{**e, "index": e["index"] + 2} for e in events[2:]]
    rest[3]["value"] = {**rest[3]["value"], "ts": 300000005, "rows": both}
    entries = [{"key": 1, "values": {"c1": 1}}, {"key": 2, "values": {"c1": 2}}]
    rest[5]["value"] = {**rest[5]["value"], "entries": entries}
    return [*events[:2], *later, *rest]


events_case("early-read-of-two-writes", _early_read_of_two_writes)


@pytest.mark.spark
def test_the_early_read_error_names_the_write_that_committed_last(judged: Judged) -> None:
    """Write #1 commits at 300000010 and completes first; write #3 completes later but commits
    at 270000010: a final read at 300000005 misses #1, and the error must say so."""
    results = judged["python"]["early-read-of-two-writes"]
    assert results["valid"] == "unknown" and results["anomalies"] == [], results
    assert results["errors"] == [
        "final read of t1 (index 7) was at ts 300000005, not after acknowledged write #1 "
        "committed at ts 300000010: history.md asks for a final read after every "
        "acknowledged write; lost-write of t1 is undecided"
    ]


def _before_the_final_reads(extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The base history with `extra` events before its final reads, renumbered."""
    events = base()
    out = [*events[:4], *extra, *events[4:]]
    for i, e in enumerate(out):
        e["index"], e["time"] = i, 5_000_000_000 + i * 1000
    return out


def _unfinished_read(outcome: str, result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A txn enlisted t1 at schema version 3 and read key 1 after version 4 took effect, as
    its last op; the txn then ended in `outcome` without committing."""
    read = {"op": "r", "table": "t1", "key": 1}
    value = {
        "txn_id": "r1",
        "begin_ts": 200000000,
        "commit_ts": None,
        "ops": [{**read, "op_ts": 270000000, "node": "n1", "schema_version": 4, "result": result}],
        "tables": {"t1": {"base_ts": 200000000, "schema_version": 3}},
        "participants": [],
    }
    error = {"code": "TIMEOUT", "message": "no answer", "retriable": True}
    return [
        _invoke(0, 7, "txn", {"ops": [read]}),
        {**_invoke(0, 7, "txn", value), "type": outcome, "node": "n1", "error": error},
    ]


def _unfinished_before_the_final_reads(
    outcome: str, result: dict[str, Any] | None
) -> list[dict[str, Any]]:
    return _before_the_final_reads(_unfinished_read(outcome, result))


for _outcome in ("info", "fail"):
    events_case(
        f"last-op-row-{_outcome}",
        functools.partial(_unfinished_before_the_final_reads, _outcome, {"c1": 1, "c2": "a"}),
    )
    events_case(
        f"last-op-no-row-{_outcome}",
        functools.partial(_unfinished_before_the_final_reads, _outcome, None),
    )


@pytest.mark.spark
@pytest.mark.parametrize("outcome", ["info", "fail"])
def test_a_last_op_that_returned_a_row_succeeded(judged: Judged, outcome: str) -> None:
    """history.md: `result` is "a read's row as the client saw it", so a read that returned a
    row succeeded, even as the last op of a txn that did not commit (transborder-op); without
    a row the last op may have failed, and is not judged."""
    seen = judged["python"][f"last-op-row-{outcome}"]
    assert classes(seen) == {"transborder-op"}, seen
    assert [a["events"] for a in seen["anomalies"]] == [[5]]
    unseen = judged["python"][f"last-op-no-row-{outcome}"]
    assert unseen["valid"] is True and unseen["errors"] == [], unseen


def _two_participants(versions: tuple[int, int]) -> list[dict[str, Any]]:
    events = base()
    events[1]["value"]["participants"] = [
        {"node": f"n{p + 1}", "table": "t1", "partition": p, "commit_schema_version": v}
        for p, v in enumerate(versions)
    ]
    return events


def _unstamped_participants() -> list[dict[str, Any]]:
    """Participants that disagree, on an ok txn whose commit_ts is null."""
    events = _two_participants((4, 3))
    events[1]["value"]["commit_ts"] = None
    return events


CLOCK_FREE = {"clock": "none"}
events_case("participants-mixed", lambda: _two_participants((4, 3)), CLOCK_FREE)
events_case("participants-unstamped", _unstamped_participants, CLOCK_FREE)
events_case("participants-agreed", lambda: _two_participants((4, 4)), CLOCK_FREE)
events_case("participants-mixed-clocked", lambda: _two_participants((4, 3)))


@pytest.mark.spark
def test_participants_that_disagree_are_found_without_a_clock(judged: Judged) -> None:
    """anomalies.md's mixed-schema-commit: participants "report different commit schema
    versions for the same table, or one differs from tsv(t, commit_ts)". The first half needs
    no timestamp, so a `clock: none` run is judged by it."""
    mixed = judged["python"]["participants-mixed"]
    assert classes(mixed) == {"mixed-schema-commit"}, mixed
    assert [a["events"] for a in mixed["anomalies"]] == [[1]]
    assert mixed["anomalies"][0]["nodes"] == ["n1", "n2"]
    # a target without a clock may leave an ok txn's commit_ts null: still judged
    unstamped = judged["python"]["participants-unstamped"]
    assert classes(unstamped) == {"mixed-schema-commit"}, unstamped
    agreed = judged["python"]["participants-agreed"]
    assert agreed["valid"] is True and agreed["errors"] == [], agreed
    assert "mixed-schema-commit" not in agreed["not_applicable"]
    # with a clock the same disagreement is found too (and the participant off tsv)
    clocked = judged["python"]["participants-mixed-clocked"]
    assert classes(clocked) == {"mixed-schema-commit", "ap-violation"}, clocked


def _lookup(op: dict[str, Any]) -> list[dict[str, Any]]:
    """An ok txn of one micro-op `op` on t1 at schema version 4, which returned key 1."""
    done = {**op, "op_ts": 300000100, "node": "n1", "schema_version": 4, "result": [1]}
    value = {
        "txn_id": "l1",
        "begin_ts": 300000050,
        "commit_ts": 300000200,
        "ops": [done],
        "tables": {"t1": {"base_ts": 300000050, "schema_version": 4}},
        "participants": [],
    }
    return [
        _invoke(0, 8, "txn", {"ops": [op]}),
        {**_invoke(0, 8, "txn", value), "type": "ok", "node": "n1"},
    ]


LOOKUP = {"op": "ix", "table": "t1", "index": "i1", "lookup": 1}


def _stale_lookup() -> list[dict[str, Any]]:
    stale = _lookup(LOOKUP)
    stale[1]["value"]["ops"][0]["schema_version"] = 3  # the primary's version at op_ts: off
    return _before_the_final_reads(stale)


events_case("lookup", lambda: _before_the_final_reads(_lookup(LOOKUP)))
events_case("keyless-read", lambda: _before_the_final_reads(_lookup({"op": "r", "table": "t1"})))
events_case("lookup-off-version", _stale_lookup)


@pytest.mark.spark
@PATHS
def test_a_lookup_through_an_index_names_no_key(judged: Judged, reading: str) -> None:
    """history.md gives an `ix` op an index and a lookup value; the keys are what it finds.
    Every other micro-op names its key (int): a read without one breaks the contract. A
    lookup that is an anomaly is named by its index and value."""
    results = judged[reading]["lookup"]
    assert results["valid"] is True and results["errors"] == [], results
    keyless = judged[reading]["keyless-read"]
    assert keyless["valid"] == "unknown" and "key" in keyless["errors"][0], keyless
    off = judged[reading]["lookup-off-version"]
    assert classes(off) == {"ap-violation"}, off
    assert "txn l1 looked up t1 through index i1 for 1 on n1" in off["anomalies"][0]["explanation"]


def _overwritten_maybe(final_c1: int) -> list[dict[str, Any]]:
    """Key 1 of t1 written by the base's txn (c1 = 1), then by an acknowledged txn (c1 = 2),
    and by a txn of unknown outcome (c1 = 555); the final reads show c1 = `final_c1`."""
    later = _txn_ok(0, 8, 1, 350000000)
    later["value"]["ops"][0]["row"] = {"c1": 2, "c2": "a"}
    maybe = {"op": "w", "table": "t1", "key": 1, "row": {"c1": 555, "c2": "a"}}
    # and key 2, which no acknowledged write touched and no final read shows: never lost
    only_maybe = {**maybe, "key": 2}
    error = {"code": "TIMEOUT", "message": "no answer", "retriable": True}
    events = _before_the_final_reads(
        [
            _invoke(0, 8, "txn", {"ops": [later["value"]["ops"][0]]}),
            later,
            _invoke(0, 9, "txn", {"ops": [maybe, only_maybe]}),
            {**_invoke(0, 9, "txn", {}), "type": "info", "node": "n1", "error": error},
        ]
    )
    read, entries = events[9]["value"], events[11]["value"]
    read["rows"] = [{"key": 1, "row": {"c1": final_c1, "c2": "a"}}]
    entries["entries"] = [{"key": 1, "values": {"c1": final_c1}}]
    return events


for _c1 in (1, 2, 555):
    events_case(f"maybe-overwritten-shows-{_c1}", functools.partial(_overwritten_maybe, _c1))


@pytest.mark.spark
def test_a_write_of_unknown_outcome_hides_no_lost_write_it_does_not_explain(
    judged: Judged,
) -> None:
    """lost-write: "an acknowledged (ok) committed write whose effect is absent from final
    reads and not overwritten by a later committed write". A txn of unknown outcome may have
    overwritten the key, so a final read showing its write is undecided; one showing an
    older write proves the last acknowledged one lost, whatever the unknown txn did."""
    older = judged["python"]["maybe-overwritten-shows-1"]
    assert classes(older) == {"lost-write"}, older
    assert [a["events"] for a in older["anomalies"]] == [[5, 9]]
    for c1 in (2, 555):  # the last acknowledged write, or the one of unknown outcome
        shown = judged["python"][f"maybe-overwritten-shows-{c1}"]
        assert shown["valid"] is True and shown["errors"] == [], (c1, shown)


def _final_probes(n2_columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The base history and then final probes of t1 on n1 and n2, both at schema version 4,
    n1 with the catalog's columns and n2 with `n2_columns`."""
    events = base()
    for node, columns in (("n1", T1_COLUMNS), ("n2", n2_columns)):
        i = len(events)
        answer = {"ts": 400000100, "catalog_version": 5, "table_schema_version": 4,
                  "columns": columns}  # fmt: skip
        events.append(_invoke(i, 20 + i, "probe", {"table": "t1", "ts": None}))
        events.append({**_invoke(i + 1, 20 + i, "probe", answer), "type": "ok", "node": node})
    return events


DECLARED = {"capabilities": ["per-node-copies"]}
WIDER = [T1_COLUMNS[0] | {"type": "INT64"}, T1_COLUMNS[1]]
REORDERED = [dict(reversed(list(c.items()))) for c in reversed(T1_COLUMNS)]
events_case("final-probes-differ", lambda: _final_probes(WIDER), DECLARED)
events_case("final-probes-reordered", lambda: _final_probes(REORDERED), DECLARED)
events_case("final-probes-differ-undeclared", lambda: _final_probes(WIDER))


@pytest.mark.spark
def test_final_probes_that_differ_in_columns_disagree_on_the_schema(judged: Judged) -> None:
    """anomalies.md: "two nodes' final probes disagree on its schema" is replica-divergence
    where the target declares copies per node, even at one schema version; the same columns in
    another order (of the list, or of each column's keys) agree."""
    differ = judged["python"]["final-probes-differ"]
    assert classes(differ) == {"replica-divergence"}, differ
    assert [a["events"] for a in differ["anomalies"]] == [[9, 11]]
    assert "c1 INT64" in differ["anomalies"][0]["explanation"]
    same = judged["python"]["final-probes-reordered"]
    assert same["valid"] is True and same["errors"] == [], same
    undeclared = judged["python"]["final-probes-differ-undeclared"]
    assert undeclared["valid"] is True, undeclared


def _key_listed(run: Path, key_type: str = "INT64") -> Path:
    """`run` with its catalog listing every table's primary key as column `key` (NOT NULL)."""
    key = {"id": 0, "name": "key", "type": key_type, "nullable": False, "default": None}
    lines = [json.loads(line) for line in (run / "catalog.jsonl").read_text().splitlines()]
    for line in lines:
        for table in line["tables"].values():
            table["columns"] = [key, *table["columns"]]
    (run / "catalog.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def _final_row_with(column: str, value: int) -> list[dict[str, Any]]:
    """The base history whose final read of t1 has `column` = `value` in key 1's row."""
    events = base()
    events[5]["value"]["rows"][0]["row"][column] = value
    return events


def _final_key_beyond_int32() -> list[dict[str, Any]]:
    events = base()
    events[5]["value"]["rows"][0]["key"] = 1 << 40
    return events


case("key-listed", lambda dest: _key_listed(write_run(dest, base())))
events_case("key-repeated", lambda: _final_row_with("key", 1))
events_case("key-not-its-own", lambda: _final_row_with("key", 99))
case("key-listed-extra-column", lambda dest: _key_listed(write_run(dest, _final_row_with("c9", 5))))
case(
    "key-beyond-int32",
    lambda dest: _key_listed(write_run(dest, _final_key_beyond_int32()), "INT32"),
)


@pytest.mark.spark
def test_a_catalog_may_list_the_key_column(judged: Judged) -> None:
    """history.md carries a row's key beside its `row`: a catalog may list it as column `key`
    or leave it out, and a row may repeat it, without a schema-conformance; the key's type
    and the row's other columns are still judged."""
    listed = judged["python"]["key-listed"]
    assert listed["valid"] is True and listed["errors"] == [], listed
    repeated = judged["python"]["key-repeated"]
    assert repeated["valid"] is True and repeated["errors"] == [], repeated
    other = judged["python"]["key-not-its-own"]  # a column the table lacks
    assert classes(other) == {"schema-conformance"}, other
    assert "a value in column(s) key that schema version 4" in other["anomalies"][0]["explanation"]
    extra = judged["python"]["key-listed-extra-column"]
    assert classes(extra) == {"schema-conformance"}, extra
    assert extra["anomalies"][0]["explanation"].endswith(
        "a value in column(s) c9 that schema version 4 does not have"
    ), extra
    wide = judged["python"]["key-beyond-int32"]
    assert "schema-conformance" in classes(wide), wide
    assert "in column key does not fit INT32" in wide["anomalies"][0]["explanation"], wide


def _write_repeating_the_key(final_c1: int) -> list[dict[str, Any]]:
    """The base history whose write repeats key 1 in its row; the final reads show c1 =
    `final_c1` (the index agreeing with the row)."""
    events = base()
    for e in events[:2]:
        e["value"]["ops"][0]["row"]["key"] = 1
    events[5]["value"]["rows"][0]["row"]["c1"] = final_c1
    events[7]["value"]["entries"][0]["values"]["c1"] = final_c1
    return events


case("key-repeated-by-the-write", lambda d: _key_listed(write_run(d, _write_repeating_the_key(1))))
case("key-repeated-write-lost", lambda d: _key_listed(write_run(d, _write_repeating_the_key(7))))


@pytest.mark.spark
def test_a_write_that_repeats_the_listed_key_is_shown_by_the_final_rows_key(
    judged: Judged,
) -> None:
    """Where the catalog lists `key`, a write may repeat the key inside its row while the final
    read leaves it beside the row: the final row's key shows it, no lost-write; a column the
    final row does not show is still a lost-write."""
    shown = judged["python"]["key-repeated-by-the-write"]
    assert shown["valid"] is True and shown["errors"] == [], shown
    lost = judged["python"]["key-repeated-write-lost"]
    assert classes(lost) == {"lost-write"}, lost
    assert "c1 = 1 but the final read has 7" in lost["anomalies"][0]["explanation"], lost


def _probe_answering(behind: int) -> list[dict[str, Any]]:
    """The base history whose probe answers `behind` catalog versions before its own."""
    events = base()
    events[3]["value"]["catalog_version"] -= behind
    return events


case("from-zero", lambda dest: _from_zero(write_run(dest, _probe_answering(1))))
case("from-zero-probe-behind", lambda dest: _from_zero(write_run(dest, _probe_answering(2))))


@pytest.mark.spark
@PATHS
def test_catalog_versions_may_start_at_zero(judged: Judged, reading: str) -> None:
    """history.md types catalog_version as an int and sets no first value: a catalog numbered
    from 0 (its acks and probes alike) is valid; a probe one version behind is still found."""
    results = judged[reading]["from-zero"]
    assert results["valid"] is True and results["errors"] == [], results
    behind = judged[reading]["from-zero-probe-behind"]  # the probe answers the version before
    assert classes(behind) == {"ap-violation"}, behind


def _replayed(run: Path, events: list[dict[str, Any]]) -> Path:
    """`run` with `events` written by our recorder (so with its columnar copy) instead."""
    (run / "history.jsonl").unlink()
    replay(events, run, nulls=True)
    assert (run / HISTORY_COLUMNAR).exists()
    return run


def _left_open() -> list[dict[str, Any]]:
    """A null txn_id and node on an ok txn, an index's final read that carries rows too, an
    `ix` op with a null key, and nemesis events whose value is null beside a monitor sample."""
    events = base()
    events[1]["value"]["txn_id"] = None
    events[1]["node"] = None  # required, and typed string or null
    events[7]["value"]["rows"] = []
    lookup = {"op": "ix", "table": "t1", "key": None, "index": "i1", "lookup": 1}
    events[0]["value"]["ops"].append(lookup)
    events[1]["value"]["ops"].append({**lookup, "op_ts": 300000002, "node": "n1",
                                      "schema_version": 4, "result": [1]})  # fmt: skip
    tail = [("start-partition", None), ("sample", {"n1": {"applied": 5}}),
            ("stop-partition", None)]  # fmt: skip
    for i, (f, value) in enumerate(tail, len(events)):
        process = "monitor" if f == "sample" else "nemesis"
        events.append({"index": i, "time": 5_002_000_000 + i, "type": "info",
                       "process": process, "f": f, "value": value})  # fmt: skip
    return events


def _left_open_columnar(dest: Path) -> Path:
    events = _left_open()
    return _replayed(write_run(dest, events), events)


events_case("left-open", _left_open)
case("left-open-columnar", _left_open_columnar)


@pytest.mark.spark
@pytest.mark.parametrize("reading", ["python", "spark", "columnar"])
def test_what_the_contract_leaves_open_passes_every_reading(judged: Judged, reading: str) -> None:
    """What the contract leaves open (_left_open) is valid read by the Python validator, by
    Spark, and from our recorder's columnar copy (read in place in either batch)."""
    if reading == "columnar":
        read = [judged[r]["left-open-columnar"] for r in READINGS]
    else:
        read = [judged[reading]["left-open"]]
    for results in read:
        assert results["valid"] is True and results["errors"] == [], results


def _from_zero(run: Path) -> Path:
    """`run` with its catalog numbered from 0 (each version one less)."""
    lines = [json.loads(line) for line in (run / "catalog.jsonl").read_text().splitlines()]
    text = "".join(
        json.dumps({**x, "catalog_version": x["catalog_version"] - 1}) + "\n" for x in lines
    )
    (run / "catalog.jsonl").write_text(text)
    return run


def _ddl_acked_then_probed(probe_answers: int) -> list[dict[str, Any]]:
    """A DDL acknowledged as catalog version 4, then the base history, whose probe answers
    `probe_answers`."""
    ddl = {"stmt": "CREATE INDEX i1 ON t1 (c1)", "table": "t1", "kind": "create_index"}
    ack = {**ddl, "catalog_version": 4, "activation_ts": 262144000}
    events = [
        _invoke(0, 30, "ddl", ddl),
        {**_invoke(1, 30, "ddl", ack), "type": "ok", "node": "n1"},
    ]
    for e in base():
        events.append({**e, "index": e["index"] + 2, "time": e["time"] + 2})
    events[5]["value"]["catalog_version"] = probe_answers
    return events


case("lag-current", lambda dest: _from_zero(write_run(dest, _ddl_acked_then_probed(4))))
case("lag-one-behind", lambda dest: _from_zero(write_run(dest, _ddl_acked_then_probed(3))))


@pytest.mark.spark
def test_schema_lag_counts_versions_numbered_from_zero(judged: Judged) -> None:
    """With the catalog numbered from 0 and a DDL acknowledged as version 4 (the last), a
    probe invoked after the ack that answers 4 is no version behind; one that answers 3 is one
    behind, and a stale-schema-read."""
    current = judged["python"]["lag-current"]
    assert current["valid"] is True and current["errors"] == [], current
    assert current["stats"]["schema_lag"]["n2"]["max_versions_behind"] == 0, current["stats"]
    behind = judged["python"]["lag-one-behind"]
    assert "stale-schema-read" in classes(behind), behind
    lag = behind["stats"]["schema_lag"]["n2"]
    assert lag["max_versions_behind"] == 1 and lag["probes_behind"] == 1, behind["stats"]


def _null_errors(on_the_fail_too: bool) -> list[dict[str, Any]]:
    """`"error": null` on every invoke and ok, and `"value": null` on a txn that failed before
    it began; on its fail too if `on_the_fail_too`."""
    error = {"code": "UNAVAILABLE", "message": "no leader", "retriable": True}
    failed = {**_invoke(9, 4, "txn", {}), "type": "fail", "node": "n1", "value": None}
    events = [*base(), _invoke(8, 4, "txn", {"ops": []}), {**failed, "error": error}]
    events = [{"error": None, **e} for e in events]
    if on_the_fail_too:
        events[-1]["error"] = None
    return events


events_case("null-errors", lambda: _null_errors(False))
events_case("null-error-on-a-fail", lambda: _null_errors(True))


@pytest.mark.spark
@PATHS
def test_a_null_where_the_contract_asks_for_nothing_is_absent(judged: Judged, reading: str) -> None:
    """`error` is typed on fail and info, and a failed txn carries whatever it reached: a
    recorder that writes `"error": null` on every invoke and ok, and `"value": null` on a txn
    that failed before it began, keeps a valid history valid; on a fail the error is still
    missing."""
    results = judged[reading]["null-errors"]
    assert results["valid"] is True and results["errors"] == [], results
    missing = judged[reading]["null-error-on-a-fail"]
    assert missing["valid"] == "unknown", missing
    assert any("error" in e and "line 10" in e for e in missing["errors"]), missing


def _at_the_edges() -> list[dict[str, Any]]:
    """The base history with its first txn invoked at the smallest time and completed at the
    largest (a latency beyond 64 bits), and two DDLs acknowledged as activating at the largest
    and the smallest ts, where the catalog has versions 5 and 4 activate at 262144000 and
    196608000."""
    events = base()
    events[0]["time"], events[1]["time"] = -(1 << 63), INT64_MAX
    ddl = {"stmt": "CREATE INDEX i1 ON t1 (c1)", "table": "t1", "kind": "create_index"}
    ack = {**ddl, "catalog_version": 5, "activation_ts": INT64_MAX}
    drop = {"stmt": "ALTER TABLE t1 DROP COLUMN c3", "table": "t1", "kind": "drop_column"}
    early = {**drop, "catalog_version": 4, "activation_ts": -(1 << 63)}  # the smallest
    return [
        *events,
        _invoke(8, 30, "ddl", ddl),
        {**_invoke(9, 30, "ddl", ack), "type": "ok", "node": "n1"},
        _invoke(10, 31, "ddl", drop),
        {**_invoke(11, 31, "ddl", early), "type": "ok", "node": "n1"},
    ]


events_case("edges-of-64-bits", _at_the_edges)


@pytest.mark.spark
@PATHS
def test_times_and_timestamps_at_the_edges_of_64_bits_are_judged(
    judged: Judged, reading: str
) -> None:
    """Any int64 is legal in `time` and a `*_ts`: a latency or a statistics window that would
    not fit in 64 bits neither crashes the analysis nor hides the lost-ddl the ack shows. The
    DROP of c3 invoked after the ack of version 5 (which has no c3) could only have run
    against version 5: its success is also a ddl-outcome (anomalies.md's window)."""
    results = judged[reading]["edges-of-64-bits"]
    assert classes(results) == {"lost-ddl", "ddl-outcome"}, results
    assert results["errors"] == [], results
    (outcome,) = [a for a in results["anomalies"] if a["class"] == "ddl-outcome"]
    assert outcome["events"] == [10, 11], outcome
    assert results["stats"]["ddl_windows"], results["stats"]


def _shifted(by: int) -> list[dict[str, Any]]:
    """The base history with every `*_ts` of its events moved by `by`."""

    def move(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: v + by if (k.endswith("_ts") or k == "ts") and isinstance(v, int) else move(v)
                for k, v in node.items()
            }
        return [move(x) for x in node] if isinstance(node, list) else node

    return [move(e) for e in base()]


events_case("negative-ts-clock-free", lambda: _shifted(-(10**12)), {"clock": "none"})
events_case("negative-ts-hlc", lambda: _shifted(-(10**12)))


@pytest.mark.spark
@PATHS
def test_opaque_timestamps_may_be_negative(judged: Judged, reading: str) -> None:
    """history.md: on a `clock: none` run the `*_ts` fields are opaque integers, of any sign:
    valid on both validation paths alike; on an HLC run the same history is judged too (its
    timestamps come before every catalog version), not refused by one path only."""
    clock_free = judged[reading]["negative-ts-clock-free"]
    assert clock_free["valid"] is True and clock_free["errors"] == [], clock_free
    hlc = judged[reading]["negative-ts-hlc"]
    # the txn's ops, participant and probe all fall before the first catalog version
    before = {"ap-violation", "mixed-schema-commit", "transborder-op"}
    assert classes(hlc) == before and hlc["errors"] == [], hlc


def _with_ddl(stmt: str, kind: str, outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """A DDL on t1 (its invoke and `outcome`), then the base history."""
    ddl = {"stmt": stmt, "table": "t1", "kind": kind}
    done = {**_invoke(1, 30, "ddl", {**ddl, **outcome.pop("value", {})}), "node": "n1", **outcome}
    events = [_invoke(0, 30, "ddl", ddl), done]
    for e in base():
        events.append({**e, "index": e["index"] + 2, "time": e["time"] + 2})
    return events


def _acked_as_version_4(stmt: str) -> list[dict[str, Any]]:
    """`stmt` acknowledged as catalog version 4, whose DDL is 'ALTER TABLE t1 DROP COLUMN c3'."""
    ack = {"catalog_version": 4, "activation_ts": 196608000}
    return _with_ddl(stmt, "drop_column", {"type": "ok", "value": ack})


def _schema_error(code: str) -> dict[str, Any]:
    return {"type": "fail", "error": {"code": code, "message": "refused", "retriable": False}}


# lost-ddl compares statements as text with only leading and trailing whitespace ignored
events_case("ddl-same-text-padded", lambda: _acked_as_version_4(" ALTER TABLE t1 DROP COLUMN c3\n"))
events_case("ddl-other-case", lambda: _acked_as_version_4("alter table t1 drop column c3"))
events_case("ddl-inner-space", lambda: _acked_as_version_4("ALTER TABLE t1  DROP COLUMN c3"))


@pytest.mark.spark
def test_lost_ddl_compares_statements_as_text_ignoring_only_the_outer_whitespace(
    judged: Judged,
) -> None:
    padded = judged["python"]["ddl-same-text-padded"]
    assert padded["valid"] is True and padded["errors"] == [], padded
    for name in ("ddl-other-case", "ddl-inner-space"):
        results = judged["python"][name]
        assert classes(results) == {"lost-ddl"}, (name, results)
        assert results["anomalies"][0]["events"] == [1], results


# ddl-outcome: t1 (c1, c2) exists at version 5, the window of a DDL no ack preceded
events_case(
    "ddl-table-not-found-while-it-exists",
    lambda: _with_ddl(
        "ALTER TABLE t1 DROP COLUMN c2", "drop_column", _schema_error("TABLE_NOT_FOUND")
    ),
)
events_case(
    "ddl-invalid-where-the-column-is-absent",
    lambda: _with_ddl(
        "ALTER TABLE t1 ADD COLUMN c7 INT32", "add_column", _schema_error("DDL_INVALID")
    ),
)
events_case(
    "ddl-invalid-where-the-column-exists",
    lambda: _with_ddl(
        "ALTER TABLE t1 ADD COLUMN c2 INT32", "add_column", _schema_error("DDL_INVALID")
    ),
)
events_case(
    "ddl-timeout",
    lambda: _with_ddl("ALTER TABLE t1 DROP COLUMN c2", "drop_column", _schema_error("TIMEOUT")),
)
events_case(
    "ddl-info",
    lambda: _with_ddl(
        "ALTER TABLE t1 DROP COLUMN c2",
        "drop_column",
        {**_schema_error("TABLE_NOT_FOUND"), "type": "info"},
    ),
)


@pytest.mark.spark
@PATHS
def test_a_ddls_own_outcome_is_judged_against_the_states_it_could_have_run_against(
    judged: Judged, reading: str
) -> None:
    """Both ways: an error every state rules out is ddl-outcome (and nothing else, on both
    readings); an error a state explains, one that names no schema cause, and an indeterminate
    DDL are not."""
    for name in ("ddl-table-not-found-while-it-exists", "ddl-invalid-where-the-column-is-absent"):
        results = judged[reading][name]
        assert classes(results) == {"ddl-outcome"} and results["valid"] is False, (name, results)
        (witness,) = results["anomalies"]
        assert witness["events"] == [0, 1] and witness["nodes"] == ["n1"], witness
        assert "version 5" in witness["explanation"], witness
    for name in ("ddl-invalid-where-the-column-exists", "ddl-timeout", "ddl-info"):
        results = judged[reading][name]
        assert results["valid"] is True and results["errors"] == [], (name, results)


def _with_evidence(
    effective: Any, events: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The base history (or `events`) with a partition, and evidence of it saying `effective`."""
    out = [dict(e) for e in (events or base())]
    n = len(out)
    start = {"index": n, "time": 5_100_000_000, "type": "info", "process": "nemesis",
             "f": "start-partition", "value": {"fault": 1, "kind": "partition"}}  # fmt: skip
    effect = {**start, "index": n + 1, "time": 5_100_000_001, "f": "effect",
              "value": {"fault": "start-partition", "start_index": n, "node": "n3",
                        "effective": effective,
                        "evidence": {"request": "n1->n3", "ok": True}}}  # fmt: skip
    heal = {**start, "index": n + 2, "time": 5_100_000_002, "f": "heal-partition"}
    return [*out, start, effect, heal]


events_case("evidence-effective", lambda: _with_evidence(True))
events_case("evidence-ineffective", lambda: _with_evidence(False))
events_case(
    "evidence-ineffective-lost-ddl",
    lambda: _with_evidence(False, _acked_as_version_4("alter table t1 drop column c3")),
)


@pytest.mark.spark
def test_a_fault_that_did_not_take_effect_makes_the_run_unknown(judged: Judged) -> None:
    """history.md: evidence saying `"effective": false` means the run did not test what it
    claims (unknown, the fault named); `true` changes nothing; an anomaly the events prove is
    still reported, and the verdict is then false."""
    ok = judged["python"]["evidence-effective"]
    assert ok["valid"] is True and ok["errors"] == [], ok
    bad = judged["python"]["evidence-ineffective"]
    assert bad["valid"] == "unknown" and bad["anomalies"] == [], bad
    (error,) = bad["errors"]
    assert "start-partition started at index 8 did not take effect on n3" in error, error
    proven = judged["python"]["evidence-ineffective-lost-ddl"]
    assert proven["valid"] is False and classes(proven) == {"lost-ddl"}, proven
    assert any("did not take effect" in e for e in proven["errors"]), proven
