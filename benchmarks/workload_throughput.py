"""Workload throughput: generator ops/s alone, and what recording the history costs a real run.

    .venv/bin/python benchmarks/workload_throughput.py                  # generators alone
    .venv/bin/python benchmarks/workload_throughput.py --cluster docker # + 5 docker nodes
    .venv/bin/python benchmarks/workload_throughput.py --cluster local  # + 5 local nodes

Generators alone: each workload driven flat out (no pacing) with DDL acknowledged at once, so
the figure is the generator's own cost; Jepsen's bar is 20,000 ops/s. With `--cluster`: client
ops/s of the ddl-dml workload against 5 real schemasync nodes, recording on (history.jsonl
written and fsync'd as it goes) and off (same bookkeeping, nothing written); target: recording
costs <= 5%. The docker variant runs every phase on one cluster (the tables of a phase are
dropped before the next, so each phase starts from the same schema), after one uncounted
warm-up phase, and alternates on/off in ABBA order, so that load drifting on a shared machine
falls on both sides alike; each round gives one on/off ratio of two adjacent phases, reported
with its spread over the rounds, for client ops/s and for the controller's CPU time per op
(which other load on the machine moves far less than ops/s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
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


def phase_order(rounds: int) -> list[bool]:
    """Recording on/off per phase, ABBA: on off | off on | on off ... (True = on)."""
    return [recording for r in range(rounds) for recording in ((True, False), (False, True))[r % 2]]


async def drop_all_tables(target: Any, node: str) -> int:
    """Drop every table of the newest catalog version, so the next phase creates t1.. afresh."""
    catalog = await target.catalog_log()
    tables = sorted(catalog[-1].get("tables", {})) if catalog else []
    client = await target.client(node)
    try:
        for table in tables:
            await client.ddl({"stmt": f"DROP TABLE {table}"})
    finally:
        await client.close()
    return len(tables)


@dataclass(frozen=True)
class Phase:
    """One measured phase: client ops/s, and the controller's CPU per completed op (every
    thread of this process: clients, recorder, fsync), which other load on the machine moves
    less than ops/s."""

    recording: bool
    ops_per_s: float
    cpu_us_per_op: float
    stats: dict[str, Any]


async def docker_phase(
    target: Any, nodes: list[str], recording: bool, path: Path, seconds: float, concurrency: int
) -> Phase:
    """One phase: the same seeded workload every time, then its tables dropped (not timed)."""
    recorder = HistoryRecorder(path) if recording else UnrecordedHistory(path)
    gen = build_generator("ddl-dml", 1, concurrency, {"dml_interval_s": 0.0, "nodes": len(nodes)})
    cpu_start = time.process_time()
    try:
        stats = await run_clients(gen, target.client, nodes, recorder, seconds, concurrency, 1)
    finally:
        recorder.close()
    cpu_s = time.process_time() - cpu_start
    done = max(1, stats["ok"] + stats["fail"] + stats["info"])
    await drop_all_tables(target, nodes[0])
    return Phase(recording, float(stats["ops_per_s"]), cpu_s / done * 1e6, dict(stats))


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return (
        f"mean {statistics.fmean(values):.3f}, median {statistics.median(values):.3f}, "
        f"sd {statistics.stdev(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"
    )


def rounds_of(phases: list[Phase]) -> list[tuple[Phase, Phase]]:
    """(on, off) of each round: two adjacent phases, one of each (phase_order's pairs)."""
    pairs = zip(phases[0::2], phases[1::2], strict=True)
    return [(a, b) if a.recording else (b, a) for a, b in pairs]


def measure_docker_phases(seconds: float, rounds: int, concurrency: int) -> list[Phase]:
    """On/off phases alternated ABBA on one 5-node docker cluster (3 voters, 2 learners)."""
    import uuid

    from harness.cluster import ClusterSpec, provision
    from harness.images import ensure_images
    from targets.schemasync import SchemaSyncTarget

    root = Path(tempfile.mkdtemp(prefix="wl-bench-docker-"))
    spec = ClusterSpec(backend="docker", nodes=5, voters=3, image=ensure_images().node)
    phases: list[Phase] = []
    with provision(spec, f"bench-{uuid.uuid4().hex[:8]}", root / ".tmp") as cluster:
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {})
            target.start_all()
            target.wait_ready(60)
            # a first phase, not counted: the cluster's first tables, connections and Raft
            # traffic are slower than any later phase's, and would land on one side only
            warmup = root / "warmup.jsonl"
            asyncio.run(docker_phase(target, cluster.nodes, False, warmup, seconds, concurrency))
            for i, recording in enumerate(phase_order(rounds)):
                path = root / f"p{i}-{'on' if recording else 'off'}.jsonl"
                phase = asyncio.run(
                    docker_phase(target, cluster.nodes, recording, path, seconds, concurrency)
                )
                phases.append(phase)
                st = phase.stats
                print(
                    f"  phase {i:2d} recording {'on ' if recording else 'off'}: "
                    f"{phase.ops_per_s:7.1f} client ops/s, {phase.cpu_us_per_op:6.0f} controller "
                    f"CPU-us/op ({st['ok']} ok, {st['fail']} fail, {st['info']} info)"
                )
        finally:
            target.teardown()
    return phases


def docker_comparison(seconds: float, rounds: int, concurrency: int) -> None:
    phases = measure_docker_phases(seconds, rounds, concurrency)
    pairs = rounds_of(phases)
    on = [p.ops_per_s for p in phases if p.recording]
    off = [p.ops_per_s for p in phases if not p.recording]
    print(
        f"client ops/s, 5 docker nodes: recording on {statistics.fmean(on):.1f}, "
        f"off {statistics.fmean(off):.1f}"
    )
    ratios = [a.ops_per_s / b.ops_per_s for a, b in pairs]
    print(f"on/off ops/s ratio per round ({len(pairs)} rounds): {spread(ratios)}")
    cost = 100 * (1 - statistics.median(ratios))
    print(f"recording cost, end to end (median of rounds): {cost:+.1f}% (target <= 5%)")
    cpu = [a.cpu_us_per_op / b.cpu_us_per_op for a, b in pairs]
    print(f"on/off controller CPU per op, per round: {spread(cpu)}")
    mean_on = statistics.fmean(on)
    share = 2 * mean_on * recorder_cost_us() * 1e-6
    print(f"recorder time at {mean_on:.0f} ops/s: {100 * share:.2f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per generator measurement")
    parser.add_argument("--cluster", choices=["none", "local", "docker"], default="none")
    parser.add_argument("--cluster-seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2, help="docker: on/off pairs (ABBA)")
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
    elif args.cluster == "docker":
        docker_comparison(args.cluster_seconds, args.rounds, args.concurrency)


if __name__ == "__main__":
    main()
