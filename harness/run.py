"""One chaos test end to end: run.json, cluster, target, clients + nemesis, final reads, verdict.

The order is docs/interfaces.md "Run orchestration". Teardown always runs (exception, Ctrl-C,
SIGTERM); a run that could not be set up, or was interrupted, has verdict `unknown`, never a
pass. Its exit code is 2 (unknown), or 130 when Ctrl-C (SIGINT) stopped it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.exit_codes import EXIT_INTERRUPTED, EXIT_UNKNOWN
from contract.rundir import RESULTS
from contract.target import (
    PER_NODE_COPIES,
    AsyncReadiness,
    StartsAll,
    StatsReporter,
    Target,
    TargetSetupError,
)
from harness.backends import BACKENDS, Backend, provision
from harness.backends.base import BackendOptionsError, FaultPlayer, RunClock
from harness.cluster import (
    Cluster,
    ProvisionError,
    Terminated,
    ignore_signals,
    teardown_on_signals,
)
from harness.monitor import ClusterMonitor
from harness.options import RunOptions
from harness.provenance import distribution_version, provenance, target_version
from harness.remote import in_thread, run_to_end
from harness.resolved_run import ResolvedRun, UnresolvedRun, resolve_run
from harness.store import (
    RunDir,
    controller_logging,
    detach_logging,
    new_run_dir,
    write_json,
    write_jsonl,
)
from harness.target_settings import run_json_config
from nemesis import schedule_to_json
from workloads.final import final_reads, tables_and_indexes
from workloads.history import HistoryRecorder
from workloads.runner import run_clients

log = logging.getLogger("schemachaos.run")
# A stopped run's salvage (heal, then the catalog log) is bounded: it delays the teardown
SALVAGE_HEAL_S = 30.0
SALVAGE_CATALOG_S = 20.0
HARNESS_VERSION = "0.1.0"  # when not installed (pyproject's version otherwise)


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    exit_code: int
    faults_run: dict[str, int] = field(default_factory=dict)  # fault kind -> times started


@dataclass(frozen=True)
class ProgressNote:
    """A moment worth a line of its own in CI output: a phase begins, a fault starts or ends."""

    at: float  # time.monotonic()
    what: str  # "phase" or the nemesis event's f (start-partition, heal-all, ...)
    text: str  # the phase's name, or the fault's kind
    value: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunProgress:
    """What the displays show; updated from the clients' progress callback and the nemesis
    events. `faults` is what is in force now, `faults_run` every kind that ran (the final
    summary names them: heal-all has emptied `faults` by then), `notes` the line-per-event
    log a display without a terminal prints as it grows."""

    phase: str = "starting"
    started: float = field(default_factory=time.monotonic)
    time_limit_s: float = 0.0
    counts: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults_run: dict[str, int] = field(default_factory=dict)
    notes: list[ProgressNote] = field(default_factory=list)
    backend: str = ""
    run_dir: str = ""
    created: float = field(default_factory=time.monotonic)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.notes.append(ProgressNote(time.monotonic(), "phase", phase))
        log.info("phase: %s", phase)

    def fault_event(self, f: str, value: dict[str, Any]) -> None:
        """A nemesis event: the faults in force (by fault id, a kind may overlap itself), the
        kinds that ran, and a note."""
        kind = str(value.get("kind") or (f.split("-", 1)[1] if "-" in f else f))
        key = f"{kind}#{value['fault']}" if "fault" in value else kind
        if f.startswith("start-"):
            self.faults[key] = {"kind": kind, **value}
            self.faults_run[kind] = self.faults_run.get(kind, 0) + 1
        elif f == "heal-all":
            self.faults.clear()
        elif f.startswith(("stop-", "heal-")):
            self.faults.pop(key, None)
        self.notes.append(ProgressNote(time.monotonic(), f, kind, value))


ProgressSink = Callable[[RunProgress], None]


def run_json(resolved: ResolvedRun, run: RunDir, start_wall_ms: int) -> dict[str, Any]:
    """run.json of history.md: how this run was made, with the nemesis schedule as data, the
    scenario's `expect` (reports judge by it as --gate does) and the provenance."""
    opts, target = resolved.opts, resolved.target
    installed = distribution_version("schemachaos")
    version = HARNESS_VERSION if installed == "unknown" else installed
    return {
        "test": run.test,
        "run_id": run.run_id,
        "seed": opts.seed,
        "backend": resolved.backend.name,
        "target": opts.target,
        "clock": target.clock,
        "capabilities": sorted(target.capabilities),  # e.g. per-node-copies: replica-divergence
        "nodes": list(resolved.nodes),
        "voters": list(resolved.voters),
        "learners": list(resolved.learners),
        "config": run_json_config(resolved.settings),
        "nemesis": {
            "kinds": list(opts.nemesis),
            "interval_s": opts.nemesis_interval_s,
            "schedule": schedule_to_json(list(resolved.schedule)),
            "options": opts.nemesis_options,
        },
        "workload": {
            "name": opts.workload,
            "concurrency": opts.concurrency,
            "time_limit_s": opts.time_limit_s,
            "options": opts.workload_options,
            "scenario": str(opts.scenario) if opts.scenario else None,
        },
        "start_wall_ms": start_wall_ms,
        "harness_version": version,
        "provenance": provenance(opts.target, version),
        "expect": list(opts.expect),
        "allow": dict(opts.allow),
        "options": {
            "nodes": opts.nodes,
            "voters": opts.voters,
            "nemesis_interval_s": opts.nemesis_interval_s,
            "nodes_file": str(opts.nodes_file) if opts.nodes_file else None,
            "local_base": opts.local_base,
            "ready_timeout_s": opts.ready_timeout_s,
        },
    }


def unknown_results(errors: list[str]) -> dict[str, Any]:
    return {
        "valid": "unknown",
        "anomalies": [],
        "not_applicable": [],
        "stats": {},
        "errors": errors,
    }


def run_test(given: ResolvedRun | RunOptions, progress: ProgressSink | None = None) -> RunOutcome:
    """Run one test; always returns (never raises for setup or run failures). `given` is a
    run its caller resolved (refusing bad input first), or options resolved here: options
    that cannot be are a run whose setup failed. Exit code 130 when Ctrl-C stopped it, so the
    caller can stop too (a nightly matrix must not go on)."""
    opts = given.opts if isinstance(given, ResolvedRun) else given
    own = given.backend if isinstance(given, ResolvedRun) else BACKENDS.get(opts.backend)
    if own is not None and own.hash_seed not in (None, os.environ.get("PYTHONHASHSEED")):
        from harness.reexec import run_in_child  # a run whose sets must iterate in one order

        child = run_in_child(opts, own.hash_seed)
        return RunOutcome(child.run_dir, child.exit_code, child.faults_run)
    state = RunProgress(time_limit_s=opts.time_limit_s)
    notify = (lambda: progress(state)) if progress else (lambda: None)
    run = new_run_dir(opts.store, opts.test_name or opts.workload)
    state.run_dir = str(run.path)
    handler = controller_logging(run)
    errors: list[str] = []
    interrupted: str | None = None
    by_ctrl_c = False
    exit_code = EXIT_UNKNOWN
    recorder: ObservedRecorder | None = None
    try:
        with teardown_on_signals():
            try:
                resolved = given if isinstance(given, ResolvedRun) else resolve_run(given)
                state.backend = resolved.backend.name
                log.info(resolved.backend_why)
                clock = resolved.backend.clock()
                write_json(run.run_json, run_json(resolved, run, clock.start_wall_ms))
                recorder = ObservedRecorder(run.history, clock.start_ns, state, notify, clock)
                _run_cluster(RunParts(resolved, run, recorder, state, notify))
            except KeyboardInterrupt as e:
                interrupted = str(e) or "SIGINT"
                raise
            except (
                ProvisionError,
                ImportError,
                TargetSetupError,
                BackendOptionsError,
                UnresolvedRun,
            ) as e:
                errors.append(f"setup failed: {e}")
                log.error("setup failed: %s", e)
            except Exception as e:
                errors.append(f"run failed: {type(e).__name__}: {e}")
                log.error("run failed: %s\n%s", e, traceback.format_exc())
    except KeyboardInterrupt as e:
        by_ctrl_c = not isinstance(e, Terminated)  # SIGTERM/SIGHUP: the run is just unknown
        errors.append(f"interrupted ({interrupted or 'SIGINT'}); the history is a prefix")
        log.warning("interrupted; cluster torn down")
    finally:
        if recorder is not None:
            try:
                recorder.close()
            except Exception as e:
                log.warning("closing history: %s", e)
        try:
            if errors:
                state.set_phase("unknown")
                notify()
                write_json(run.results, unknown_results(errors))
                exit_code = EXIT_INTERRUPTED if by_ctrl_c else EXIT_UNKNOWN
            elif opts.no_analyze:
                state.set_phase("done (not analyzed)")
                notify()
                exit_code = 0
            else:
                exit_code = _analyze(run.path, opts, state, notify)
        finally:
            detach_logging(handler)
    return RunOutcome(run_dir=run.path, exit_code=exit_code, faults_run=dict(state.faults_run))


class ObservedRecorder(HistoryRecorder):
    """The history recorder, also keeping the live display's list of active faults."""

    def __init__(
        self,
        path: Path,
        start_ns: int,
        state: RunProgress,
        notify: Callable[[], None],
        clock: RunClock | None = None,  # the backend's (sim: virtual ns); else monotonic
    ) -> None:
        super().__init__(
            path,
            start_monotonic_ns=start_ns,
            clock_ns=clock.now_ns if clock else time.monotonic_ns,
            fsync_while_running=clock.fsync_while_running if clock else True,
        )
        self._state = state
        self._notify = notify

    def nemesis(self, f: str, value: dict) -> dict:
        event = super().nemesis(f, value)
        self._state.fault_event(f, dict(value or {}))
        self._notify()
        return event


@dataclass(frozen=True)
class RunParts:
    """What the cluster part of a run works with, from provisioning to teardown: the run as
    resolved, and where its record and progress go."""

    resolved: ResolvedRun
    run: RunDir
    recorder: ObservedRecorder
    state: RunProgress
    notify: Callable[[], None]

    @property
    def opts(self) -> RunOptions:
        return self.resolved.opts

    @property
    def backend(self) -> Backend:
        return self.resolved.backend

    @property
    def target(self) -> Target:
        return self.resolved.target


def _run_cluster(p: RunParts) -> None:
    """The cluster part of a run on the backend's event loop, from provisioning to teardown.
    A signal cancels it (teardown still runs) and is raised here as it would be without the
    loop: KeyboardInterrupt for SIGINT, Terminated for SIGTERM and SIGHUP."""
    stopped_by, loop_stats = p.backend.run_loop(_cluster_part(p))
    if p.backend.stats_file is not None:
        stats = {"clients": p.state.counts, "faults_run": p.state.faults_run}
        if isinstance(p.target, StatsReporter):
            stats.update(p.target.run_stats())
        write_json(p.run.path / p.backend.stats_file, {**stats, **loop_stats})
    if stopped_by == "SIGINT":
        raise KeyboardInterrupt("SIGINT")
    if stopped_by is not None:
        raise Terminated(f"signal {stopped_by}")


async def _cluster_part(p: RunParts) -> None:
    run, state, notify = p.run, p.state, p.notify
    spec = p.resolved.cluster_spec(await in_thread(p.backend.node_image, p.target))
    if spec.image is not None:
        _update_provenance(run, "images", {"node": spec.image})
    state.set_phase("provisioning")
    notify()
    provisioned = provision(spec, run.run_id, run.tmp, p.backend)
    cluster = await in_thread(provisioned.__enter__)
    try:
        await _on_cluster(p, cluster)
    except BaseException as e:
        with ignore_signals():
            if not await in_thread(provisioned.__exit__, type(e), e, e.__traceback__):
                raise
    else:
        with ignore_signals():
            await in_thread(provisioned.__exit__, None, None, None)


async def _on_cluster(p: RunParts, cluster: Cluster) -> None:
    opts, run, target, state, notify = p.opts, p.run, p.target, p.state, p.notify
    try:
        state.set_phase("starting nodes")
        notify()
        # the settings as given: the target checks them itself, and a check of its filled-in
        # defaults would judge a default against a DD the run lowered (idle interval > DD/2)
        await in_thread(target.setup, cluster, dict(opts.target_config))
        if isinstance(target, StartsAll):
            await in_thread(target.start_all)
        else:
            for node in cluster.nodes:
                await in_thread(target.start, node)
        state.set_phase("waiting for the cluster")
        notify()
        if isinstance(target, AsyncReadiness):
            await target.wait_ready_async(opts.ready_timeout_s)
        else:
            await in_thread(target.wait_ready, opts.ready_timeout_s)
        version = await in_thread(target_version, target, cluster.nodes[0])
        _update_provenance(run, "target", {"version": version})
        await _exercise(p, cluster)
    finally:
        # a second signal must not skip the teardown: ignored, and the work runs to its end
        with ignore_signals():
            await run_to_end(_collect_and_tear_down(run, cluster, target, state, notify))


async def _collect_and_tear_down(
    run: RunDir, cluster: Cluster, target: Target, state: RunProgress, notify: Callable[[], None]
) -> None:
    state.set_phase("collecting logs")
    notify()
    for node in cluster.nodes:
        try:
            await in_thread(target.collect_logs, node, run.node_dir(node))
        except Exception as e:
            log.warning("logs of %s: %s", node, e)
    state.set_phase("tearing down")
    notify()
    await in_thread(target.teardown)


def _update_provenance(run: RunDir, key: str, fields: dict[str, str]) -> None:
    """Facts known only once the cluster is there (the image tags the backend resolved or
    built, the version a node runs), merged into run.json's provenance after it was written."""
    data = json.loads(run.run_json.read_text())
    data.setdefault("provenance", {}).setdefault(key, {}).update(fields)
    write_json(run.run_json, data)


def _tables_and_indexes(catalog: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the final reads cover: the workload's choice over the newest catalog version."""
    if not catalog:
        return []
    return tables_and_indexes(max(catalog, key=lambda c: c.get("catalog_version", 0)))


async def _exercise(p: RunParts, cluster: Cluster) -> None:
    """Clients and nemesis side by side, then heal, final reads, and the catalog log; a run
    stopped on the way (a signal, a failure) still gets its catalog log (`_salvage_catalog`)."""
    holder: list[FaultPlayer] = []
    try:
        await _exercise_to_end(p, cluster, holder)
    except BaseException:
        with ignore_signals():  # a second signal must not lose what the first one left
            await run_to_end(_salvage_catalog(p, holder[0] if holder else None))
        raise


async def _salvage_catalog(p: RunParts, faults: FaultPlayer | None) -> None:
    """The catalog log of a run stopped before its end, so that `analyze` judges the prefix
    (history.md: an anomaly the events present prove is still reported). The faults in force
    are healed first (bounded), so that a node cut off or paused does not answer a log that
    misses acknowledged versions; a log that cannot be read in time is left missing."""
    if p.run.catalog.exists():
        return
    p.state.set_phase("collecting the catalog log")
    p.notify()
    try:
        if faults is not None:
            async with asyncio.timeout(SALVAGE_HEAL_S):
                await faults.heal(p.recorder)
        async with asyncio.timeout(SALVAGE_CATALOG_S):
            catalog = await p.target.catalog_log()
        write_jsonl(p.run.catalog, catalog)
        log.info("catalog.jsonl of the stopped run: %d versions", len(catalog))
    except Exception as e:
        log.warning("catalog log of the stopped run not collected: %s", e)


async def _exercise_to_end(p: RunParts, cluster: Cluster, holder: list[FaultPlayer]) -> None:
    opts, run, target, recorder, state, notify = (
        p.opts,
        p.run,
        p.target,
        p.recorder,
        p.state,
        p.notify,
    )
    schedule = list(p.resolved.schedule)
    generator = p.resolved.generator()
    faults: FaultPlayer | None = None
    if schedule:
        faults = p.backend.fault_player(cluster, target, p.resolved.fault_config())
        holder.append(faults)

    def on_progress(counts: dict[str, Any]) -> None:
        state.counts = dict(counts)
        notify()

    state.set_phase("running")
    state.started = time.monotonic()
    notify()
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        if p.backend.samples_status:
            # history.md "Monitor samples": each node's status every 250 ms; never fails the run
            tg.create_task(ClusterMonitor(target, cluster.nodes, recorder).run(stop))
        if faults is not None:
            tg.create_task(faults.play(schedule, recorder, stop))
        try:
            summary = await run_clients(
                generator,
                target.client,
                cluster.nodes,
                recorder,
                opts.time_limit_s,
                opts.concurrency,
                on_progress,
            )
            if isinstance(summary, dict):
                state.counts = {**state.counts, **summary}
        finally:
            stop.set()
    if faults is not None:
        state.set_phase("healing")
        notify()
        async with asyncio.timeout(120):
            await faults.heal(recorder)
    state.set_phase("final reads")
    notify()
    async with asyncio.timeout(60):
        catalog = await target.catalog_log()
    async with asyncio.timeout(300):
        await final_reads(
            target.client,
            cluster.nodes,
            recorder,
            _tables_and_indexes(catalog),
            every_node=PER_NODE_COPIES in target.capabilities,
        )
    async with asyncio.timeout(60):
        catalog = await target.catalog_log()
    write_jsonl(run.catalog, catalog)
    log.info("catalog.jsonl: %d versions", len(catalog))


def _analyze(
    run_dir: Path, opts: RunOptions, state: RunProgress, notify: Callable[[], None]
) -> int:
    state.set_phase("analyzing")
    notify()
    try:
        # imported here, not at the top: pyspark loads only for a run that is analyzed
        from checker.analyze import analyze_run, exit_code

        results = analyze_run(
            run_dir, spark_master=opts.spark_master, spark_remote=opts.spark_remote
        )
        code = int(exit_code(results))
    except Exception as e:
        log.error("analysis failed: %s\n%s", e, traceback.format_exc())
        if not (run_dir / RESULTS).exists():
            write_json(run_dir / RESULTS, unknown_results([f"analysis failed: {e}"]))
        return EXIT_UNKNOWN
    state.set_phase("reporting")
    notify()
    try:
        from reports.render import render_report  # matplotlib, likewise

        render_report(run_dir)
    except Exception as e:
        log.error("report failed: %s", e)
    state.set_phase(f"done: valid={results.get('valid')}")
    notify()
    return code
