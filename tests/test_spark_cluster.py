"""`spark up` in containers: a real run and a faulty synthetic one judged by a 2-worker
standalone cluster and through Spark Connect give the results.json of local[2], and `spark down`
leaves no container or network behind."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker.analyze import analyze_run
from harness.spark_cli import add_spark_commands
from harness.spark_cluster import SPARK_LABEL, SparkCluster, spark_down, spark_up
from synthetic import generate_run
from tests.conftest import docker_available, require
from tests.spark_session import spark  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parents[1]


def _real_run(store: Path) -> Path:
    """A short real run on local processes (the controller's recorder writes its history)."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "schemachaos"), "run", "--backend", "local",
         "--time-limit", "8", "--no-analyze", "--store", str(store)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = [p.parent for p in store.glob("*/*/history.jsonl") if not p.parent.is_symlink()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    store = tmp_path_factory.mktemp("spark-store")
    real = _real_run(store / "real")
    faulty = store / "synth" / "lost-write"
    generate_run(faulty, seed=22, events=300, fault="lost-write")
    return store, [real, faulty]


@pytest.fixture(scope="module")
def cluster(runs: tuple[Path, list[Path]]) -> Iterator[SparkCluster]:
    require(docker_available(), "no Docker engine answers")
    import docker

    client = docker.from_env(timeout=900)
    name = f"test{os.getpid()}"
    up = spark_up(client, runs[0], workers=2, connect=True, name=name, progress=lambda _: None)
    try:
        yield up
    finally:
        removed = spark_down(client, name)
        assert len(removed) == 5  # master, 2 workers, connect, network
        label = {"label": f"{SPARK_LABEL}={name}"}
        assert client.containers.list(all=True, filters=label, ignore_removed=True) == []
        assert client.networks.list(filters=label) == []


def _copy(run: Path, engine: str) -> Path:
    dest = run.parent / f"{run.name}-{engine}"
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("history.parquet", "results.json"))
    return dest


def _results(run: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run / "results.json").read_text())
    out["stats"].pop("analysis_s")
    return out


ANALYZE = (
    "import sys; from pathlib import Path; from checker.analyze import analyze_runs; "
    "from checker.session import build_session; "
    "remote = sys.argv[1].startswith('sc://'); "
    "s = build_session(remote=sys.argv[1]) if remote else build_session(sys.argv[1]); "
    "analyze_runs([Path(p) for p in sys.argv[2:]], spark=s); s.stop()"
)


def _analyze(url: str, runs: list[Path]) -> None:
    """Every run in one application on `url` (spark:// or sc://), in a process of its own (a
    classic driver here already has the local session)."""
    proc = subprocess.run(
        [sys.executable, "-c", ANALYZE, url, *map(str, runs)],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
        env={**os.environ, "CHECKER_DRIVER_MEMORY": "1g"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.timeout(1800)  # three engines; minutes on a loaded 2-core machine
def test_cluster_and_connect_judge_as_local_does(
    runs: tuple[Path, list[Path]],
    cluster: SparkCluster,
    spark: SparkSession,  # noqa: F811
) -> None:
    assert cluster.connect_url is not None
    copies = {e: [_copy(r, e) for r in runs[1]] for e in ("local", "standalone", "connect")}
    for run in copies["local"]:
        analyze_run(run, spark=spark)
    _analyze(cluster.master_url, copies["standalone"])
    _analyze(cluster.connect_url, copies["connect"])
    for local, standalone, connect in zip(*copies.values(), strict=True):
        expected = _results(local)
        assert expected["stats"]["events"] > 0 and expected["stats"]["counts"]
        assert _results(standalone) == expected, standalone
        assert _results(connect) == expected, connect
    assert _results(copies["local"][1])["valid"] is False  # the lost-write run


def test_spark_up_refuses_a_bad_worker_count() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_spark_commands(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["spark", "up", "--workers", "0"])
    args = parser.parse_args(["spark", "up", "--workers", "3", "--connect"])
    assert args.workers == 3 and args.connect is True
