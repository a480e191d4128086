"""DDL latency against its floor DD + CSmax, Meta Storage writes/s, learner safe-time lag.

Starts a real 5-node local cluster (3 voters, 2 learners) per setting and prints figures:
    .venv/bin/python benchmarks/ddl_latency.py [--ddl 30] [--base-addr 127.0.2]
Targets: p50 ratio <= 1.10 at DD=CSmax=500 ms; learner lag p99 <= idle interval + 25 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from schemasync.hlc import physical_ms
from schemasync.localcluster import LocalCluster


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def ddl_latencies(c: LocalCluster, count: int) -> list[float]:
    """Sequential DDLs, each from the next node in turn; latency in ms as the client saw it."""
    clients = [await c.client(n) for n in c.names]
    await clients[0].ddl("CREATE TABLE bench (a INT32)")
    out = []
    for i in range(count):
        client = clients[i % len(clients)]
        started = time.perf_counter()
        await client.ddl(f"ALTER TABLE bench ADD COLUMN c{i} INT32")
        out.append((time.perf_counter() - started) * 1000)
    for client in clients:
        await client.close()
    return out


async def metastore_writes_per_s(c: LocalCluster, seconds: float, concurrency: int) -> float:
    done = 0
    deadline = time.monotonic() + seconds

    async def writer(k: int) -> None:
        nonlocal done
        client = await c.client(c.names[k % len(c.names)])
        i = 0
        while time.monotonic() < deadline:
            await client.request("admin.ms_write", {"key": f"bench/{k}", "value": i})
            done += 1
            i += 1
        await client.close()

    started = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for k in range(concurrency):
            tg.create_task(writer(k))
    return done / (time.monotonic() - started)


async def learner_lag_ms(c: LocalCluster, learner: str, seconds: float) -> list[float]:
    client = await c.client(learner)
    lags = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        st = await client.status()
        lags.append(float(physical_ms(st["hlc_now"]) - physical_ms(st["safe_ts"])))
        await asyncio.sleep(0.007)
    await client.close()
    return lags


def run_setting(
    base_addr: str, dd: int, csmax: int, idle: int, ddl_count: int, writes: bool
) -> None:
    overrides = {
        "delay_duration_ms": dd,
        "max_clock_skew_ms": csmax,
        "idle_safe_time_interval_ms": idle,
    }
    with (
        tempfile.TemporaryDirectory(prefix="ddl-bench-") as tmp,
        LocalCluster(
            Path(tmp), base_addr=base_addr, host_offset=40, config_overrides=overrides
        ) as c,
    ):
        lat = asyncio.run(ddl_latencies(c, ddl_count))
        floor = dd + csmax
        p50, p99 = statistics.median(lat), quantile(lat, 0.99)
        print(
            f"DD={dd} CSmax={csmax} idle={idle}: DDL latency p50 {p50:.1f} ms, p99 {p99:.1f} ms,"
            f" floor {floor} ms, ratio p50 {p50 / floor:.3f}, p99 {p99 / floor:.3f} (n={len(lat)})"
        )
        lags = asyncio.run(learner_lag_ms(c, c.learners[-1], 4.0))
        print(
            f"  learner {c.learners[-1]} safe-time lag: p50 {statistics.median(lags):.1f} ms,"
            f" p99 {quantile(lags, 0.99):.1f} ms, max {max(lags):.1f} ms"
            f" (target p99 <= {idle + 25} ms, n={len(lags)})"
        )
        if writes:
            rate = asyncio.run(metastore_writes_per_s(c, 4.0, 16))
            print(f"  Meta Storage writes: {rate:.0f}/s (16 concurrent clients, fsync per batch)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ddl", type=int, default=30, help="DDLs per setting")
    parser.add_argument("--base-addr", default="127.0.2")
    args = parser.parse_args()
    run_setting(args.base_addr, 500, 500, 250, args.ddl, writes=True)
    run_setting(args.base_addr, 100, 7, 40, args.ddl * 2, writes=False)


if __name__ == "__main__":
    main()
