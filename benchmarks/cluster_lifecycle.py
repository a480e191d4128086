"""Cluster lifecycle benchmark: node image build from nothing and from cache; a 5-node cluster
(3 voters, 2 learners) from nothing to ready and its teardown, on docker and on local.

Targets (issue 4): cached build <= 5 s, 5 docker nodes ready <= 20 s, teardown <= 5 s. Prints
each measurement with its ratio to the target and docker/local ratios.

    .venv/bin/python benchmarks/cluster_lifecycle.py [--skip-scratch] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.backends import docker_answers, provision
from harness.cluster import ClusterSpec
from harness.images import ensure_images
from targets.schemasync import SchemaSyncTarget

TARGETS_S = {"cached build": 5.0, "docker ready": 20.0, "docker teardown": 5.0}


def lifecycle(backend: str, image: str | None, run_id: str) -> tuple[float, float]:
    """Seconds from nothing to a ready cluster, and from ready to nothing left."""
    with tempfile.TemporaryDirectory(prefix="schemachaos-bench-") as tmp:
        spec = ClusterSpec(backend=backend, nodes=5, voters=3, image=image, local_base="127.0.8.10")
        started = time.monotonic()
        cm = provision(spec, run_id, Path(tmp) / ".tmp")
        cluster = cm.__enter__()
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {})
            target.start_all()
            target.wait_ready(60)
            ready = time.monotonic() - started
        except BaseException:
            target.teardown()
            cm.__exit__(*sys.exc_info())
            raise
        down_started = time.monotonic()
        target.teardown()
        cm.__exit__(None, None, None)
        return ready, time.monotonic() - down_started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scratch", action="store_true", help="no build from nothing")
    parser.add_argument("--repeat", type=int, default=3, help="lifecycles per backend (3)")
    args = parser.parse_args()
    results: dict[str, float] = {}
    have_docker = docker_answers()
    image = None
    if have_docker:
        if not args.skip_scratch:
            t = time.monotonic()
            ensure_images(force=True)
            results["scratch build"] = time.monotonic() - t
        t = time.monotonic()
        image = ensure_images().node
        results["cached build"] = time.monotonic() - t
    for backend in (["docker"] if have_docker else []) + ["local"]:
        ready, down = [], []
        for i in range(args.repeat):
            r, d = lifecycle(backend, image, f"bench-{backend}-{int(time.time())}-{i}")
            ready.append(r)
            down.append(d)
        results[f"{backend} ready"] = statistics.median(ready)
        results[f"{backend} teardown"] = statistics.median(down)
    print(f"{'measure':<18}{'seconds':>9}{'target':>9}{'ratio':>8}")
    for name, secs in results.items():
        target = TARGETS_S.get(name)
        ratio = f"{secs / target:.2f}" if target else "-"
        print(f"{name:<18}{secs:>9.2f}{(target or 0):>9.1f}{ratio:>8}")
    if "docker ready" in results:
        print(f"docker/local ready ratio: {results['docker ready'] / results['local ready']:.2f}")
        print(
            f"docker/local teardown ratio: "
            f"{results['docker teardown'] / max(results['local teardown'], 1e-3):.2f}"
        )
    missed = [n for n, t in TARGETS_S.items() if n in results and results[n] > t]
    print("targets met" if not missed else f"targets missed: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
