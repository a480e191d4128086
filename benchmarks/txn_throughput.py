"""Transaction throughput with and without concurrent compatible DDL, on a 5-node local cluster.

8 clients run 3-op transactions across 2 tables for a while with no DDL, then as long again
with one compatible ALTER (ADD COLUMN, nullable) per second. Prints txns/s, p50/p99 latency,
the ratio of the two phases and the abort rate by error code.

    .venv/bin/python benchmarks/txn_throughput.py [--seconds 10] [--clients 8]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemasync.localcluster import LocalCluster
from schemasync.txn_client import TxnFailed, run_txn

TABLES = ("bt1", "bt2")
KEYS = 1000


@dataclass
class Phase:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    ddl: int = 0

    def committed(self) -> int:
        return self.outcomes["ok"]

    def quantile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[int(q * 100) - 1]

    def report(self) -> str:
        total = sum(self.outcomes.values())
        aborts = {k: f"{v / total:.2%}" for k, v in sorted(self.outcomes.items()) if k != "ok"}
        return (
            f"{self.name:>9}: {self.committed() / self.seconds:8.1f} txns/s committed,"
            f" p50 {self.quantile(0.5):6.1f} ms, p99 {self.quantile(0.99):6.1f} ms,"
            f" {total} attempts, {self.ddl} DDL, aborts {aborts or 'none'}"
        )


async def client_loop(
    cluster: LocalCluster, node: str, seed: int, phase_ref: list[Phase], stop: asyncio.Event
) -> None:
    rng = random.Random(seed)
    client = await cluster.client(node)
    try:
        while not stop.is_set():
            ops: list[dict[str, Any]] = []
            for _ in range(3):
                table = rng.choice(TABLES)
                key = rng.randrange(KEYS)
                if rng.random() < 0.5:
                    ops.append({"op": "r", "table": table, "key": key})
                else:
                    ops.append({"op": "w", "table": table, "key": key, "row": {"v": key}})
            phase = phase_ref[0]
            started = time.perf_counter()
            try:
                await run_txn(client, ops, implicit=False)
                phase.outcomes["ok"] += 1
                phase.latencies_ms.append((time.perf_counter() - started) * 1000)
            except TxnFailed as e:
                phase.outcomes[e.code] += 1
    finally:
        await client.close()


async def ddl_loop(cluster: LocalCluster, phase_ref: list[Phase], stop: asyncio.Event) -> None:
    client = await cluster.client("n1")
    n = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            if phase_ref[0].name == "with-ddl":
                n += 1
                await client.ddl(f"ALTER TABLE {TABLES[n % 2]} ADD COLUMN c{n} INT32")
                phase_ref[0].ddl += 1
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        await client.close()


async def bench(cluster: LocalCluster, seconds: float, clients: int) -> tuple[Phase, Phase]:
    admin = await cluster.client("n1")
    for table in TABLES:
        await admin.ddl(f"CREATE TABLE {table} (v INT64)")
    await admin.close()
    quiet, busy = Phase("no-ddl"), Phase("with-ddl")
    phase_ref = [Phase("warm-up")]
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        for i in range(clients):
            tg.create_task(client_loop(cluster, cluster.names[i % 5], i, phase_ref, stop))
        tg.create_task(ddl_loop(cluster, phase_ref, stop))
        await asyncio.sleep(2)
        for phase in (quiet, busy):
            phase_ref[0] = phase
            started = time.monotonic()
            await asyncio.sleep(seconds)
            phase.seconds = time.monotonic() - started
        stop.set()
    return quiet, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="txnbench-") as tmp,
        LocalCluster(
            Path(tmp),
            n=5,
            voters=3,
            base_addr="127.0.3",
            config_overrides={"delay_duration_ms": 500, "max_clock_skew_ms": 500},
        ) as cluster,
    ):
        quiet, busy = asyncio.run(bench(cluster, args.seconds, args.clients))
    print(quiet.report())
    print(busy.report())
    ratio = (busy.committed() / busy.seconds) / max(quiet.committed() / quiet.seconds, 1e-9)
    print(f"throughput ratio with-ddl / no-ddl: {ratio:.3f}")


if __name__ == "__main__":
    main()
