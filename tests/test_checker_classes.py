"""Each anomaly class on a small hand-written run directory (tests/histories/<class>/): the
firing events must be reported with exactly their witnesses and the near-miss must not fire."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from checker.analyze import CLASSES, AnalyzeOptions, analyze_run, exit_code
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


@pytest.mark.spark
@pytest.mark.parametrize("case", CLASSES)
def test_class_fires_on_its_history_and_not_on_the_near_miss(
    case: str,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    expect = json.loads((HISTORIES / case / "expect.json").read_text())["fires"]
    run = make_run(case, tmp_path / case)
    results = analyze_run(run, spark=spark, options=FAST)
    assert results["errors"] == []
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
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    results = analyze_run(make_run("ap-violation", tmp_path / "ap"), spark=spark, options=FAST)
    op = next(a for a in results["anomalies"] if a["events"] == [7])
    assert op["explanation"] == (
        "txn a2 read t1 key 1 on n3 at 2001:62464 with schema version 1, "
        "but version 2 was active from 2000:0"
    )
    assert op["nodes"] == ["n3"]
