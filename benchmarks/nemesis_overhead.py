"""Nemesis overhead: time to apply and to heal each nemesis on 5 docker nodes (3 voters,
2 learners), median of N (default 10). Targets (issue 5): each <= 1 s to apply, <= 1 s to heal.

`apply`/`heal` are the fault itself (writing faketime files, iptables, tc, signals, the apply
inhibitor; for kill, issuing the restart); `step` adds what the history event records around
it (clock reads before and after, learner indices) and, for kill, waiting until the restarted
node answers its admin API again (the node's own boot time).

    .venv/bin/python benchmarks/nemesis_overhead.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from harness.backends import provision
from harness.backends.host_surface import HostSurface
from harness.cluster import ClusterSpec
from nemesis.clock import reset_clocks, start_clock
from nemesis.context import NemesisContext
from nemesis.lagging import start_lagging, stop_lagging
from nemesis.partition import grudge, heal_partition, start_partition
from nemesis.process import restart, resume, start_kill, start_pause
from targets.schemasync import SchemaSyncTarget

TARGET_S = 1.0
Action = Callable[[NemesisContext], Awaitable[dict[str, Any]]]


def cases(nodes: list[str]) -> dict[str, tuple[Action, Action]]:
    """name -> (apply, heal), each returning the nemesis value with applied_ms / healed_ms."""
    rng = random.Random(5)
    skew = {n: round(rng.uniform(-0.25, 0.25), 3) for n in nodes}
    halves = grudge("halves", nodes, rng)

    def lag(mode: str) -> tuple[Action, Action]:
        params = {"mode": mode, "learners": ["n5"]}
        return (lambda c: start_lagging(c, params), lambda c: stop_lagging(c, params))

    return {
        "clock skew": (
            lambda c: start_clock(c, {"mode": "skew", "offsets": skew}),
            lambda c: reset_clocks(c),
        ),
        "partition halves": (
            lambda c: start_partition(c, {"shape": "halves", "grudge": halves}),
            heal_partition,
        ),
        "lagging drop": lag("drop"),
        "lagging tbf": lag("tbf"),
        "lagging inhibit": lag("inhibit"),
        "kill one": (
            lambda c: start_kill(c, {"target": "one", "nodes": ["n3"]}),
            lambda c: restart(c, ["n3"]),
        ),
        "pause one": (
            lambda c: start_pause(c, {"target": "one", "nodes": ["n3"]}),
            lambda c: resume(c, ["n3"]),
        ),
    }


async def measure_case(
    ctx: NemesisContext, apply: Action, heal: Action, repeat: int, ready: Callable[[], None]
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"apply": [], "heal": [], "apply_step": [], "heal_step": []}
    for _ in range(repeat):
        t0 = time.monotonic()
        applied = await apply(ctx)
        t1 = time.monotonic()
        await asyncio.sleep(0.3)
        t2 = time.monotonic()
        healed = await heal(ctx)
        t3 = time.monotonic()
        for value in (applied, healed):
            if "errors" in value or "error" in value:
                raise RuntimeError(f"nemesis failed: {value}")
        out["apply"].append(applied["applied_ms"] / 1000)
        out["heal"].append(float(healed.get("started_ms") or healed["healed_ms"]) / 1000)
        out["apply_step"].append(t1 - t0)
        out["heal_step"].append(t3 - t2)
        await asyncio.to_thread(ready)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    from harness.images import ensure_images

    image = ensure_images().node
    run_id = f"bench-nem-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="schemachaos-bench-") as tmp:
        spec = ClusterSpec(backend="docker", nodes=5, voters=3, image=image)
        with provision(spec, run_id, Path(tmp) / ".tmp") as cluster:
            target = SchemaSyncTarget()
            try:
                target.setup(cluster, {})
                target.start_all()
                target.wait_ready(60)
                ctx = NemesisContext(cluster, target, HostSurface(cluster, target, run_id))
                results: dict[str, dict[str, list[float]]] = {}
                for name, (apply, heal) in cases(cluster.nodes).items():
                    results[name] = asyncio.run(
                        measure_case(ctx, apply, heal, args.repeat, lambda: target.wait_ready(30))
                    )
            finally:
                target.teardown()
    print(f"nemesis overhead on 5 docker nodes, median of {args.repeat} (target <= {TARGET_S} s)")
    print(
        f"{'nemesis':<18} {'apply s':>8} {'ratio':>6} {'heal s':>8} {'ratio':>6} "
        f"{'apply step':>10} {'heal step':>10}"
    )
    worst = 0.0
    for name, r in results.items():
        a, h = statistics.median(r["apply"]), statistics.median(r["heal"])
        worst = max(worst, a / TARGET_S, h / TARGET_S)
        print(
            f"{name:<18} {a:8.3f} {a / TARGET_S:6.2f} {h:8.3f} {h / TARGET_S:6.2f} "
            f"{statistics.median(r['apply_step']):10.3f} {statistics.median(r['heal_step']):10.3f}"
        )
    print(f"worst ratio to target: {worst:.2f} ({'met' if worst <= 1 else 'MISSED'})")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
