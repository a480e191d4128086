"""Workload throughput: generator ops/s alone, and what recording the history costs a real run.

    .venv/bin/python benchmarks/workload_throughput.py                 # generators alone
    .venv/bin/python benchmarks/workload_throughput.py --cluster local # + 5 local nodes

Generators alone: each workload driven flat out (no pacing) with DDL acknowledged at once, so
the figure is the generator's own cost; Jepsen's bar is 20,000 ops/s. With `--cluster local`:
client ops/s of the ddl-dml workload against 5 real schemasync nodes on loopback, recording on
(history.jsonl written and fsync'd as it goes) and off (same bookkeeping, nothing written),
alternated to spread machine noise; target: recording costs <= 5%. The docker variant waits for
the harness's docker backend.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads import build_generator
from workloads.generator import Op
from workloads.history import HistoryRecorder
from workloads.runner import run_clients


def generator_rate(workload: str, seconds: float, concurrency: int = 16) -> float:
    gen = build_generator(workload, 1, concurrency, {"dml_interval_s": 0.0})
    version = 1
    # CPU time, so that other processes on a shared machine do not count against it.
    n, now, start = 0, 0.0, time.process_time()
    deadline = start + seconds
    while time.process_time() < deadline:
        for p in range(concurrency):
            now += 0.0002
            op = gen.next_op(p, now)
            if not isinstance(op, Op):
                continue
            n += 1
            if op.f == "ddl":
                version += 1
                value = {**op.value, "catalog_version": version, "activation_ts": version << 20}
                gen.observe(op, {"type": "ok", "value": value})
    return n / (time.process_time() - start)


def recorder_cost_us(events: int = 20_000) -> float:
    """Microseconds of controller time one recorded event costs (a 4-op txn invoke or its
    completion, like a real run's), written to a real file."""
    ops = [{"op": "w", "table": "t1", "key": k, "row": {"c1": k, "c2": f"w{k}"}} for k in range(4)]
    done = [
        {**op, "op_ts": 1 << 40, "node": "n2", "schema_version": 3, "result": None} for op in ops
    ]
    completion = {
        "txn_id": "n1-123",
        "begin_ts": 1 << 40,
        "commit_ts": (1 << 40) + 5,
        "ops": done,
        "tables": {"t1": {"base_ts": 1 << 40, "schema_version": 3}},
        "participants": [{"node": "n2", "table": "t1", "partition": 1, "commit_schema_version": 3}],
    }
    with tempfile.TemporaryDirectory() as tmp:
        rec = HistoryRecorder(Path(tmp) / "history.jsonl")
        start = time.process_time()
        for p in range(events // 2):
            rec.invoke(p, "txn", {"ops": ops})
            rec.complete(p, "ok", "txn", completion, "n1")
        elapsed = time.process_time() - start
        rec.close()
    return elapsed / events * 1e6


class UnrecordedHistory(HistoryRecorder):
    """The recorder's bookkeeping (index, pairing, process rules) without building or writing
    lines: the baseline that recording is measured against."""

    def _write(self, fields: dict[str, Any]) -> dict:
        event = {"index": self._index, **fields}
        self._index += 1
        return event


async def cluster_rate(
    cluster: Any, recorder: HistoryRecorder, seconds: float, concurrency: int, seed: int
) -> float:
    from tests.test_workload_runner import NodeClient

    async def open_client(node: str) -> Any:
        return NodeClient(node, await cluster.client(node))

    gen = build_generator("ddl-dml", seed, concurrency, {"dml_interval_s": 0.0, "nodes": 5})
    try:
        stats = await run_clients(
            gen, open_client, cluster.names, recorder, seconds, concurrency, seed
        )
    finally:
        recorder.close()
    return float(stats["ops_per_s"])


def cluster_comparison(seconds: float, rounds: int, concurrency: int) -> None:
    from tests.localcluster import LocalCluster

    root = Path(tempfile.mkdtemp(prefix="wl-bench-"))
    on: list[float] = []
    off: list[float] = []
    for r in range(rounds):
        for recording in (True, False) if r % 2 == 0 else (False, True):
            run_dir = root / f"r{r}-{'on' if recording else 'off'}"
            with LocalCluster(run_dir / "cluster", n=5, voters=3, base_addr="127.0.7") as cluster:
                cls = HistoryRecorder if recording else UnrecordedHistory
                recorder = cls(run_dir / "history.jsonl")
                rate = asyncio.run(cluster_rate(cluster, recorder, seconds, concurrency, r))
            (on if recording else off).append(rate)
            print(
                f"  round {r} recording {'on ' if recording else 'off'}: {rate:8.1f} client ops/s"
            )
    mean_on, mean_off = sum(on) / len(on), sum(off) / len(off)
    print(f"client ops/s, 5 local nodes: recording on {mean_on:.1f}, off {mean_off:.1f}")
    print(f"recording cost, end to end: {100 * (1 - mean_on / mean_off):+.1f}% (target <= 5%)")
    share = 2 * mean_on * recorder_cost_us() * 1e-6
    print(f"recorder time at {mean_on:.0f} ops/s: {100 * share:.2f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per generator measurement")
    parser.add_argument("--cluster", choices=["none", "local"], default="none")
    parser.add_argument("--cluster-seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    for workload in ("ddl-dml", "index"):
        rate = generator_rate(workload, args.seconds)
        print(f"generator {workload:8s}: {rate:10.0f} ops per CPU-second (target >= 20,000)")
    cost = recorder_cost_us()
    print(f"recorder: {cost:.1f} CPU-us per event, so recording stays within 5% of one controller")
    print(f"  core up to {0.05 / (2 * cost * 1e-6):,.0f} client ops/s (2 events per op)")
    if args.cluster == "local":
        cluster_comparison(args.cluster_seconds, args.rounds, args.concurrency)


if __name__ == "__main__":
    main()
