"""Property: histories of a model of a correct cluster give no anomaly; the same histories with
one injected fault give exactly that class (plus what its definition implies)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_run, analyze_runs
from checker.contract import validator
from synthetic import FAULTS, expected_classes, generate_run
from tests.spark_session import spark  # noqa: F401  (session fixture)

FAST = AnalyzeOptions(with_stats=False)


def test_synthetic_histories_follow_the_contract(tmp_path: Path) -> None:
    generate_run(tmp_path, seed=3, events=400, fault=None)
    events = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [e["index"] for e in events] == list(range(len(events)))
    for e in events:
        assert not list(validator("event").iter_errors(e)), e
    for line in (tmp_path / "catalog.jsonl").read_text().splitlines():
        assert not list(validator("catalog_line").iter_errors(json.loads(line)))
    assert not list(validator("run").iter_errors(json.loads((tmp_path / "run.json").read_text())))
    kinds = {(e["f"], e["type"]) for e in events}
    assert {("txn", "ok"), ("txn", "fail"), ("probe", "ok"), ("ddl", "ok")} <= kinds


@pytest.mark.spark
@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 10_000), fault=st.sampled_from((None, *FAULTS)))
def test_correct_model_is_valid_and_each_fault_gives_its_class(
    spark: SparkSession,  # noqa: F811
    seed: int,
    fault: str | None,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        generate_run(Path(d), seed=seed, events=300, fault=fault)
        results = analyze_run(Path(d), spark=spark, options=FAST)
    found = {a["class"] for a in results["anomalies"]}
    assert found == expected_classes(fault), results["anomalies"]
    assert results["valid"] is (fault is None)


@pytest.fixture(scope="module")
def each_fault(
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,  # noqa: F811
) -> dict[str, dict[str, Any]]:
    """One synthetic run per fault class, judged together in one `analyze` (as a night of runs
    is; each run gets what it gets alone, tests/test_checker_batch.py): each fault's results."""
    root = tmp_path_factory.mktemp("each-fault")
    dirs = [root / fault for fault in FAULTS]
    for d, fault in zip(dirs, FAULTS, strict=True):
        generate_run(d, seed=11, events=250, fault=fault)
    return dict(zip(FAULTS, analyze_runs(dirs, spark=spark, options=FAST), strict=True))


@pytest.mark.spark
@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_class_once(fault: str, each_fault: dict[str, dict[str, Any]]) -> None:
    results = each_fault[fault]
    assert {a["class"] for a in results["anomalies"]} == expected_classes(fault)
    assert results["valid"] is False


@pytest.mark.spark
def test_clock_none_marks_timestamp_checks_not_applicable(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    generate_run(tmp_path, seed=5, events=250, fault="transborder-op", clock="none")
    results = analyze_run(tmp_path, spark=spark, options=FAST)
    assert set(results["not_applicable"]) >= {"ap-violation", "transborder-op"}
    assert "mixed-schema-commit" not in results["not_applicable"]  # its clock-free half
    assert results["valid"] is True
    assert "stale-schema-read" not in results["not_applicable"]
