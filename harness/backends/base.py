"""What a backend is: where a run's nodes live and what that place allows.

Every difference between docker, local, ssh and sim is a method here, so the orchestrator
(harness.run), the command line and the nightly matrix hold no list of backends and no switch
on a backend's name: they ask the registry (harness.backends) for the one they were given.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contract.target import Target
from harness.backends.host_surface import HostSurface
from harness.cluster_spec import Cluster, ClusterSpec, node_names
from harness.options import RunOptions
from harness.reaper import RunGuard
from nemesis import NemesisContext, heal_all, run_schedule
from nemesis.context import NemesisRecorder
from nemesis.schedule import NemesisStep

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost


@dataclass(frozen=True)
class RunClock:
    """The history's clock: its zero, the wall time run.json names as the start, the event
    clock (monotonic ns), and whether appends are fsynced while the run goes."""

    start_ns: int
    start_wall_ms: int
    now_ns: Callable[[], int]
    fsync_while_running: bool = True


class BackendOptionsError(Exception):
    """Run options this backend refuses: one line naming the flag or file (exit 254)."""


class FaultPlayer(Protocol):
    """Plays a fault schedule beside the clients, then undoes whatever is still in force."""

    async def play(
        self, schedule: list[NemesisStep], recorder: NemesisRecorder, stop: asyncio.Event
    ) -> None: ...

    async def heal(self, recorder: NemesisRecorder) -> None: ...


class Backend(Protocol):
    """One place nodes run. `provision` appends what undoes it to `cleanups` (run in reverse
    whatever happens), so a half-made cluster is torn down as a whole one is. `hash_seed`:
    the PYTHONHASHSEED a run needs (a set's order decides a simulated run), else None;
    `samples_status`: whether the monitor samples the nodes (it reads the host's clocks);
    `stats_file`: where in the run directory the backend's own statistics go, if anywhere;
    `virtual_time`: its runs take virtual seconds (a seed replays one exactly; a timing that
    only real time shows cannot be missed there)."""

    name: str
    hash_seed: str | None
    virtual_time: bool
    samples_status: bool
    stats_file: str | None

    def available(self) -> bool:
        """Whether `auto` may pick it on this machine."""
        ...

    def node_layout(self, opts: RunOptions, hosts: Sequence[SshHost] | None) -> list[str]:
        """The run's node names (ProvisionError when they cannot be known); `hosts`: the
        nodes file as the run read it, if one was named."""
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

    def target_for(self, target: Target) -> Target:
        """The target as it runs here (sim: the same node code, in this process)."""
        ...

    def clock(self) -> RunClock:
        """The history's clock, read once as the run starts."""
        ...

    def fault_player(self, cluster: Cluster, target: Target, config: dict[str, Any]) -> FaultPlayer:
        """What plays the fault schedule on this backend's cluster: the one NemesisPlayer,
        acting through this backend's fault surface (`contract.fault_surface`)."""
        ...

    def run_loop(self, work: Coroutine[Any, Any, None]) -> tuple[str | None, dict[str, Any]]:
        """Run the cluster part of a run on this backend's event loop: the name of the signal
        that stopped it (or None), and the loop's statistics."""
        ...


def check_voters(opts: RunOptions) -> None:
    """A counted cluster (not one from a nodes file) cannot have more voters than nodes."""
    if opts.voters > opts.nodes:
        raise BackendOptionsError(f"--voters: {opts.voters} voters but only {opts.nodes} nodes")


def counted_nodes(opts: RunOptions) -> list[str]:
    return node_names(opts.nodes)


class HostBackend:
    """What the backends of real hosts share: asyncio's loop with the run's signal handling,
    the controller's monotonic clock, and the target as given."""

    hash_seed: str | None = None
    virtual_time = False
    samples_status = True
    stats_file: str | None = None

    def target_for(self, target: Target) -> Target:
        return target

    def clock(self) -> RunClock:
        return RunClock(time.monotonic_ns(), time.time_ns() // 1_000_000, time.monotonic_ns)

    def fault_player(self, cluster: Cluster, target: Target, config: dict[str, Any]) -> FaultPlayer:
        surface = HostSurface(cluster, target, cluster.run_id)
        return NemesisPlayer(NemesisContext(cluster, target, surface, config))

    def run_loop(self, work: Coroutine[Any, Any, None]) -> tuple[str | None, dict[str, Any]]:
        return asyncio.run(own_signals(work)), {}


@dataclass(frozen=True)
class NemesisPlayer:
    """The nemeses of nemesis.registry, played by nemesis.runner on every backend; they act
    through the context's fault surface. `settle`: what the heal awaits once everything is
    undone (the simulator waits for its cluster to be ready again), if anything."""

    ctx: NemesisContext
    settle: Callable[[], Awaitable[None]] | None = None

    async def play(
        self, schedule: list[NemesisStep], recorder: NemesisRecorder, stop: asyncio.Event
    ) -> None:
        await run_schedule(schedule, self.ctx, recorder, stop)

    async def heal(self, recorder: NemesisRecorder) -> None:
        await heal_all(self.ctx, recorder)
        if self.settle is not None:
            await self.settle()


async def own_signals(work: Coroutine[Any, Any, None], *, via_loop: bool = True) -> str | None:
    """Run work with SIGINT, SIGTERM and SIGHUP cancelling it (on the main thread, where
    signals arrive); the name of the signal that did, or None. A signal must not raise out of
    the event loop's own code: the loop would close with the teardown half done. `via_loop`:
    the loop's own signal handling (it wakes a loop waiting in select); a loop that never
    polls (the SimLoop) gets a plain handler that cancels, as asyncio.Runner's SIGINT does."""
    if threading.current_thread() is not threading.main_thread():
        await work
        return None
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None  # run by asyncio.run
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        me.cancel()

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        if via_loop:
            loop.add_signal_handler(sig, on_signal, sig)
        else:
            signal.signal(sig, lambda signum, _frame: on_signal(signal.Signals(signum)))
    try:
        await work
    except asyncio.CancelledError:
        if not received:
            raise
        me.uncancel()
    finally:
        for sig in sigs:
            if via_loop:
                loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig])
    return received[0] if received else None
