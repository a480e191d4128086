"""Sim runs judged by the real checker: a 5-node baseline without faults is valid over 60
virtual seconds, and a sweep over a bug toggle's scenario stops at a seed with its anomaly and
prints the command that repeats it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.run import RunOptions, run_test
from harness.sweep import analyze_dir
from harness.sweep import main as sweep_main

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
TOGGLE_SCENARIO = REPO / "scenarios" / "no-safe-time-wait.toml"


def test_baseline_without_faults_is_valid(tmp_path: Path) -> None:
    opts = RunOptions(
        backend="sim",
        nodes=5,
        voters=3,
        time_limit_s=60,
        concurrency=10,
        seed=1,
        store=tmp_path,
        target_config={"idle_safe_time_interval_ms": 200},
        test_name="sim-baseline",
        workload_options={"ddl_interval_s": 0.7, "probe_processes": 3},
    )
    out = run_test(replace(opts, no_analyze=True))
    assert out.exit_code == 0
    stats = json.loads((out.run_dir / "sim.json").read_text())
    assert stats["virtual_s"] >= 60
    assert stats["faults_run"] == {}
    assert analyze_dir(out.run_dir) == 0
    results = json.loads((out.run_dir / "results.json").read_text())
    assert results["valid"] is True


def test_sweep_stops_at_the_first_failing_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = sweep_main(
        ["--scenario", str(TOGGLE_SCENARIO), "--seeds", "3", "--store", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "first failing seed: " in out
    assert "repro: schemachaos run --backend sim --scenario" in out
    assert "with anomalies" in out


# Run in a child process: it kills its own Spark JVM, which the shared session of this one is not.
_SESSION_DIES = """
import os, signal
from checker.session import _spark_children
from harness.sweep import _alive, _session
first = _session()
assert _alive(first) and first.range(3).count() == 3
for pid in _spark_children():
    os.kill(pid, signal.SIGKILL)
assert not _alive(first)
second = _session(first)
assert _alive(second) and second.range(5).count() == 5
second.stop()
print("recovered")
"""


def test_a_sweep_gets_a_new_session_when_its_jvm_dies() -> None:
    """A long sweep outlives its Spark JVM (killed here; in practice a local executor that lost
    its heartbeats after the sweep was suspended exits the JVM): the dead session is seen and
    replaced, instead of every later seed being judged unknown."""
    proc = subprocess.run(
        [sys.executable, "-c", _SESSION_DIES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and "recovered" in proc.stdout, proc.stderr[-3000:]
