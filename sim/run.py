"""``--backend sim``: one run of a scenario on the simulated cluster, into a normal run dir.

``run_sim(opts)`` writes the same run directory as a docker run (run.json with
``"backend": "sim"``, history.jsonl, catalog.jsonl), analyzes it with the same checker and
returns (run dir, exit code). Everything runs on one deterministic loop in virtual time, so
the same options and seed give a byte-identical history.jsonl and catalog.jsonl.

String hashing is randomised per process and sets of strings iterate in hash order: a run in
a process without ``PYTHONHASHSEED=0`` re-executes itself in a child process that has it.

``python -m sim.run --scenario FILE [--seed N] [--store DIR] [--no-analyze]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.config_error import ConfigError
from contract.exit_codes import EXIT_UNKNOWN
from contract.rundir import RESULTS
from harness.options import RunOptions
from harness.run import build_schedule, run_json
from harness.store import RunDir, new_run_dir, write_json, write_jsonl
from harness.target import TargetClient
from harness.target_settings import effective_config, timing_bounds
from nemesis.schedule import NemesisStep
from sim.clocks import EPOCH_US
from sim.cluster import SimCluster, SimWorld
from sim.loop import SimLoop, run_simulation
from sim.nemesis import SimNemesis
from targets.schemasync.client import SchemaSyncClient, client_error

if TYPE_CHECKING:  # pyspark is imported only when a run is analyzed
    from pyspark.sql import SparkSession
from workloads import build_generator
from workloads.final import final_reads, tables_and_indexes
from workloads.history import HistoryRecorder
from workloads.runner import run_clients
from workloads.scenario import load_run_options

log = logging.getLogger("schemachaos.sim")

READY_TIMEOUT_S = 30.0
HASH_SEED = "0"


@dataclasses.dataclass(frozen=True)
class SimOutcome:
    run_dir: Path
    exit_code: int
    stats: dict[str, Any]

    @property
    def faults_run(self) -> dict[str, int]:
        """Faults started, by kind (what harness.run.RunOutcome.faults_run holds)."""
        return dict(self.stats.get("faults_run", {}))


def node_layout(n: int, voters: int) -> tuple[list[str], list[str], list[str]]:
    nodes = [f"n{i}" for i in range(1, n + 1)]
    return nodes, nodes[:voters], nodes[voters:]


def run_sim(opts: RunOptions, *, analyze: bool | None = None) -> SimOutcome:
    """Run ``opts`` in simulation. A run that fails is exit code 2 with results.json saying
    why; RuntimeError only when the re-executed child process itself crashed."""
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        return _run_in_child(opts, analyze)
    do_analyze = (not opts.no_analyze) if analyze is None else analyze
    run = new_run_dir(opts.store, opts.test_name or opts.workload)
    nodes, voters, learners = node_layout(opts.nodes, min(opts.voters, opts.nodes))
    errors: list[str] = []
    stats: dict[str, Any] = {}
    try:
        schedule = build_schedule(opts, nodes, voters, learners)
        data = run_json(
            opts, run, "sim", nodes, voters, learners, schedule, EPOCH_US // 1000, "hlc"
        )
        write_json(run.run_json, data)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        stats, loop = run_simulation(_simulate(opts, run, nodes, voters, schedule))
        stats.update(
            {
                "wall_s": round(time.perf_counter() - wall0, 3),
                "cpu_s": round(time.process_time() - cpu0, 3),
                "virtual_s": round(loop.time(), 3),
                "events": loop.steps,
            }
        )
        write_json(run.path / "sim.json", stats)
    except Exception as e:
        log.exception("sim run failed")
        errors.append(f"sim run failed: {type(e).__name__}: {e}")
    if errors:
        write_json(run.results, _unknown(errors))
        return SimOutcome(run.path, EXIT_UNKNOWN, stats)
    if not do_analyze:
        return SimOutcome(run.path, 0, stats)
    return SimOutcome(run.path, analyze_dir(run.path), stats)


def analyze_dir(
    run_dir: Path, spark: SparkSession | None = None, *, report_valid: bool = True
) -> int:
    """The checker's verdict as an exit code (0 valid, 1 anomalies, 2 unknown); and the report,
    unless the run is valid and `report_valid` is false (a sweep reports only the seeds worth
    reading: a report costs about 5 CPU-s, a third of a judged seed). On `spark` when given (a
    sweep keeps one session), else on a session of its own."""
    try:
        from checker.analyze import analyze_run, exit_code  # pyspark: only when analyzing

        results = analyze_run(run_dir, spark=spark)
        code = int(exit_code(results))
    except Exception as e:
        log.error("analysis failed: %s", e)
        write_json(run_dir / RESULTS, _unknown([f"analysis failed: {e}"]))
        return EXIT_UNKNOWN
    if code == 0 and not report_valid:
        return code
    try:
        from reports.render import render_report

        render_report(run_dir)
    except Exception as e:
        log.warning("report failed: %s", e)
    return code


def _unknown(errors: list[str]) -> dict[str, Any]:
    return {
        "valid": "unknown",
        "anomalies": [],
        "not_applicable": [],
        "stats": {},
        "errors": errors,
    }


def _strictly_increasing_ns(loop: SimLoop) -> Callable[[], int]:
    """The recorder's clock: virtual ns, one more than the last reading when virtual time has
    not moved. On the controller's real monotonic clock every event takes some time; in sim
    none passes, so a probe invoked as a DDL's ack completes would share the ack's ns and read
    as concurrent with it, hiding a stale answer from read-your-DDL (which judges invokes
    strictly after the ack, anomalies.md)."""
    last = -1

    def now() -> int:
        nonlocal last
        last = max(round(loop.time() * 1e9), last + 1)
        return last

    return now


async def _simulate(
    opts: RunOptions,
    run: RunDir,
    nodes: list[str],
    voters: list[str],
    schedule: list[NemesisStep],
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimLoop)
    world = SimWorld(opts.seed, loop)
    cluster = SimCluster(world, nodes, voters, effective_config(opts))
    for n in nodes:
        cluster.start(n)
    await cluster.wait_ready(READY_TIMEOUT_S)
    # An fsync while the run goes stalls the appends behind it (measured: 0.4 s of an 8 s
    # run); the seed replays a simulated run exactly, so the history is fsynced at close only.
    recorder = HistoryRecorder(
        run.history, clock_ns=_strictly_increasing_ns(loop), fsync_while_running=False
    )
    nemesis = SimNemesis(cluster, opts.seed, timing_bounds(opts)[1])
    try:
        summary = await _exercise(opts, run, cluster, schedule, recorder, nemesis)
    finally:
        recorder.close()
        await cluster.shutdown()
    return {
        "clients": summary,
        "faults_run": nemesis.faults_run,
        "messages": world.network.messages,
        "fsyncs": world.disk.fsyncs,
        "crash_losses": cluster.crash_losses,
    }


def _open_client(cluster: SimCluster) -> Callable[[str], Any]:
    async def open_client(node: str) -> TargetClient:
        try:
            raw = await cluster.raw_client(node, 60.0)
        except (OSError, TimeoutError) as e:
            raise client_error(e, frozenset()) from e
        return SchemaSyncClient(node, raw)

    return open_client


async def _exercise(
    opts: RunOptions,
    run: RunDir,
    cluster: SimCluster,
    schedule: list[NemesisStep],
    recorder: HistoryRecorder,
    nemesis: SimNemesis,
) -> dict[str, Any]:
    """What harness.run._exercise does, on the simulated cluster."""
    options = dict(opts.workload_options)
    options.setdefault("nodes", cluster.nodes)
    generator = build_generator(opts.workload, opts.seed, opts.concurrency, options)
    open_client = _open_client(cluster)
    stop = asyncio.Event()
    summary: dict[str, Any] = {}
    async with asyncio.TaskGroup() as tg:
        if schedule:
            tg.create_task(nemesis.play(schedule, recorder, stop))
        try:
            summary = await run_clients(
                generator,
                open_client,
                cluster.nodes,
                recorder,
                opts.time_limit_s,
                opts.concurrency,
            )
        finally:
            stop.set()
    if schedule:
        await nemesis.heal(recorder)
        await cluster.wait_ready(READY_TIMEOUT_S * 4)
    catalog = await _catalog_log(cluster)
    newest = max(catalog, key=lambda c: c.get("catalog_version", 0)) if catalog else None
    await final_reads(
        open_client, cluster.nodes, recorder, tables_and_indexes(newest) if newest else []
    )
    catalog = await _catalog_log(cluster)
    write_jsonl(run.catalog, catalog)
    # the summary's elapsed_s/ops_per_s are in virtual seconds
    return summary


async def _catalog_log(cluster: SimCluster) -> list[dict[str, Any]]:
    errors = []
    for node in cluster.nodes:
        try:
            async with asyncio.timeout(60):
                client = await cluster.raw_client(node, 5.0)
                try:
                    return list(await client.catalog_log())
                finally:
                    await client.close()
        except Exception as e:
            errors.append(f"{node}: {e}")
    raise RuntimeError("catalog log not readable from any node: " + "; ".join(errors))


# -- running in a child with a fixed hash seed ------------------------------------------------


def options_to_json(opts: RunOptions) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(opts), default=str))


def options_from_json(data: dict[str, Any]) -> RunOptions:
    fields = {f.name: f for f in dataclasses.fields(RunOptions)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue
        if key in ("store", "scenario", "nodes_file") and value is not None:
            value = Path(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return RunOptions(**kwargs)


def _run_in_child(opts: RunOptions, analyze: bool | None) -> SimOutcome:
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    payload = options_to_json(opts)
    if analyze is not None:
        payload["no_analyze"] = not analyze
    proc = subprocess.run(
        [sys.executable, "-m", "sim.run", "--options-json", "-"],
        input=json.dumps(payload),
        text=True,
        env=env,
        capture_output=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"sim child failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(lines[-1])
    return SimOutcome(Path(out["run_dir"]), int(out["exit_code"]), dict(out.get("stats", {})))


# -- command line -----------------------------------------------------------------------------


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """RunOptions of a scenario file, with --seed/--store/--time-limit/--no-analyze on top."""
    fields: dict[str, Any] = load_run_options(Path(args.scenario))
    fields["scenario"] = Path(args.scenario)
    fields["backend"] = "sim"
    if args.seed is not None:
        fields["seed"] = args.seed
    if args.time_limit is not None:
        fields["time_limit_s"] = args.time_limit
    fields["store"] = Path(args.store)
    fields["no_analyze"] = bool(args.no_analyze)
    fields.setdefault("test_name", Path(args.scenario).stem)
    allowed = {f.name for f in dataclasses.fields(RunOptions)}
    return RunOptions(**{k: v for k, v in fields.items() if k in allowed})


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", help="a scenario TOML file")
    parser.add_argument("--seed", type=int, default=None, help="overrides the scenario's seed")
    parser.add_argument("--time-limit", type=float, default=None, help="virtual seconds")
    parser.add_argument("--store", default="store", help="where run directories go")
    parser.add_argument("--no-analyze", action="store_true")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.run", description=__doc__)
    add_run_arguments(parser)
    parser.add_argument("--options-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.options_json:
        opts = options_from_json(json.loads(sys.stdin.read()))
        outcome = run_sim(opts)
        print(
            json.dumps(
                {
                    "run_dir": str(outcome.run_dir),
                    "exit_code": outcome.exit_code,
                    "stats": outcome.stats,
                },
                default=str,
            )
        )
        return 0
    if not args.scenario:
        parser.error("--scenario FILE is required")
    try:
        opts = options_from_args(args)
    except (ConfigError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    outcome = run_sim(opts)
    print(f"run dir: {outcome.run_dir}")
    if outcome.stats:
        s = outcome.stats
        print(
            f"virtual {s.get('virtual_s')} s in {s.get('wall_s')} s wall"
            f" ({s.get('cpu_s')} s CPU), "
            f"{s.get('events')} events"
        )
    print(f"exit {outcome.exit_code}")
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
