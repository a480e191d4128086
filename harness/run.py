"""One chaos test end to end: run.json, cluster, target, clients + nemesis, final reads, verdict.

The order is docs/interfaces.md "Run orchestration". Teardown always runs (exception, Ctrl-C,
SIGTERM); a run that could not be set up, or was interrupted, has verdict `unknown`, never a
pass. Its exit code is 2 (unknown), or 130 when Ctrl-C (SIGINT) stopped it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cluster import (
    Cluster,
    ClusterSpec,
    ProvisionError,
    Terminated,
    ignore_signals,
    node_names,
    provision,
    resolve_backend,
    split_roles,
    teardown_on_signals,
)
from harness.provenance import distribution_version, provenance
from harness.store import (
    RunDir,
    controller_logging,
    detach_logging,
    new_run_dir,
    write_json,
    write_jsonl,
)
from harness.target import Target, TargetSetupError
from harness.targets import load_target
from nemesis import NemesisContext, heal_all, schedule_to_json
from nemesis import build_schedule as nemesis_schedule
from nemesis.delay import DelayNemesis
from nemesis.schedule import NemesisStep
from workloads import build_generator
from workloads.final import final_reads, tables_and_indexes
from workloads.history import HistoryRecorder
from workloads.runner import run_clients

log = logging.getLogger("schemachaos.run")
HARNESS_VERSION = "0.1.0"  # when not installed (pyproject's version otherwise)
EXIT_UNKNOWN = 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT (128 + 2)


@dataclass(frozen=True)
class RunOptions:
    """Everything `schemachaos run` takes; also what `repro` rebuilds from a run.json."""

    backend: str = "auto"
    nodes: int = 5
    voters: int = 3
    time_limit_s: float = 60.0
    concurrency: int = 5
    nemesis: tuple[str, ...] = ()
    nemesis_interval_s: float = 10.0
    workload: str = "ddl-dml"
    toggles: tuple[str, ...] = ()
    seed: int = 0
    store: Path = Path("store")
    scenario: Path | None = None
    delay_ms: int = 500
    max_skew_ms: int = 500
    idle_safe_time_interval_ms: int = 250
    no_analyze: bool = False
    nodes_file: Path | None = None
    test_name: str | None = None
    target: str = "schemasync"
    spark_master: str = "local[*]"
    ready_timeout_s: float = 60.0
    local_base: str = "127.0.0.10"
    target_config: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    nemesis_options: dict[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ()  # anomaly classes a scenario expects (for nightly gating)


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


def build_schedule(
    opts: RunOptions, nodes: list[str], voters: list[str], learners: list[str]
) -> list[NemesisStep]:
    """The run's fault schedule (empty without nemeses); ValueError names a bad kind/option."""
    if not opts.nemesis:
        return []
    return nemesis_schedule(
        list(opts.nemesis),
        opts.nemesis_interval_s,
        opts.time_limit_s,
        opts.seed,
        nodes,
        voters,
        learners,
        max_skew_s=opts.max_skew_ms / 1000.0,
        options={"delay_ms": opts.delay_ms, **opts.nemesis_options},
    )


def run_json(
    opts: RunOptions,
    run: RunDir,
    backend: str,
    nodes: list[str],
    voters: list[str],
    learners: list[str],
    schedule: list[NemesisStep],
    start_wall_ms: int,
    target_clock: str,
) -> dict[str, Any]:
    """run.json of history.md: how this run was made, with the nemesis schedule as data, the
    scenario's `expect` (reports judge by it as --gate does) and the provenance."""
    installed = distribution_version("schemachaos")
    version = HARNESS_VERSION if installed == "unknown" else installed
    return {
        "test": run.test,
        "run_id": run.run_id,
        "seed": opts.seed,
        "backend": backend,
        "target": opts.target,
        "clock": target_clock,
        "nodes": nodes,
        "voters": voters,
        "learners": learners,
        "config": target_config(opts),
        "nemesis": {
            "kinds": list(opts.nemesis),
            "interval_s": opts.nemesis_interval_s,
            "schedule": schedule_to_json(schedule),
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
        "provenance": provenance(opts.target, backend, version),
        "expect": list(opts.expect),
        "options": {
            "nodes": opts.nodes,
            "voters": opts.voters,
            "nemesis_interval_s": opts.nemesis_interval_s,
            "nodes_file": str(opts.nodes_file) if opts.nodes_file else None,
            "local_base": opts.local_base,
            "ready_timeout_s": opts.ready_timeout_s,
        },
    }


def target_config(opts: RunOptions) -> dict[str, Any]:
    return {
        "delay_duration_ms": opts.delay_ms,
        "max_clock_skew_ms": opts.max_skew_ms,
        "idle_safe_time_interval_ms": opts.idle_safe_time_interval_ms,
        "toggles": sorted(opts.toggles),
        **opts.target_config,
    }


def unknown_results(errors: list[str]) -> dict[str, Any]:
    return {
        "valid": "unknown",
        "anomalies": [],
        "not_applicable": [],
        "stats": {},
        "errors": errors,
    }


def _node_layout(opts: RunOptions, backend: str) -> list[str]:
    if backend == "ssh":
        from harness.remote_ssh import NodesFileError, load_nodes_file

        if opts.nodes_file is None:
            raise ProvisionError("--nodes-file is required with --backend ssh")
        try:
            return [h.name for h in load_nodes_file(opts.nodes_file)]
        except NodesFileError as e:
            raise ProvisionError(str(e)) from e
    return node_names(opts.nodes)


def run_test(opts: RunOptions, progress: ProgressSink | None = None) -> RunOutcome:
    """Run one test; always returns (never raises for setup or run failures). Exit code 130
    when Ctrl-C stopped it, so the caller can stop too (a nightly matrix must not go on)."""
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
                backend, why = resolve_backend(opts.backend)
                state.backend = backend
                log.info(why)
                nodes = _node_layout(opts, backend)
                voters, learners = split_roles(nodes, min(opts.voters, len(nodes)))
                target = load_target(opts.target)
                schedule = build_schedule(opts, nodes, voters, learners)
                start_ns = time.monotonic_ns()
                start_wall_ms = time.time_ns() // 1_000_000
                write_json(
                    run.run_json,
                    run_json(
                        opts,
                        run,
                        backend,
                        nodes,
                        voters,
                        learners,
                        schedule,
                        start_wall_ms,
                        target.clock,
                    ),
                )
                recorder = ObservedRecorder(run.history, start_ns, state, notify)
                _run_cluster(opts, run, backend, target, schedule, recorder, state, notify)
            except KeyboardInterrupt as e:
                interrupted = str(e) or "SIGINT"
                raise
            except (ProvisionError, ImportError, TargetSetupError) as e:
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
                exit_code = _analyze(run.path, opts.spark_master, state, notify)
        finally:
            detach_logging(handler)
    return RunOutcome(run_dir=run.path, exit_code=exit_code, faults_run=dict(state.faults_run))


class ObservedRecorder(HistoryRecorder):
    """The history recorder, also keeping the live display's list of active faults."""

    def __init__(
        self, path: Path, start_ns: int, state: RunProgress, notify: Callable[[], None]
    ) -> None:
        super().__init__(path, start_monotonic_ns=start_ns)
        self._state = state
        self._notify = notify

    def nemesis(self, f: str, value: dict) -> dict:
        event = super().nemesis(f, value)
        self._state.fault_event(f, dict(value or {}))
        self._notify()
        return event


def _run_cluster(
    opts: RunOptions,
    run: RunDir,
    backend: str,
    target: Target,
    schedule: list[NemesisStep],
    recorder: ObservedRecorder,
    state: RunProgress,
    notify: Callable[[], None],
) -> None:
    image_of = getattr(target, "docker_image", None)
    spec = ClusterSpec(
        backend=backend,
        nodes=opts.nodes,
        voters=opts.voters,
        nodes_file=opts.nodes_file,
        image=str(image_of()) if backend == "docker" and callable(image_of) else None,
        local_base=opts.local_base,
        ready_timeout_s=opts.ready_timeout_s,
    )
    if spec.image is not None:
        _record_images(run, {"node": spec.image})
    state.set_phase("provisioning")
    notify()
    with provision(spec, run.run_id, run.tmp) as cluster:
        try:
            state.set_phase("starting nodes")
            notify()
            target.setup(cluster, target_config(opts))
            if hasattr(target, "start_all"):
                target.start_all()
            else:
                for node in cluster.nodes:
                    target.start(node)
            state.set_phase("waiting for the cluster")
            notify()
            target.wait_ready(opts.ready_timeout_s)
            asyncio.run(_exercise(opts, run, cluster, target, schedule, recorder, state, notify))
        finally:
            with ignore_signals():  # a second Ctrl-C must not skip the teardown
                state.set_phase("collecting logs")
                notify()
                for node in cluster.nodes:
                    try:
                        target.collect_logs(node, run.node_dir(node))
                    except Exception as e:
                        log.warning("logs of %s: %s", node, e)
                state.set_phase("tearing down")
                notify()
                target.teardown()


def _record_images(run: RunDir, images: dict[str, str]) -> None:
    """The image tags into run.json's provenance: known only once the backend resolved (or
    built) them, after run.json was first written."""
    data = json.loads(run.run_json.read_text())
    data.setdefault("provenance", {})["images"] = images
    write_json(run.run_json, data)


def _tables_and_indexes(catalog: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the final reads cover: the workload's choice over the newest catalog version."""
    if not catalog:
        return []
    return tables_and_indexes(max(catalog, key=lambda c: c.get("catalog_version", 0)))


async def _exercise(
    opts: RunOptions,
    run: RunDir,
    cluster: Cluster,
    target: Target,
    schedule: list[NemesisStep],
    recorder: ObservedRecorder,
    state: RunProgress,
    notify: Callable[[], None],
) -> None:
    """Clients and nemesis side by side, then heal, final reads, and the catalog log."""
    options = dict(opts.workload_options)
    options.setdefault("nodes", cluster.nodes)
    generator = build_generator(opts.workload, opts.seed, opts.concurrency, options)
    nemesis_ctx: NemesisContext | None = None
    if schedule:
        nemesis_ctx = NemesisContext(
            cluster=cluster,
            target=target,
            config={
                **opts.nemesis_options,
                "max_skew_ms": opts.max_skew_ms,
                "interval_s": opts.nemesis_interval_s,
                "kinds": list(opts.nemesis),
                "seed": opts.seed,
            },
        )

    def on_progress(counts: dict[str, Any]) -> None:
        state.counts = dict(counts)
        notify()

    state.set_phase("running")
    state.started = time.monotonic()
    notify()
    stop = asyncio.Event()
    player: DelayNemesis | None = None
    async with asyncio.TaskGroup() as tg:
        if nemesis_ctx is not None:
            # plays every kind: `delay` itself, the others through nemesis.runner.apply_step
            player = DelayNemesis(nemesis_ctx, opts.delay_ms)
            tg.create_task(player.play(schedule, recorder, stop))
        try:
            summary = await run_clients(
                generator,
                target.client,
                cluster.nodes,
                recorder,
                opts.time_limit_s,
                opts.concurrency,
                opts.seed,
                on_progress,
            )
            if isinstance(summary, dict):
                state.counts = {**state.counts, **summary}
        finally:
            stop.set()
    if nemesis_ctx is not None:
        state.set_phase("healing")
        notify()
        async with asyncio.timeout(120):
            await heal_all(nemesis_ctx, recorder)
            if player is not None:
                await player.heal(recorder)
    state.set_phase("final reads")
    notify()
    async with asyncio.timeout(60):
        catalog = await target.catalog_log()
    async with asyncio.timeout(300):
        await final_reads(target.client, cluster.nodes, recorder, _tables_and_indexes(catalog))
    async with asyncio.timeout(60):
        catalog = await target.catalog_log()
    write_jsonl(run.catalog, catalog)
    log.info("catalog.jsonl: %d versions", len(catalog))


def _analyze(
    run_dir: Path, spark_master: str, state: RunProgress, notify: Callable[[], None]
) -> int:
    state.set_phase("analyzing")
    notify()
    try:
        # imported here, not at the top: pyspark loads only for a run that is analyzed
        from checker.analyze import analyze_run, exit_code

        results = analyze_run(run_dir, spark_master=spark_master)
        code = int(exit_code(results))
    except Exception as e:
        log.error("analysis failed: %s\n%s", e, traceback.format_exc())
        if not (run_dir / "results.json").exists():
            write_json(run_dir / "results.json", unknown_results([f"analysis failed: {e}"]))
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


def options_from_run_json(run_json_path: Path, store: Path | None = None) -> RunOptions:
    """RunOptions that repeat a stored run: same seed, nodes, nemesis, workload, config."""
    data = json.loads(run_json_path.read_text())
    config = dict(data.get("config", {}))
    nemesis = data.get("nemesis", {})
    workload = data.get("workload", {})
    options = data.get("options", {})
    known = {"delay_duration_ms", "max_clock_skew_ms", "idle_safe_time_interval_ms", "toggles"}
    scenario = workload.get("scenario")
    return RunOptions(
        backend=data.get("backend", "auto"),
        nodes=int(options.get("nodes", len(data.get("nodes", [])) or 5)),
        voters=int(options.get("voters", len(data.get("voters", [])) or 3)),
        time_limit_s=float(workload.get("time_limit_s", 60)),
        concurrency=int(workload.get("concurrency", 5)),
        nemesis=tuple(nemesis.get("kinds", [])),
        nemesis_interval_s=float(nemesis.get("interval_s", options.get("nemesis_interval_s", 10))),
        workload=str(workload.get("name", "ddl-dml")),
        toggles=tuple(config.get("toggles", [])),
        seed=int(data.get("seed", 0)),
        store=store or run_json_path.parent.parent.parent,
        scenario=Path(scenario) if scenario else None,
        delay_ms=int(config.get("delay_duration_ms", 500)),
        max_skew_ms=int(config.get("max_clock_skew_ms", 500)),
        idle_safe_time_interval_ms=int(config.get("idle_safe_time_interval_ms", 250)),
        nodes_file=Path(options["nodes_file"]) if options.get("nodes_file") else None,
        local_base=str(options.get("local_base", "127.0.0.10")),
        ready_timeout_s=float(options.get("ready_timeout_s", 60.0)),
        test_name=str(data.get("test")) if data.get("test") else None,
        target=str(data.get("target", "schemasync")),
        target_config={k: v for k, v in config.items() if k not in known},
        workload_options=dict(workload.get("options", {})),
        nemesis_options=dict(nemesis.get("options") or {}),
        expect=tuple(data.get("expect") or ()),
    )
