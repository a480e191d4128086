"""The detection matrix, once: each bug toggle's scenario produces its anomaly class, and the
baseline (every nemesis, every toggle off) is valid.

Real docker clusters with short time limits; the cluster parts run three at a time in worker
processes, and every run is analyzed in the test session's one Spark session. The matrix and
its judgment are `benchmarks/detection.py` (the benchmark runs it over seeds, with controls).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import docker_available, require
from tests.spark_session import spark  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.docker, pytest.mark.spark]

REPO = Path(__file__).resolve().parent.parent
PARALLEL = 3
# seconds of workload per case: enough for the scenario's first fault to start and end, and
# for its anomaly to be witnessed well inside the median measured by the benchmark
TIME_LIMIT_S: dict[str, float] = {
    "no-safe-time-recovery": 20.0,
    "mutable-delay": 14.0,
    "local-schema-at-commit": 14.0,
    "no-safe-time-wait": 12.0,
    "synctime-reorder": 14.0,
    "baseline": 20.0,
}
DEFAULT_TIME_LIMIT_S = 12.0


def _detection() -> Any:
    spec = importlib.util.spec_from_file_location("detection", REPO / "benchmarks/detection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("detection", module)
    spec.loader.exec_module(module)
    return module


detection = _detection()
CASES = [*detection.MATRIX, "baseline"]


@pytest.fixture(scope="module")
def matrix(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:  # noqa: F811
    """Every case run and analyzed once for the whole module: name -> Outcome."""
    require(docker_available(), "no Docker engine answers")
    require(shutil.which("java") is not None, "Spark needs a Java runtime")
    store = tmp_path_factory.mktemp("detection-store")
    todo = [
        replace(c, time_limit_s=TIME_LIMIT_S.get(c.name, DEFAULT_TIME_LIMIT_S))
        for c in detection.cases(list(detection.MATRIX), [1], controls=False, baseline=True)
    ]
    todo.sort(key=lambda c: -c.time_limit_s)  # the long ones first: they bound the wall time
    outcomes = detection.run_matrix(todo, store, None, PARALLEL, spark=spark)
    yield {o.case.name: o for o in outcomes}


@pytest.mark.parametrize("name", CASES)
def test_detection(matrix: dict[str, Any], name: str) -> None:
    outcome = matrix[name]
    if name == "baseline":
        assert outcome.valid is True, (
            f"baseline under every nemesis found {outcome.classes} {outcome.errors}: "
            f"{outcome.run_dir}"
        )
        return
    assert outcome.detected, (
        f"{name}: expected {outcome.case.expect}, found {outcome.classes or 'nothing'} "
        f"(valid={outcome.valid}, errors={outcome.errors}): {outcome.run_dir}"
    )
