"""The driver JVM: Ctrl-C while it starts leaves no JVM behind, even in a process that goes
on living (a nightly run that stops one cell and carries on); a short-lived one gets the JIT
flags it is meant to."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require

REPO = Path(__file__).resolve().parents[1]
STARTER = """
import sys, time
from checker.session import build_session
try:
    build_session("local[1]")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    time.sleep(60)  # alive: its JVM must be gone anyway
"""


def _spark_jvms_of(parent: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            cmd = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{parent}\n" in text and b"org.apache.spark.deploy.SparkSubmit" in cmd:
            out.append(int(status.parent.name))
    return out


@pytest.mark.spark
def test_ctrl_c_during_spark_start_leaves_no_jvm() -> None:
    require(shutil.which("java") is not None, "Spark needs a Java runtime (java on PATH)")
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTER], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not _spark_jvms_of(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        jvms = _spark_jvms_of(proc.pid)
        assert jvms, "the driver JVM never started"
        os.kill(proc.pid, signal.SIGINT)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "interrupted"
        assert proc.poll() is None  # still alive, and yet:
        assert _spark_jvms_of(proc.pid) == []
        assert not any(Path(f"/proc/{pid}").exists() for pid in jvms)
    finally:
        proc.kill()
        proc.wait()


FLAGS = """
from checker.session import build_session
spark = build_session("local[1]", short_lived=True)
jvm = spark.sparkContext._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
for flag in ("TieredStopAtLevel", "ReservedCodeCacheSize"):
    print(flag, bean.getVMOption(flag).getValue())
spark.stop()
"""


@pytest.mark.spark
def test_a_short_lived_driver_compiles_with_c1_into_a_full_size_code_cache() -> None:
    """C1 alone would reserve 48 MB of code cache, which a process that judges a second run in
    the same JVM filled ("CodeCache is full. Compiler has been disabled")."""
    require(shutil.which("java") is not None, "Spark needs a Java runtime (java on PATH)")
    out = subprocess.run(
        [sys.executable, "-c", FLAGS], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    flags = dict(line.split() for line in out.stdout.splitlines() if line.count(" ") == 1)
    assert flags.get("TieredStopAtLevel") == "1", (out.stdout, out.stderr[-2000:])
    assert int(flags["ReservedCodeCacheSize"]) >= 240 << 20, flags
