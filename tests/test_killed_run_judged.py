"""A docker run whose controller is SIGKILLed is still judged (issue 50): its reaper collects
the catalog log from the nodes before it removes them, so `analyze` of the directory reports
what the history prefix proves, and `unknown` with history.md's precise errors otherwise.
Before, the directory had no catalog.jsonl and `analyze` said only "catalog.jsonl: missing"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_harness_interrupt import (
    REPO,
    _ddl_acks,
    _docker_leftovers,
    _read_history,
    _start_run,
    _wait_for_events,
)
from tests.test_harness_support import node_image  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.cluster]


def _reaper_of(run_id: str) -> list[str]:
    import docker

    from harness.reaper import REAPER_LABEL

    label = f"{REAPER_LABEL}={run_id}"
    containers = docker.from_env().containers.list(
        all=True, filters={"label": label}, ignore_removed=True
    )
    return [c.name for c in containers]


def _kill_and_wait_for_the_reaper(proc: subprocess.Popen[bytes], run_dir: Path) -> str:
    """SIGKILL the controller, then wait until its reaper has removed the run and itself."""
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 120
    while (_docker_leftovers(run_id) or _reaper_of(run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _docker_leftovers(run_id) == [] and _reaper_of(run_id) == [], "the reaper must reap"
    assert not (run_dir / "results.json").exists(), "nothing judged the run yet"
    return run_id


def _acked_versions(history: Path) -> set[int]:
    return {
        e["value"]["catalog_version"]
        for e in _read_history(history)
        if e["f"] == "ddl" and e["type"] == "ok"
    }


def _catalog_versions(run_dir: Path) -> set[int]:
    lines = (run_dir / "catalog.jsonl").read_text().splitlines()
    return {json.loads(line)["catalog_version"] for line in lines}


@pytest.mark.spark
def test_a_sigkilled_docker_run_is_judged_by_what_its_prefix_proves(
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """no-ack-wait acknowledges a DDL before it activates: a probe right after the ack sees
    the old version (stale-schema-read) within the first DDLs. Its run is SIGKILLed after a
    few acks; a run without a toggle is SIGKILLed mid-way too. Both directories are analyzed
    together: the first is false with that class alone, the second unknown, each naming what
    its prefix lacks."""
    store = tmp_path / "store"
    early = _start_run(
        store, "docker", "killed-early", "--toggle", "no-ack-wait", "--delay-ms", "500"
    )
    early_dir = (store / "killed-early" / "latest").resolve()
    deadline = time.monotonic() + 180
    history = early_dir / "history.jsonl"
    while _ddl_acks(history) < 4 and time.monotonic() < deadline and early.poll() is None:
        time.sleep(0.2)
    assert _ddl_acks(history) >= 4, "the run acknowledged too few DDLs in 180 s"
    time.sleep(2.0)  # the probes around the last acks
    run_id = _kill_and_wait_for_the_reaper(early, early_dir)
    assert _acked_versions(history) <= _catalog_versions(early_dir), "an acked version is missing"
    reaper_log = (early_dir / "reaper.log").read_text()
    assert f"reaper {run_id}: connection" in reaper_log and "catalog.jsonl: " in reaper_log
    assert (early_dir / "catalog.jsonl").stat().st_uid == early_dir.stat().st_uid

    quiet = _start_run(store, "docker", "killed-quiet")
    quiet_dir = (store / "killed-quiet" / "latest").resolve()
    _wait_for_events(quiet, quiet_dir / "history.jsonl", 60)
    _kill_and_wait_for_the_reaper(quiet, quiet_dir)
    assert _catalog_versions(quiet_dir), "the quiet run's catalog log is collected too"

    analyzed = subprocess.run(
        [sys.executable, "-m", "harness.cli", "analyze", str(early_dir), str(quiet_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = analyzed.stdout + analyzed.stderr
    assert analyzed.returncode == 1, out  # an anomaly in one of them
    early_results = json.loads((early_dir / "results.json").read_text())
    assert early_results["valid"] is False, out
    assert {a["class"] for a in early_results["anomalies"]} == {"stale-schema-read"}, out
    assert any("without a completion" in e for e in early_results["errors"]), out
    quiet_results = json.loads((quiet_dir / "results.json").read_text())
    assert quiet_results["valid"] == "unknown", out
    assert quiet_results["anomalies"] == [], out
    errors = quiet_results["errors"]
    assert not any("catalog.jsonl" in e for e in errors), errors
    assert any("without a completion, the last at index" in e for e in errors), errors
    assert any(e.startswith("no final read of t") for e in errors), errors
