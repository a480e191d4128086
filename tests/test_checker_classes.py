"""Each anomaly class on a small hand-written run directory (tests/histories/<class>/): the
firing events must be reported with exactly their witnesses and the near-miss must not fire."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from checker.analyze import CLASSES, AnalyzeOptions, analyze_run, analyze_runs, exit_code
from tests.spark_session import spark  # noqa: F401  (session fixture)

HISTORIES = Path(__file__).parent / "histories"
FAST = AnalyzeOptions(with_stats=False)  # statistics have their own test


def make_run(case: str, dest: Path) -> Path:
    """Copy the common files and the case's own files into a fresh run directory."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in (HISTORIES / "common").iterdir():
        shutil.copy(f, dest / f.name)
    for f in (HISTORIES / case).iterdir():
        if f.name != "expect.json":
            shutil.copy(f, dest / f.name)
    return dest


def witnesses(results: dict, cls: str) -> list[list[int]]:
    return sorted(sorted(a["events"]) for a in results["anomalies"] if a["class"] == cls)


@pytest.fixture(scope="module")
def each_class(
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,  # noqa: F811
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Every class history judged in one `analyze`, as a night of runs is (each run gets what
    it gets judged alone: tests/test_checker_batch.py): each case's run directory and results."""
    root = tmp_path_factory.mktemp("classes")
    runs = [make_run(case, root / case) for case in CLASSES]
    judged = analyze_runs(runs, spark=spark, options=FAST)
    return {case: (run, r) for case, run, r in zip(CLASSES, runs, judged, strict=True)}


@pytest.mark.spark
@pytest.mark.parametrize("case", CLASSES)
def test_class_fires_on_its_history_and_not_on_the_near_miss(
    case: str,
    each_class: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    expect = json.loads((HISTORIES / case / "expect.json").read_text())["fires"]
    run, results = each_class[case]
    # the class histories are fragments without a full final phase: the anomaly still proves
    # false (history.md), and the only errors are the final reads they lack
    assert all(e.startswith("no final read") for e in results["errors"]), results["errors"]
    assert results["valid"] is False and exit_code(results) == 1
    found = {a["class"] for a in results["anomalies"]}
    assert found == set(expect), results["anomalies"]
    for cls, events in expect.items():
        assert witnesses(results, cls) == sorted(sorted(e) for e in events), results["anomalies"]
    for a in results["anomalies"]:
        assert len(a["explanation"]) > 40
        assert a["nodes"], a
    written = json.loads((run / "results.json").read_text())
    assert written["valid"] is False and written["anomalies"] == results["anomalies"]


@pytest.mark.spark
def test_explanation_names_txn_table_node_versions_and_timestamps(
    each_class: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, results = each_class["ap-violation"]
    op = next(a for a in results["anomalies"] if a["events"] == [7])
    assert op["explanation"] == (
        "txn a2 read t1 key 1 on n3 at 2001:62464 with schema version 1, "
        "but version 2 was active from 2000:0"
    )
    assert op["nodes"] == ["n3"]


def _column_at(sv: int, nullable: bool, default: object) -> dict:
    cols = [{"id": 1, "name": "k", "type": "INT32", "nullable": False, "default": None}]
    cols.append({"id": 2, "name": "c", "type": "INT32", "nullable": nullable, "default": default})
    return {"t": {"id": 1, "schema_version": sv, "columns": cols, "indexes": []}}


@pytest.mark.spark
def test_a_written_null_fills_as_the_system_upgrades_it(spark: SparkSession) -> None:  # noqa: F811
    """The checker's fill map agrees with `schemasync.rows.upgrade_row` for a NULL written at
    every version and read at every later one, across SET NOT NULL, default changes, a NOT NULL
    column without default and DROP NOT NULL."""
    from checker.catalog_index import CatalogIndex
    from schemasync.catalog import Table
    from schemasync.rows import upgrade_row

    # (nullable, default) of column c at schema versions 1..7
    shapes = [(True, None), (False, 7), (False, 8), (True, 8), (False, None), (False, 9), (True, 9)]
    lines: list[dict[str, Any]] = [
        {
            "catalog_version": sv,
            "activation_ts": sv * 1000,
            "safe_ts": 0,
            "delay_ms": 0,
            "ddl": "",
            "tables": _column_at(sv, nullable, default),
        }
        for sv, (nullable, default) in enumerate(shapes, start=1)
    ]
    cat = CatalogIndex(spark, lines, rename_compatible=False)
    fills = {r["schema_version"]: r["fills"] for r in cat.schemas.collect()}
    tables = [Table.from_json(line["tables"]["t"], "t") for line in lines]
    for w in range(1, len(shapes) + 1):
        for f in range(w, len(shapes) + 1):
            system = upgrade_row({"k": 1, "c": None}, tables[w - 1 : f])["c"]
            fill = fills[w].get(2)
            checker = fill["text"] if fill is not None and fill["at"] <= f else None
            assert checker == (None if system is None else str(system)), (w, f)


@pytest.mark.spark
def test_a_column_of_unknown_type_is_named_and_its_values_are_not_judged(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """c1 of the schema-conformance history as a type the checker does not know: the catalog
    index names it once in `errors`, and its values (a string in key 5) are no anomaly, while
    the other columns are still judged."""
    from checker.catalog_index import CatalogIndex
    from checker.contract import read_catalog_lines

    run = make_run("schema-conformance", tmp_path / "geo")
    catalog = run / "catalog.jsonl"
    catalog.write_text(
        catalog.read_text().replace('"name":"c1","type":"INT32"', '"name":"c1","type":"GEOMETRY"')
    )
    cat = CatalogIndex(spark, read_catalog_lines(run), rename_compatible=True)
    assert cat.errors == [
        "catalog.jsonl line 2: table t1 column c1 has type 'GEOMETRY', which the checker does "
        "not know; its values are not judged"
    ]
    c1 = cat.columns.where("col_name = 'c1'").select("base").distinct().collect()
    assert [r["base"] for r in c1] == [None]
    results = analyze_run(run, spark=spark, options=FAST)
    assert witnesses(results, "schema-conformance") == [[1], [3], [3]], results["anomalies"]
    key5 = next(a for a in results["anomalies"] if "key 5" in a["explanation"])
    assert "toolong" in key5["explanation"] and "column c1" not in key5["explanation"], key5


@pytest.mark.spark
def test_a_batch_judged_in_one_plan_gives_each_run_its_own_results(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """The runs of one `analyze` are judged together, in one plan partitioned by run: every
    run's results (and results.json) are what it gets judged alone, in the order given, with
    classes found in one run never leaking into another."""
    cases = ["ap-violation", "lost-write", "index-orphan"]
    alone = [
        analyze_run(make_run(c, tmp_path / "alone" / c), spark=spark, options=FAST) for c in cases
    ]
    runs = [make_run(c, tmp_path / "batch" / c) for c in cases]
    batch = analyze_runs(runs, spark=spark, options=FAST)

    def judged(r: dict) -> tuple:
        return r["valid"], r["anomalies"], r["errors"], r["not_applicable"]

    assert [judged(r) for r in batch] == [judged(r) for r in alone]
    for case, run, r in zip(cases, runs, batch, strict=True):
        assert {a["class"] for a in r["anomalies"]} == set(
            json.loads((HISTORIES / case / "expect.json").read_text())["fires"]
        )
        assert json.loads((run / "results.json").read_text())["anomalies"] == r["anomalies"]


@pytest.mark.spark
def test_the_checks_split_over_unions_give_what_one_union_gives(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checks split over several unions collected at once, beside the statistics
    (analyze._judge), give exactly the results of one union: the same anomalies in the same
    order, the same counts per class, the same statistics. The case fires two classes that
    fall in different unions when there are two."""
    import checker.analyze as analyze

    run = make_run("mixed-schema-commit", tmp_path / "run")
    seen = []
    for unions in (1, 2, 3):
        monkeypatch.setattr(analyze, "CHECK_UNIONS", unions)
        results = analyze_run(run, spark=spark)
        results["stats"].pop("analysis_s")
        seen.append(results)
    assert {a["class"] for a in seen[0]["anomalies"]} == {"ap-violation", "mixed-schema-commit"}
    assert seen[0]["stats"]["latency"], "the statistics were not computed"
    assert seen[1] == seen[0] and seen[2] == seen[0]


@pytest.mark.spark
def test_only_the_checks_named_run_so_a_floor_measures_none(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    """`AnalyzeOptions.checks` (benchmarks/checker_scale.py's floor) runs the checks it names
    and no other: the case fires two classes, and naming one finds that one only, naming none
    finds none (what the floor is measured without). Such a result is no verdict, so it is
    never written, and a name that is no check is refused (a floor that measures nothing)."""
    run = make_run("mixed-schema-commit", tmp_path / "run")
    found = []
    for checks in (None, frozenset({"ap-violation"}), frozenset()):
        options = AnalyzeOptions(with_stats=False, write_results=False, checks=checks)
        found.append(
            {a["class"] for a in analyze_run(run, spark=spark, options=options)["anomalies"]}
        )
    assert found == [{"ap-violation", "mixed-schema-commit"}, {"ap-violation"}, set()]
    assert not (run / "results.json").exists()
    with pytest.raises(ValueError, match="no verdict to write"):
        AnalyzeOptions(checks=frozenset())  # writes results.json by default
    with pytest.raises(ValueError, match="unknown \\['lost-writes'\\]"):
        AnalyzeOptions(checks=frozenset({"lost-writes"}), write_results=False)


@pytest.mark.spark
@pytest.mark.parametrize("small_input_events", [30_000, 0], ids=["small-input", "full-plans"])
def test_frames_kept_as_rows_or_serialized_give_the_same_results(
    small_input_events: int,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """How the kept frames are stored (as rows in a heap with room, else serialized) changes
    only the time: the same anomalies, counts, statistics and errors either way. The levels
    each analysis used are recorded, so the test fails if both took the same path. Both in the
    small-input mode these histories get and in the plans a large history gets (codegen,
    adaptive execution, several partitions). Three histories, judged as one batch each way."""
    from pyspark import StorageLevel

    import checker.analyze as analyze
    import checker.frames as frames

    levels: list[StorageLevel] = []
    real_kept = frames.kept

    def recording(df: DataFrame, level: StorageLevel) -> DataFrame:
        levels.append(level)
        return real_kept(df, level)

    monkeypatch.setattr(frames, "kept", recording)
    cases = ["mixed-schema-commit", "lost-write", "index-orphan"]
    runs = [make_run(case, tmp_path / case) for case in cases]
    seen = []
    for heap in (analyze.local_heap_bytes(spark), None):  # this session's heap, then unknown
        monkeypatch.setattr(analyze, "local_heap_bytes", lambda _s, h=heap: h)
        levels.clear()
        options = AnalyzeOptions(small_input_events=small_input_events)
        judged = analyze_runs(runs, spark=spark, options=options)
        for results in judged:
            results["stats"].pop("analysis_s")
        seen.append((judged, {str(level) for level in levels}))
    (as_rows, rows_levels), (serialized, serialized_levels) = seen
    assert rows_levels == {str(StorageLevel.MEMORY_AND_DISK_DESER)}
    assert serialized_levels == {str(StorageLevel.MEMORY_AND_DISK)}
    for case, rows, ser in zip(cases, as_rows, serialized, strict=True):
        assert rows["valid"] is False and rows["stats"]["latency"], case
        assert ser == rows, case


def test_frames_are_kept_as_rows_only_in_a_known_heap_with_room() -> None:
    """4 KiB of heap per event, in a heap known to hold the executors' storage."""
    from checker.frames import HEAP_PER_EVENT_AS_ROWS, kept_as_rows

    heap = 6 * 2**30
    fits = heap // HEAP_PER_EVENT_AS_ROWS
    assert kept_as_rows(fits, heap) and kept_as_rows(0, heap)
    assert not kept_as_rows(fits + 1, heap)
    assert not kept_as_rows(10, None)  # Connect, or executors in other JVMs
    assert kept_as_rows(1_000_000, heap)
    assert not kept_as_rows(3_000_000, heap) and not kept_as_rows(10_000_000, heap)


def test_only_local_masters_keep_the_executors_in_the_drivers_heap() -> None:
    """local-cluster's executors have JVMs of their own: the driver's heap says nothing of
    theirs."""
    from checker.session import executors_in_driver

    assert all(executors_in_driver(m) for m in ("local", "local[2]", "local[*]", "local[2,3]"))
    others = ("local-cluster[2,1,1024]", "spark://h:7077", "yarn", "localhost", "")
    assert not any(executors_in_driver(m) for m in others)
