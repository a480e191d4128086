"""Statistics of a correct synthetic run, and many runs read as one dataset for trends."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from checker.analyze import analyze_run
from checker.ingest import load_runs
from synthetic import generate_run
from tests.spark_session import spark  # noqa: F401  (session fixture)


@pytest.mark.spark
def test_statistics_and_trend_dataset(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    n_a = generate_run(a, seed=1, events=300)
    n_b = generate_run(b, seed=2, events=260, fault="lost-ddl")
    results = analyze_run(a, spark=spark)
    assert results["valid"] is True and results["errors"] == []
    stats = results["stats"]
    assert stats["events"] == n_a
    counts = stats["counts"]
    assert counts["txn"]["ok"] > 0 and counts["txn"]["fail"] > 0 and counts["ddl"]["ok"] > 0
    assert stats["errors_by_code"]["txn"]["INCOMPATIBLE_SCHEMA"] > 0
    assert 0 < stats["txn_aborted_by_schema_change"]["share"] < 1
    ddl = stats["latency"]["ddl"]
    # The model acknowledges a DDL once HLC passed activation + CSmax: just above DD + CSmax.
    assert 1.0 <= ddl["p50_ratio_to_floor"] <= 1.1 and ddl["floor_ms"] == 1000
    assert stats["latency"]["txn"]["p50_ms"] > 0
    assert stats["ddl_windows"] and all(w["completions"] > 0 for w in stats["ddl_windows"][3:])
    assert set(stats["schema_lag"]) <= {"n1", "n2", "n3"}
    partition = [w for w in stats["nemesis_windows"] if w["action"] == "partition"]
    assert len(partition) == 1 and partition[0]["ok"] > 0 and partition[0]["to_s"] > 0
    assert stats["anomalies_by_class"]["lost-write"] == 0
    assert stats["errors_per_second"][0]["completions"] > 0

    trend = load_runs(spark, tmp_path / "runs")
    per_run = {r["run"]: r["count"] for r in trend.groupBy("run").count().collect()}
    assert per_run == {"a": n_a, "b": n_b}
    assert trend.where((F.col("f") == "ddl") & (F.col("type") == "ok")).count() > 2
