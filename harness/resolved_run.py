"""A run resolved once, as Jepsen resolves a test into one map of values: the backend and the
target looked up, the target's settings checked, the nodes file read, the nodes laid out and
the fault schedule built, all here and all before anything starts.

The command line, the nightly matrix and the sweep build a `ResolvedRun` where they take a run
in (refusing bad input then, with the flag or key named), and every layer below reads its
fields: none looks a name up again or reads a file again. A run re-executed in a child process
(`harness.reexec`) is resolved again there, from the same options: objects do not cross.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contract.config_error import ConfigError
from contract.target import Target
from harness.backends import Backend, resolve_backend
from harness.cluster_spec import ClusterSpec, NodeLayout, split_roles
from harness.options import RunOptions
from harness.remote_ssh import SshHost, load_nodes_file
from harness.target_settings import effective_config, own_settings, timing_bounds
from nemesis import build_schedule
from nemesis.schedule import NemesisStep
from targets.registry import load_target
from workloads import WORKLOADS, Generator, build_generator


class UnresolvedRun(ValueError):
    """A run option that names nothing this run can use (an unknown target or workload, a
    fault schedule that cannot be built, an unreadable nodes file): its RunOptions field and
    why. Beside it, resolution raises the errors that already name their flag or key: a
    target's SettingsError, the backends' ProvisionError and BackendOptionsError."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


@dataclass(frozen=True)
class ResolvedRun:
    """Everything one run is, resolved: what the orchestrator, the backend and run.json read.
    Run it once: its target is the one instance that run sets up and tears down."""

    opts: RunOptions  # as asked, with the backend's own name, the store absolute, and (for a
    # stored run) only the settings its target has
    backend: Backend
    backend_why: str  # how the backend was chosen ("backend docker (auto: docker available)")
    unavailable_kinds: frozenset[str]  # fault kinds the backend cannot inject on this machine
    target: Target  # as it runs on the backend (sim: in this process)
    settings: Mapping[str, Any]  # the target's settings checked, its defaults filled in
    max_skew_ms: int  # CSmax and DD the clock and delay nemeses work against
    delay_ms: int
    hosts: tuple[SshHost, ...] | None  # the nodes file, read (None: no nodes file)
    nodes: tuple[str, ...]
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    schedule: tuple[NemesisStep, ...]  # empty without nemeses

    def generator(self) -> Generator:
        """A fresh generator of the run's workload (seeded: the same ops every time), its
        clients spread over the run's nodes unless the workload options say otherwise."""
        options = dict(self.opts.workload_options)
        options.setdefault("nodes", list(self.nodes))
        return build_generator(self.opts.workload, self.opts.seed, self.opts.concurrency, options)

    def cluster_spec(self, image: str | None) -> ClusterSpec:
        """What the backend provisions, its nodes and roles as resolved here; `image` is
        known only on the loop (it may be built)."""
        opts = self.opts
        return ClusterSpec(
            backend=self.backend.name,
            nodes=len(self.nodes),
            voters=len(self.voters),
            nodes_file=opts.nodes_file,
            hosts=self.hosts,
            layout=NodeLayout(self.nodes, self.voters, self.learners),
            image=image,
            local_base=opts.local_base,
            ready_timeout_s=opts.ready_timeout_s,
            seed=opts.seed,
        )

    def fault_config(self) -> dict[str, Any]:
        """What the nemeses are configured with: the scenario's options, then the timing
        bounds, the interval, the kinds and the seed."""
        opts = self.opts
        return {
            **opts.nemesis_options,
            "max_skew_ms": self.max_skew_ms,
            "delay_ms": self.delay_ms,
            "interval_s": opts.nemesis_interval_s,
            "kinds": list(opts.nemesis),
            "seed": opts.seed,
        }


def resolve_run(
    opts: RunOptions, *, default_nemesis: bool = False, stored: bool = False
) -> ResolvedRun:
    """`opts` resolved. `default_nemesis`: the nemesis list is the default one, so the kinds
    the backend cannot inject here are dropped from it rather than refused; `stored`: the
    options come from a stored run.json (`repro`), so the target keeps only its own settings.
    Raises UnresolvedRun, SettingsError, ProvisionError or BackendOptionsError."""
    backend, why = resolve_backend(opts.backend)
    unavailable = backend.unavailable_kinds()
    if default_nemesis:
        opts = replace(opts, nemesis=tuple(k for k in opts.nemesis if k not in unavailable))
    target = _target(opts.target)
    config = own_settings(target, opts.target_config) if stored else dict(opts.target_config)
    settings = effective_config(target, config)
    max_skew_ms, delay_ms = timing_bounds(target, config)
    if opts.workload not in WORKLOADS:
        why_not = f"unknown workload {opts.workload!r} (known: {', '.join(WORKLOADS)})"
        raise UnresolvedRun("workload", why_not)
    hosts = _hosts(opts.nodes_file)
    nodes = backend.node_layout(opts, hosts)
    voters, learners = split_roles(nodes, min(opts.voters, len(nodes)))
    # absolute: local nodes run in their own directory under the store, and cd there first
    opts = replace(opts, backend=backend.name, store=opts.store.resolve(), target_config=config)
    return ResolvedRun(
        opts=opts,
        backend=backend,
        backend_why=why,
        unavailable_kinds=unavailable,
        target=backend.target_for(target),
        settings=settings,
        max_skew_ms=max_skew_ms,
        delay_ms=delay_ms,
        hosts=hosts,
        nodes=tuple(nodes),
        voters=tuple(voters),
        learners=tuple(learners),
        schedule=_schedule(opts, nodes, voters, learners, max_skew_ms, delay_ms),
    )


def _target(name: str) -> Target:
    """The registry's target of that name: it states its settings and timing bounds."""
    try:
        return load_target(name)
    except ValueError as e:
        raise UnresolvedRun("target", str(e)) from e


def _hosts(nodes_file: Path | None) -> tuple[SshHost, ...] | None:
    """The nodes file, read once when one is named (whatever the backend: a file named on
    the command line must be a good one)."""
    if nodes_file is None:
        return None
    try:
        return tuple(load_nodes_file(nodes_file))
    except ConfigError as e:
        raise UnresolvedRun("nodes_file", str(e)) from e


def _schedule(
    opts: RunOptions,
    nodes: list[str],
    voters: list[str],
    learners: list[str],
    max_skew_ms: int,
    delay_ms: int,
) -> tuple[NemesisStep, ...]:
    """The run's fault schedule, pure data from the seed (empty without nemeses)."""
    if not opts.nemesis:
        return ()
    try:
        steps = build_schedule(
            list(opts.nemesis),
            opts.nemesis_interval_s,
            opts.time_limit_s,
            opts.seed,
            nodes,
            voters,
            learners,
            max_skew_s=max_skew_ms / 1000.0,
            options={"delay_ms": delay_ms, **opts.nemesis_options},
        )
    except (ValueError, KeyError) as e:
        raise UnresolvedRun("nemesis", str(e)) from e
    return tuple(steps)
