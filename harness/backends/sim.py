"""`--backend sim`: the schemasync cluster simulated in this process on virtual time
(docs/simulation.md), replayable bit for bit from the seed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.backends.base import (
    BackendOptionsError,
    Outcome,
    check_no_nodes_file,
    check_voters,
)
from harness.cluster_spec import Cluster, ClusterSpec, ProvisionError, node_names
from harness.options import RunOptions
from harness.reaper import NoGuard, RunGuard

SIM_TARGETS = ("schemasync",)  # the node code the simulator runs unchanged


class SimBackend:
    name = "sim"

    def available(self) -> bool:
        return False  # asked for by name only: auto means real nodes

    def node_layout(self, opts: RunOptions) -> list[str]:
        return node_names(opts.nodes)

    def check_options(self, opts: RunOptions) -> None:
        check_voters(opts)
        check_no_nodes_file(opts)
        if opts.target not in SIM_TARGETS:
            raise BackendOptionsError(
                f"--target: {opts.target!r} does not run in simulation "
                f"(--backend sim runs {', '.join(SIM_TARGETS)})"
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
        raise ProvisionError("--backend sim: a simulated cluster lives inside its own run")

    def run_in_process(self, opts: RunOptions) -> Outcome:
        from sim.run import run_sim  # the simulator loads only for a simulated run

        return run_sim(replace(opts, store=opts.store.resolve()))
