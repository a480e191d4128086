"""Schedule build time: a 7-day soak at a 1 s nemesis interval (604800 steps, every kind of
`--nemesis all`, 5 nodes of which 2 learners), built as `run` builds it before anything starts.

    .venv/bin/python benchmarks/schedule_build.py [--days 7] [--interval 1] [--repeat 3]

Target (issue 50): under 1 s. Prints the best of `--repeat` builds in wall and CPU time (CPU
is what a busy machine does not distort), and the kinds' own draws (nemesis/<kind>.py `draw`,
the same number of calls outside the schedule): the floor the schedule's loop stands on.
"""

from __future__ import annotations

import argparse
import random
import time

from nemesis.fault import FaultPlan
from nemesis.registry import NEMESES
from nemesis.schedule import KINDS, build_schedule

TARGET_S = 1.0
NODES = ["n1", "n2", "n3", "n4", "n5"]
VOTERS, LEARNERS = NODES[:3], NODES[3:]


def build_once(limit_s: float, interval_s: float) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    steps = build_schedule(["all"], interval_s, limit_s, 1, NODES, VOTERS, LEARNERS)
    return time.perf_counter() - wall, time.process_time() - cpu, len(steps)


def draws_alone(faults: int, interval_s: float) -> float:
    """CPU seconds of `faults` draws, the kinds in turn: what no schedule can do without."""
    plan = FaultPlan(NODES, LEARNERS, 0.5, interval_s, {"delay_ms": 500})
    rng = random.Random(1)
    draws = [NEMESES[kind].draw for kind in KINDS]
    cpu = time.process_time()
    for i in range(faults):
        draws[i % len(draws)](rng, plan, i // len(draws))
    return time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    limit_s = args.days * 86400
    runs = [build_once(limit_s, args.interval) for _ in range(max(1, args.repeat))]
    wall, cpu, steps = min(runs)
    floor = draws_alone(steps // 2, args.interval)
    print(
        f"{args.days:g} days at {args.interval:g} s: {steps} steps; best of {len(runs)}:"
        f" wall {wall:.2f} s, CPU {cpu:.2f} s ({steps / cpu:,.0f} steps/s);"
        f" the kinds' draws alone {floor:.2f} s CPU ({floor / cpu:.0%} of the build)"
    )
    print(f"target {TARGET_S:g} s: CPU/target = {cpu / TARGET_S:.2f}")
    return 0 if cpu <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
