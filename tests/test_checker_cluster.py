"""The whole pipeline once on real executors (`local-cluster[2,1,1024]`), through the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import generate_run
from tests.conftest import require


@pytest.mark.spark
def test_cli_on_local_cluster_finds_the_injected_fault(tmp_path: Path) -> None:
    require(shutil.which("java") is not None, "Spark needs a Java runtime (java on PATH)")
    generate_run(tmp_path, seed=21, events=300, fault="lost-write")
    env = {**os.environ, "CHECKER_DRIVER_MEMORY": "1g"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "checker",
            str(tmp_path),
            "--spark-master",
            "local-cluster[2,1,1024]",
        ],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert {a["class"] for a in results["anomalies"]} == {"lost-write"}
    assert results["stats"]["counts"]["txn"]["ok"] > 0
    assert "lost-write:" in proc.stdout
