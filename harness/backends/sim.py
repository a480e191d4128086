"""`--backend sim`: the schemasync cluster simulated in this process on virtual time
(docs/simulation.md), replayable bit for bit from the seed.

The run is the orchestrator's (harness.run), like any other backend's; what differs is here:
the machines are a `SimWorld`, the target acts on it in process (sim.target), the loop is the
deterministic SimLoop, and the history's clock is its virtual time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.target import Target
from harness.backends.base import (
    BackendOptionsError,
    FaultPlayer,
    NemesisPlayer,
    RunClock,
    check_voters,
    own_signals,
)
from harness.cluster_spec import Cluster, ClusterSpec, node_names, spec_layout
from harness.options import RunOptions
from harness.reaper import NoGuard, RunGuard
from nemesis import NemesisContext
from sim.clocks import EPOCH_US
from sim.cluster import CLIENT_PORT, METASTORE_PORT, PEER_PORT, SimWorld
from sim.loop import run_simulation
from sim.surface import SimSurface
from sim.target import SimClusterView, SimSchemaSyncTarget

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost

READY_TIMEOUT_S = 30.0
HASH_SEED = "0"  # sets of strings iterate in hash order: a fixed seed fixes the run


class SimBackend:
    name = "sim"
    hash_seed: str | None = HASH_SEED
    virtual_time = True
    samples_status = False  # the monitor reads the host's clocks: the history would vary
    stats_file: str | None = "sim.json"

    def available(self) -> bool:
        return False  # asked for by name only: auto means real nodes

    def node_layout(self, opts: RunOptions, hosts: Sequence[SshHost] | None) -> list[str]:
        return node_names(opts.nodes)

    def check_options(self, opts: RunOptions) -> None:
        check_voters(opts)
        if opts.target != SimSchemaSyncTarget.name:
            raise BackendOptionsError(
                f"--target: {opts.target!r} does not run in simulation "
                f"(--backend sim runs {SimSchemaSyncTarget.name})"
            )

    def unavailable_kinds(self) -> frozenset[str]:
        return frozenset()  # every fault acts on the simulated network, clocks and processes

    def node_image(self, target: object) -> str | None:
        return None

    def guard(self, spec: ClusterSpec, run_id: str, work_dir: Path) -> RunGuard:
        return NoGuard()  # nothing outlives the process

    def provision(
        self, spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
    ) -> Cluster:
        """The simulated machines, on the running SimLoop (nothing to tear down)."""
        layout = spec_layout(spec)
        nodes, voters, learners = list(layout.nodes), list(layout.voters), list(layout.learners)
        return SimClusterView(
            nodes=nodes,
            voters=voters,
            learners=learners,
            remotes={},
            backend=self.name,
            run_id=run_id,
            ports={
                "client_port": CLIENT_PORT,
                "metastore_port": METASTORE_PORT,
                "peer_port": PEER_PORT,
            },
            world=SimWorld(spec.seed, asyncio.get_running_loop()),  # type: ignore[arg-type]
        )

    def target_for(self, target: Target) -> Target:
        if target.name != SimSchemaSyncTarget.name:
            raise BackendOptionsError(f"--target: {target.name!r} does not run in simulation")
        return SimSchemaSyncTarget()

    def clock(self) -> RunClock:
        return RunClock(0, EPOCH_US // 1000, strictly_increasing_ns(), fsync_while_running=False)

    def fault_player(self, cluster: Cluster, target: Target, config: dict[str, Any]) -> FaultPlayer:
        """The one NemesisPlayer on the simulated world's surface; the controller's clock is
        virtual, and once healed the cluster is awaited ready (within the heal's 120 s)."""
        if not isinstance(target, SimSchemaSyncTarget):
            raise BackendOptionsError("--backend sim: faults act on a simulated target only")
        sim = target.sim
        ctx = NemesisContext(
            cluster, target, SimSurface(sim), config, wall_s=sim.world.clocks.controller_s
        )
        return NemesisPlayer(ctx, settle=lambda: sim.wait_ready(READY_TIMEOUT_S * 3))

    def run_loop(self, work: Coroutine[Any, Any, None]) -> tuple[str | None, dict[str, Any]]:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        stopped_by, loop = run_simulation(own_signals(work, via_loop=False))
        return stopped_by, {
            "wall_s": round(time.perf_counter() - wall0, 3),
            "cpu_s": round(time.process_time() - cpu0, 3),
            "virtual_s": round(loop.time(), 3),
            "events": loop.steps,
        }


def strictly_increasing_ns() -> Callable[[], int]:
    """The recorder's clock: virtual ns, one more than the last reading when virtual time has
    not moved. On the controller's real monotonic clock every event takes some time; in sim
    none passes, so a probe invoked as a DDL's ack completes would share the ack's ns and read
    as concurrent with it, hiding a stale answer from read-your-DDL (which judges invokes
    strictly after the ack, anomalies.md)."""
    last = -1
    loop: asyncio.AbstractEventLoop | None = None

    def now() -> int:
        nonlocal last, loop
        if loop is None:
            loop = asyncio.get_running_loop()
        last = max(round(loop.time() * 1e9), last + 1)
        return last

    return now
