"""Reported Ignite anomalies on demand: each scenario of `scenarios/reported/` run in
simulation on its own seed shows every class its `expect` lists (judged by the real checker)."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from checker.analyze import analyze_run
from sim.run import add_run_arguments, options_from_args, run_sim
from tests.spark_session import spark  # noqa: F401  (session fixture)

REPORTED = sorted((Path(__file__).resolve().parents[1] / "scenarios" / "reported").glob("*.toml"))


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", REPORTED, ids=[p.stem for p in REPORTED])
def test_a_reported_anomaly_reproduces_in_simulation(
    scenario: Path,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    expect = set(tomllib.loads(scenario.read_text())["expect"])
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    opts = options_from_args(
        parser.parse_args(["--scenario", str(scenario), "--store", str(tmp_path)])
    )
    out = run_sim(opts, analyze=False)
    assert out.exit_code == 0, out
    results = analyze_run(out.run_dir, spark=spark)
    found = {a["class"] for a in results["anomalies"]}
    assert results["valid"] is False, results["errors"]
    assert expect <= found, f"{scenario.stem}: expected {sorted(expect)}, found {sorted(found)}"
