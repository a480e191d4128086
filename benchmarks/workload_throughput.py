"""Workload throughput: generator ops/s alone, and what recording and monitoring cost a real run.

    .venv/bin/python benchmarks/workload_throughput.py                  # generators alone
    .venv/bin/python benchmarks/workload_throughput.py --cluster docker # + 5 docker nodes
    .venv/bin/python benchmarks/workload_throughput.py --cluster local  # + 5 local nodes
    .venv/bin/python benchmarks/workload_throughput.py --cluster docker --compare monitor

Generators alone: each workload driven flat out (no pacing) with DDL acknowledged at once, so
the figure is the generator's own cost; Jepsen's bar is 20,000 ops/s. With `--cluster`: client
ops/s of the ddl-dml workload against 5 real schemasync nodes, recording on (history.jsonl
written and fsync'd as it goes) and off (same bookkeeping, nothing written); target: recording
costs <= 5%. The docker variant runs every phase on one cluster (the tables of a phase are
dropped before the next, so each phase starts from the same schema), after one uncounted
warm-up phase, and alternates on/off in ABBA order, so that load drifting on a shared machine
falls on both sides alike; each round gives one on/off ratio of two adjacent phases, reported
with its spread over the rounds, for client ops/s and for the controller's CPU time per op
(which other load on the machine moves far less than ops/s). `--compare monitor` turns the
run's ClusterMonitor (every node's admin status each 250 ms, in the clients' event loop, as
`harness/run.py` starts it) on and off instead, recording on in every phase; the samples each
phase recorded are counted from its history.jsonl, and a monitor that recorded no answered
read fails the benchmark rather than giving a ratio. Target: on/off ops/s >= 0.95.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.monitor import ClusterMonitor
from workloads import build_generator
from workloads.generator import Op
from workloads.history import HistoryRecorder, read_history
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
    from targets.schemasync.client import SchemaSyncClient  # what a real run's clients are

    async def open_client(node: str) -> Any:
        return SchemaSyncClient(node, await cluster.client(node))

    gen = build_generator("ddl-dml", seed, concurrency, {"dml_interval_s": 0.0, "nodes": 5})
    try:
        stats = await run_clients(gen, open_client, cluster.names, recorder, seconds, concurrency)
    finally:
        recorder.close()
    return float(stats["ops_per_s"])


def cluster_comparison(seconds: float, rounds: int, concurrency: int) -> None:
    from schemasync.localcluster import LocalCluster

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
    """The compared feature on/off per phase, ABBA: on off | off on | on off ... (True = on)."""
    return [on for r in range(rounds) for on in ((True, False), (False, True))[r % 2]]


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
class Comparison:
    """What the phases of a docker run turn on and off; everything else is the same."""

    feature: str  # "recording" or "monitor"
    goal: str  # as printed beside the result

    def recording(self, on: bool) -> bool:
        return on or self.feature != "recording"  # a monitor is measured as a real run: recorded

    def monitor(self, on: bool) -> bool:
        return on and self.feature == "monitor"


COMPARISONS = {
    "recording": Comparison("recording", "recording costs <= 5%"),
    "monitor": Comparison("monitor", "on/off ops/s >= 0.95"),
}


@dataclass(frozen=True)
class MonitorSamples:
    """The monitor events one phase's history holds: ticks, and node reads answered or not."""

    ticks: int
    answered: int
    errors: int

    @classmethod
    def of_history(cls, path: Path) -> MonitorSamples:
        samples = [e["value"] for e in read_history(path) if e.get("process") == "monitor"]
        reads = [fields for sample in samples for fields in sample.values()]
        answered = sum(1 for fields in reads if "error" not in fields)
        return cls(len(samples), answered, len(reads) - answered)


@dataclass(frozen=True)
class Phase:
    """One measured phase: client ops/s, and the controller's CPU per completed op (every
    thread of this process: clients, recorder, fsync, monitor), which other load on the
    machine moves less than ops/s."""

    on: bool  # the compared feature
    ops_per_s: float
    cpu_us_per_op: float
    stats: dict[str, Any]
    samples: MonitorSamples | None  # None: not counted (not a monitor comparison)


async def clients_and_monitor(
    target: Any,
    nodes: list[str],
    recorder: HistoryRecorder,
    monitor: bool,
    run: Callable[[], Awaitable[dict]],
) -> dict:
    """`run()` (the clients), beside a ClusterMonitor sampling every node if `monitor`: the
    same TaskGroup and stop event as harness/run.py's."""
    if not monitor:
        return dict(await run())
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(ClusterMonitor(target, nodes, recorder).run(stop))
        try:
            stats = dict(await run())
        finally:
            stop.set()
    return stats


async def docker_phase(
    target: Any,
    nodes: list[str],
    comparison: Comparison,
    on: bool,
    path: Path,
    seconds: float,
    concurrency: int,
) -> Phase:
    """One phase: the same seeded workload every time, then its tables dropped (not timed)."""
    recording = comparison.recording(on)
    recorder = HistoryRecorder(path) if recording else UnrecordedHistory(path)
    gen = build_generator("ddl-dml", 1, concurrency, {"dml_interval_s": 0.0, "nodes": len(nodes)})

    def clients() -> Awaitable[dict]:
        return run_clients(gen, target.client, nodes, recorder, seconds, concurrency)

    cpu_start = time.process_time()
    try:
        stats = await clients_and_monitor(target, nodes, recorder, comparison.monitor(on), clients)
    finally:
        recorder.close()
    cpu_s = time.process_time() - cpu_start
    done = max(1, stats["ok"] + stats["fail"] + stats["info"])
    await drop_all_tables(target, nodes[0])
    counted = recording and comparison.feature == "monitor"
    samples = MonitorSamples.of_history(path) if counted else None
    return Phase(on, float(stats["ops_per_s"]), cpu_s / done * 1e6, stats, samples)


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
    return [(a, b) if a.on else (b, a) for a, b in pairs]


def describe(i: int, phase: Phase, comparison: Comparison, seconds: float, nodes: int) -> str:
    st = phase.stats
    line = (
        f"  phase {i:2d} {comparison.feature} {'on ' if phase.on else 'off'}: "
        f"{phase.ops_per_s:7.1f} client ops/s, {phase.cpu_us_per_op:6.0f} controller "
        f"CPU-us/op ({st['ok']} ok, {st['fail']} fail, {st['info']} info)"
    )
    s = phase.samples
    if s is not None:
        per_node = s.answered / nodes / phase_seconds(phase, seconds)
        line += f"; {s.ticks} samples, {per_node:.2f} answered reads/s/node, {s.errors} errors"
    return line


@dataclass(frozen=True)
class MonitorAlone:
    """The ClusterMonitor sampling the idle cluster, recorded, no clients: the controller CPU
    it costs on its own, which other load on the machine does not move."""

    cpu_s_per_s: float
    samples: MonitorSamples


async def monitor_alone(target: Any, nodes: list[str], path: Path, seconds: float) -> MonitorAlone:
    recorder = HistoryRecorder(path)
    stop = asyncio.Event()
    cpu_start = time.process_time()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(ClusterMonitor(target, nodes, recorder).run(stop))
            await asyncio.sleep(seconds)
            stop.set()
    finally:
        recorder.close()
    cpu_s = time.process_time() - cpu_start
    return MonitorAlone(cpu_s / seconds, MonitorSamples.of_history(path))


def phase_seconds(phase: Phase, seconds: float) -> float:
    """How long the clients (and the monitor beside them) ran: the limit plus the last ops."""
    return float(phase.stats.get("elapsed_s") or seconds)


def measure_docker_phases(
    comparison: Comparison, seconds: float, rounds: int, concurrency: int
) -> tuple[list[Phase], MonitorAlone | None]:
    """On/off phases alternated ABBA on one 5-node docker cluster (3 voters, 2 learners), and
    for the monitor, then the monitor alone on the same cluster."""
    import uuid

    from harness.backends import provision
    from harness.cluster import ClusterSpec
    from harness.images import ensure_images
    from targets.schemasync import SchemaSyncTarget

    root = Path(tempfile.mkdtemp(prefix="wl-bench-docker-"))
    spec = ClusterSpec(backend="docker", nodes=5, voters=3, image=ensure_images().node)
    phases: list[Phase] = []
    alone: MonitorAlone | None = None
    with provision(spec, f"bench-{uuid.uuid4().hex[:8]}", root / ".tmp") as cluster:
        target = SchemaSyncTarget()
        nodes = cluster.nodes
        try:
            target.setup(cluster, {})
            target.start_all()
            target.wait_ready(60)
            # a first phase, not counted: the cluster's first tables, connections and Raft
            # traffic are slower than any later phase's, and would land on one side only
            warmup = root / "warmup.jsonl"
            asyncio.run(
                docker_phase(target, nodes, comparison, False, warmup, seconds, concurrency)
            )
            for i, on in enumerate(phase_order(rounds)):
                path = root / f"p{i}-{'on' if on else 'off'}.jsonl"
                phase = asyncio.run(
                    docker_phase(target, nodes, comparison, on, path, seconds, concurrency)
                )
                phases.append(phase)
                print(describe(i, phase, comparison, seconds, len(nodes)))
            if comparison.feature == "monitor":
                path = root / "monitor-alone.jsonl"
                alone = asyncio.run(monitor_alone(target, nodes, path, seconds))
        finally:
            target.teardown()
    return phases, alone


def monitor_sampled(phases: list[Phase]) -> bool:
    """Every monitor-on phase recorded answered reads, and no off phase recorded a sample."""
    on = [p.samples.answered if p.samples else 0 for p in phases if p.on]
    off = [p.samples.ticks if p.samples else 0 for p in phases if not p.on]
    if min(on, default=0) == 0:
        print(f"FAIL: a monitor-on phase recorded no answered read (answered per phase: {on})")
        return False
    if any(off):
        print(f"FAIL: a monitor-off phase recorded samples (per phase: {off})")
        return False
    return True


def docker_comparison(comparison: Comparison, seconds: float, rounds: int, concurrency: int) -> int:
    """Prints the on/off ratios of one docker run; returns the exit code (1: no ratio)."""
    feature = comparison.feature
    phases, alone = measure_docker_phases(comparison, seconds, rounds, concurrency)
    if feature == "monitor" and not monitor_sampled(phases):
        return 1
    pairs = rounds_of(phases)
    on = [p.ops_per_s for p in phases if p.on]
    off = [p.ops_per_s for p in phases if not p.on]
    print(
        f"client ops/s, 5 docker nodes: {feature} on {statistics.fmean(on):.1f}, "
        f"off {statistics.fmean(off):.1f}"
    )
    ratios = [a.ops_per_s / b.ops_per_s for a, b in pairs]
    print(f"{feature} on/off ops/s ratio per round ({len(pairs)} rounds): {spread(ratios)}")
    cost = 100 * (1 - statistics.median(ratios))
    print(f"{feature} cost, end to end (median of rounds): {cost:+.1f}% ({comparison.goal})")
    cpu = [a.cpu_us_per_op / b.cpu_us_per_op for a, b in pairs]
    print(f"{feature} on/off controller CPU per op, per round: {spread(cpu)}")
    mean_on = statistics.fmean(on)
    if feature == "recording":
        share = 2 * mean_on * recorder_cost_us() * 1e-6
        print(f"recorder time at {mean_on:.0f} ops/s: {100 * share:.2f}% of one core")
    else:
        ticks = [p.samples.ticks / phase_seconds(p, seconds) for p in phases if p.on and p.samples]
        print(f"monitor samples per second, per on phase: {spread(ticks)} (every 250 ms: 4)")
        if alone is not None:
            s = alone.samples
            print(
                f"monitor alone on the idle cluster, {seconds:.0f} s: "
                f"{1000 * alone.cpu_s_per_s:.1f} controller CPU-ms/s "
                f"({100 * alone.cpu_s_per_s:.2f}% of one core; {s.ticks}"
                f" samples, {s.answered} reads answered, {s.errors} errors)"
            )
            cpu_on = statistics.fmean(p.cpu_us_per_op for p in phases if p.on)
            controller = mean_on * cpu_on * 1e-6  # CPU-s per s of a monitor-on phase
            print(
                f"  {100 * alone.cpu_s_per_s / controller:.1f}% of the controller's CPU in a"
                " monitor-on phase"
            )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per generator measurement")
    parser.add_argument("--cluster", choices=["none", "local", "docker"], default="none")
    parser.add_argument("--cluster-seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2, help="docker: on/off pairs (ABBA)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--compare",
        choices=sorted(COMPARISONS),
        default="recording",
        help="docker: the feature the phases turn on and off",
    )
    args = parser.parse_args()
    if args.compare != "recording" and args.cluster != "docker":
        parser.error("--compare monitor needs --cluster docker")
    for workload in ("ddl-dml", "index"):
        rate = generator_rate(workload, args.seconds)
        print(f"generator {workload:8s}: {rate:10.0f} ops per CPU-second (target >= 20,000)")
    cost = recorder_cost_us()
    print(f"recorder: {cost:.1f} CPU-us per event, so recording stays within 5% of one controller")
    print(f"  core up to {0.05 / (2 * cost * 1e-6):,.0f} client ops/s (2 events per op)")
    if args.cluster == "local":
        cluster_comparison(args.cluster_seconds, args.rounds, args.concurrency)
    elif args.cluster == "docker":
        comparison = COMPARISONS[args.compare]
        sys.exit(docker_comparison(comparison, args.cluster_seconds, args.rounds, args.concurrency))


if __name__ == "__main__":
    main()
