"""What a backend is: where a run's nodes live and what that place allows.

Every difference between docker, local, ssh and sim is a method here, so the orchestrator
(harness.run), the command line and the nightly matrix hold no list of backends and no switch
on a backend's name: they ask the registry (harness.backends) for the one they were given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.cluster_spec import Cluster, ClusterSpec, node_names
from harness.options import RunOptions
from harness.reaper import RunGuard


class BackendOptionsError(Exception):
    """Run options this backend refuses: one line naming the flag or file (exit 254)."""


class Backend(Protocol):
    """One place nodes run. `provision` appends what undoes it to `cleanups` (run in reverse
    whatever happens), so a half-made cluster is torn down as a whole one is."""

    name: str

    def available(self) -> bool:
        """Whether `auto` may pick it on this machine."""
        ...

    def node_layout(self, opts: RunOptions) -> list[str]:
        """The run's node names (ProvisionError when they cannot be known)."""
        ...

    def check_options(self, opts: RunOptions) -> None:
        """Refuse, before anything starts, what this backend cannot do (BackendOptionsError)."""
        ...

    def unavailable_kinds(self) -> frozenset[str]:
        """Fault kinds this machine cannot inject here (the default nemesis list drops them)."""
        ...

    def node_image(self, target: object) -> str | None:
        """The image the nodes boot from, when the backend boots images (blocking)."""
        ...

    def guard(self, spec: ClusterSpec, run_id: str, work_dir: Path) -> RunGuard:
        """What removes the run's nodes if the controller dies, started before any node."""
        ...

    def provision(
        self, spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
    ) -> Cluster:
        """The nodes, up and reachable (ProvisionError naming the cause)."""
        ...


def check_voters(opts: RunOptions) -> None:
    """A counted cluster (not one from a nodes file) cannot have more voters than nodes."""
    if opts.voters > opts.nodes:
        raise BackendOptionsError(f"--voters: {opts.voters} voters but only {opts.nodes} nodes")


def check_no_nodes_file(opts: RunOptions) -> None:
    """A nodes file named but missing is refused even where the backend does not read it."""
    if opts.nodes_file is not None and not opts.nodes_file.is_file():
        raise BackendOptionsError(f"--nodes-file: file not found: {opts.nodes_file}")


def counted_nodes(opts: RunOptions) -> list[str]:
    return node_names(opts.nodes)


class Outcome(Protocol):
    """What a finished run reports (harness.run.RunOutcome is one)."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def exit_code(self) -> int: ...

    @property
    def faults_run(self) -> dict[str, int]: ...


@runtime_checkable
class RunsInProcess(Protocol):
    """A backend whose whole run happens in this process (sim: on virtual time), writing the
    same run directory the orchestrator does."""

    def run_in_process(self, opts: RunOptions) -> Outcome: ...
