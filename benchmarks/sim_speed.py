"""Simulation speed: wall time against virtual time of a 5-node, 60 s baseline with every
nemesis (scenarios/baseline.toml), and the simulator's events per second.

    .venv/bin/python benchmarks/sim_speed.py [--scenario scenarios/baseline.toml] [--seed 1]
        [--time-limit 60] [--repeat 1]

Target: virtual/wall >= 10x on this machine (moonshot 100x). Also prints virtual/CPU, which
a busy machine does not distort. The run is not analyzed (that is the checker's cost).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from harness.run import RunOptions, run_test
from workloads.scenario import load_run_options

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default=str(REPO / "scenarios" / "baseline.toml"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    fields = load_run_options(Path(args.scenario))
    allowed = {f.name for f in dataclasses.fields(RunOptions)}
    base = RunOptions(**{k: v for k, v in fields.items() if k in allowed})
    print(f"{args.scenario}: {base.nodes} nodes, nemesis {', '.join(base.nemesis) or 'none'}")
    worst = None
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as store:
        for i in range(args.repeat):
            opts = dataclasses.replace(
                base,
                backend="sim",
                seed=args.seed + i,
                time_limit_s=args.time_limit,
                store=Path(store),
                test_name="sim-speed",
            )
            out = run_test(dataclasses.replace(opts, no_analyze=True))
            stats = out.run_dir / "sim.json"
            s = json.loads(stats.read_text()) if stats.is_file() else {}
            if out.exit_code != 0 or not s:
                print(f"seed {opts.seed}: run failed (exit {out.exit_code})")
                return 2
            ratio = s["virtual_s"] / s["wall_s"]
            worst = ratio if worst is None else min(worst, ratio)
            print(
                f"seed {opts.seed}: virtual {s['virtual_s']:.1f} s, wall {s['wall_s']:.2f} s"
                f" (x{ratio:.1f}), CPU {s['cpu_s']:.2f} s (x{s['virtual_s'] / s['cpu_s']:.1f}),"
                f" {s['events']} events = {s['events'] / s['wall_s']:,.0f} events/s wall,"
                f" {s['clients'].get('ok', 0)} ok ops, {s['messages']} messages"
            )
    print(f"worst virtual/wall: x{worst:.1f} (target >= 10)")
    return 0 if worst is not None and worst >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
