"""Reported anomalies on demand: each scenario of `scenarios/reported/` run in
simulation on its own seed shows every class its `expect` lists (judged by the real checker),
and, where pinned below, nothing its fault does not imply and nothing at all with its toggle off.
`unavailability` (a liveness finding, not a class) is judged as the detection matrix judges it:
a restarted node asked and serving nothing for UNAVAILABLE_AFTER_RESTART_S."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from benchmarks.detection import recovery_after_restart, unavailability_after_restart
from checker.analyze import analyze_run
from checker.anomaly_classes import UNAVAILABILITY
from harness.run import run_test
from harness.sweep import options_from_args
from tests.spark_session import spark  # noqa: F401  (session fixture)

REPORTED = sorted((Path(__file__).resolve().parents[1] / "scenarios" / "reported").glob("*.toml"))
# every class the scenario's fault can cause: a class outside it is a finding of its own
IMPLIED: dict[str, set[str]] = {
    # a behind node answers the version before the acknowledged one at its own now(): a probe
    # or a txn after the ack sees an older schema, consistent with its own timestamp
    "IGNITE-21084": {"stale-schema-read"},
    # the restarted learners serve nothing: no op there, so nothing there to judge wrong
    "IGNITE-25885": {UNAVAILABILITY},
    # rows stored under the commit-time version without the columns added since: read in that
    # version's shape, nothing else is wrong with them
    "YB-4415": {"schema-conformance"},
    # the raced writer maintains no entry: an insert has none (missing), an update or delete
    # leaves the entry the backfill gave the row it saw (orphan)
    "CRDB-18533": {"index-missing", "index-orphan"},
}
# scenarios whose run with the toggle off must be valid (the other direction of the proof);
# for a liveness finding also: every restarted node served again within the threshold
VALID_WITHOUT_TOGGLE = ["IGNITE-21084", "IGNITE-25885", "YB-4415", "CRDB-18533"]


def _classes(scenario: Path, tmp_path: Path, spark: SparkSession) -> tuple[dict, set[str]]:  # noqa: F811
    args = argparse.Namespace(
        scenario=str(scenario), seed=None, time_limit=None, store=str(tmp_path), no_analyze=True
    )
    opts = options_from_args(args)
    out = run_test(opts)
    assert out.exit_code == 0, out
    results = analyze_run(out.run_dir, spark=spark)
    found = {a["class"] for a in results["anomalies"]}
    restarts = recovery_after_restart(out.run_dir, results)
    if restarts:
        toggles_on = bool(opts.target_config.get("toggles"))
        if unavailability_after_restart(out.run_dir, restarts, asked=toggles_on) is not None:
            found.add(UNAVAILABILITY)
    return results, found


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", REPORTED, ids=[p.stem for p in REPORTED])
def test_a_reported_anomaly_reproduces_in_simulation(
    scenario: Path,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    expect = set(tomllib.loads(scenario.read_text())["expect"])
    results, found = _classes(scenario, tmp_path, spark)
    assert results["valid"] != "unknown", results["errors"]
    if expect != {UNAVAILABILITY}:  # a liveness finding alone leaves the verdict valid
        assert results["valid"] is False, results["errors"]
    assert expect <= found, f"{scenario.stem}: expected {sorted(expect)}, found {sorted(found)}"
    implied = IMPLIED.get(scenario.stem)
    if implied is not None:
        assert found <= implied, f"{scenario.stem}: {sorted(found - implied)} not implied"


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stem", VALID_WITHOUT_TOGGLE)
def test_the_same_scenario_without_its_toggle_is_valid(
    stem: str,
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    text = (REPORTED[0].parent / f"{stem}.toml").read_text()
    off, toggles = re.subn(r"(?m)^toggles = \[.*\]$", "toggles = []", text)
    assert toggles == 1, f"{stem}: expected one toggles line in [target]"
    off = re.sub(r"(?m)^expect = \[.*\]$", "expect = []", off)
    scenario = tmp_path / f"{stem}-toggle-off.toml"
    scenario.write_text(off)
    results, found = _classes(scenario, tmp_path / "store", spark)
    assert results["valid"] is True, (sorted(found), results["errors"])
    assert not found, sorted(found)
