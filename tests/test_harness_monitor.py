"""The 250 ms monitor: sample values (pure), a paused node on a real cluster, and a real run."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker.analyze import analyze_run, exit_code
from contract.target import ClientError
from harness.monitor import ClusterMonitor, StatusRead, error_code, sample_value
from harness.reaper import watchdog_processes
from schemasync.client import Client
from schemasync.localcluster import LocalCluster
from tests.spark_session import spark  # noqa: F401  (fixture)
from tests.test_harness_support import free_local_base

REPO = Path(__file__).resolve().parent.parent
MS = 1 << 16  # one HLC millisecond


def hlc(ms: int, logical: int = 0) -> int:
    return ms * MS + logical


def read(node: str, wall: float, mono: float, **status: Any) -> StatusRead:
    return StatusRead(node, {"node": node, **status}, None, wall, mono)


# -- sample values --------------------------------------------------------------------------


def test_lag_is_behind_the_leaders_hlc_at_each_nodes_read_moment() -> None:
    reads = [
        read("n1", 1000.0, 50.0, role="follower", hlc_now=hlc(1900), safe_ts=hlc(1700, 5)),
        read("n2", 1002.0, 52.0, role="leader", hlc_now=hlc(1003), safe_ts=hlc(900),
             term=3, commit_index=40, catalog_version=7),
    ]  # fmt: skip
    value = sample_value(reads, "hlc")
    # the leader's HLC (1003 ms), carried back 2 ms to n1's read: 1001 - 1700
    assert value["n1"]["safe_lag_ms"] == -699.0
    assert value["n2"]["safe_lag_ms"] == 103.0
    assert value["n1"]["hlc_offset_ms"] == 900.0  # n1's clock runs 900 ms ahead
    assert value["n2"]["hlc_offset_ms"] == 1.0
    assert value["n2"] == {
        "catalog_version": 7, "safe_ts": hlc(900), "role": "leader", "term": 3,
        "commit_index": 40, "safe_lag_ms": 103.0, "hlc_offset_ms": 1.0,
    }  # fmt: skip


def test_of_two_leaders_the_newer_term_is_the_reference() -> None:
    reads = [
        read("n1", 0.0, 0.0, role="leader", term=2, hlc_now=hlc(900), safe_ts=hlc(800)),
        read("n2", 0.0, 0.0, role="leader", term=3, hlc_now=hlc(700), safe_ts=hlc(600)),
    ]
    value = sample_value(reads, "hlc")
    assert value["n1"]["safe_lag_ms"] == -100.0 and value["n2"]["safe_lag_ms"] == 100.0


def test_without_a_leader_the_highest_hlc_is_the_reference() -> None:
    reads = [
        read("n1", 0.0, 0.0, role="candidate", hlc_now=hlc(500), safe_ts=hlc(400)),
        read("n2", 0.0, 0.0, role="follower", hlc_now=hlc(650), safe_ts=hlc(600)),
    ]
    value = sample_value(reads, "hlc")
    assert value["n1"]["safe_lag_ms"] == 250.0
    assert value["n2"]["safe_lag_ms"] == 50.0


def test_errors_and_missing_fields_never_break_a_sample() -> None:
    reads = [
        StatusRead("n1", None, "TIMEOUT", 0.0, 0.0),
        read("n2", 0.0, 0.0, role="learner"),  # no hlc_now, no safe_ts
        StatusRead("n3", None, None, 0.0, 0.0),
    ]
    value = sample_value(reads, "hlc")
    assert value == {"n1": {"error": "TIMEOUT"}, "n2": {"role": "learner"},
                     "n3": {"error": "UNKNOWN"}}  # fmt: skip


def test_other_clocks_record_their_scalar_fields_as_they_are() -> None:
    lsn = 123_456_789
    status = {"role": "primary", "hlc_now": lsn, "lsn": lsn, "term": 1, "catalog_version": 4,
              "leader": "n1", "nested": {"x": 1}}  # fmt: skip
    value = sample_value([read("n1", 0.0, 0.0, **status)], "none")
    assert value["n1"] == {k: v for k, v in status.items() if k != "nested"}
    assert "safe_lag_ms" not in value["n1"] and "hlc_offset_ms" not in value["n1"]


def test_error_codes() -> None:
    assert error_code(ClientError("UNAVAILABLE", "down")) == "UNAVAILABLE"
    assert error_code(TimeoutError()) == "TIMEOUT"
    assert error_code(ConnectionResetError()) == "UNAVAILABLE"
    assert error_code(ValueError()) == "ValueError"


# -- a real cluster with a paused node ----------------------------------------------------------


class Samples:
    def __init__(self) -> None:
        self.values: list[tuple[float, dict]] = []

    def monitor(self, value: dict) -> dict:
        self.values.append((time.monotonic(), value))
        return value


class ClusterStatus:
    """The monitor's view of a LocalCluster: the real schemasync client of each node."""

    clock = "hlc"

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster

    async def client(self, node: str) -> Client:
        return await Client.connect([self._cluster.address(node)], timeout=5.0)


@pytest.mark.cluster
def test_a_paused_node_is_an_error_and_never_delays_the_others(tmp_path: Path) -> None:
    base = free_local_base(3).rsplit(".", 1)[0]
    with LocalCluster(tmp_path, n=3, voters=3, base_addr=base) as cluster:
        samples = Samples()
        monitor = ClusterMonitor(ClusterStatus(cluster), cluster.names, samples)
        paused: list[float] = []

        async def scenario() -> None:
            stop = asyncio.Event()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(monitor.run(stop))
                await asyncio.sleep(1.5)
                cluster.procs["n3"].send_signal(signal.SIGSTOP)
                paused.append(time.monotonic())
                try:
                    await asyncio.sleep(2.0)
                finally:
                    cluster.procs["n3"].send_signal(signal.SIGCONT)
                paused.append(time.monotonic())
                await asyncio.sleep(2.0)
                stop.set()

        asyncio.run(scenario())
    times = [t for t, _ in samples.values]
    assert 5.5 / 0.25 * 0.8 <= len(times) <= 5.5 / 0.25 + 2, len(times)
    assert max(b - a for a, b in itertools.pairwise(times)) < 0.6
    during = [v for t, v in samples.values if paused[0] + 0.3 < t < paused[1]]
    assert during and all(v["n3"] == {"error": "TIMEOUT"} for v in during)
    answered = [v for v in during if "role" in v["n1"] and "role" in v["n2"]]
    assert len(answered) >= len(during) * 0.7, during  # the others still answer while n3 hangs
    after = [v for t, v in samples.values if t > paused[1] + 1.0]
    assert any("safe_lag_ms" in v["n3"] for v in after), "n3 is sampled again once resumed"
    assert {v["n1"].get("role") for _, v in samples.values} & {"leader", "follower"}


# -- a real run ---------------------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.spark
def test_a_local_run_has_a_sample_every_250ms_and_stays_valid(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    store = tmp_path / "store"
    limit = 8.0
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "local", "--time-limit",
           str(limit), "--nemesis", "none", "--no-analyze", "--no-progress", "--concurrency",
           "3", "--store", str(store), "--test-name", "monitor", "--local-base",
           free_local_base()]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = (store / "monitor" / "latest").resolve()
    run = json.loads((run_dir / "run.json").read_text())
    nodes = run["nodes"]
    # the run had a watchdog, and a clean teardown waited for it to go (harness/reaper.py)
    assert f"holds run {run['run_id']}" in (run_dir / "controller.log").read_text()
    assert watchdog_processes(run["run_id"]) == []
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    samples = [e for e in events if e["process"] == "monitor"]
    assert all(e["type"] == "info" and e["f"] == "sample" for e in samples)
    times = [e["time"] / 1e9 for e in samples]
    assert limit / 0.25 * 0.8 <= len(samples) <= limit / 0.25 * 1.3, len(samples)
    assert max(b - a for a, b in itertools.pairwise(times)) < 1.0
    assert all(set(e["value"]) == set(nodes) for e in samples)
    answered = [v for e in samples for v in e["value"].values() if "error" not in v]
    assert len(answered) >= 0.5 * len(samples) * len(nodes)  # loose: a loaded CI box times out
    assert all(isinstance(v["safe_lag_ms"], float) and v["role"] for v in answered)
    # the checker accepts the samples (history.md): the run stays valid, exit code 0
    results = analyze_run(run_dir, spark=spark)
    assert results["valid"] is True, results.get("errors")
    assert exit_code(results) == 0
