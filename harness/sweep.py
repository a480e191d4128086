"""``sweep``: run a scenario in simulation over many seeds until one fails.

Seeds run as child processes (``python -m harness.run_child``: the one orchestrator, harness.run,
``--jobs`` at a time, each with the sim backend's fixed hash seed); this process analyzes each
finished run with the checker (one Spark session for the whole sweep) and stops at the first
seed whose verdict is "anomalies" (exit 1), unless ``--all``. It prints that seed's verdict and
the command that repeats it exactly.

``schemachaos sweep --scenario FILE --seeds N [--first-seed K] [--budget-s S] [--all]
[--jobs J] [--store DIR]``; exit 1 if a seed failed, 0 if every seed was valid, 2 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.config_error import ConfigError
from contract.exit_codes import EXIT_BAD_INPUT, EXIT_UNKNOWN
from contract.rundir import RESULTS
from contract.target import SettingsError
from harness.backends import BackendOptionsError, ProvisionError, scenario_run_options
from harness.backends.sim import HASH_SEED, SimBackend
from harness.options import RunOptions, shape_problem
from harness.reexec import child_command, child_env, options_to_json
from harness.resolved_run import resolve_run
from harness.run import unknown_results
from harness.store import store_name_problem, write_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POLL_S = 0.2
log = logging.getLogger("schemachaos.sweep")


@dataclass(frozen=True)
class SeedResult:
    seed: int
    exit_code: int
    run_dir: Path | None
    anomalies: tuple[str, ...]
    wall_s: float


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=["sim"], default="sim", help="only sim sweeps")
    parser.add_argument("--scenario", required=True, help="a scenario TOML file")
    parser.add_argument("--seeds", type=int, required=True, help="how many seeds to try")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop after S wall seconds")
    parser.add_argument("--all", action="store_true", help="do not stop at the first failure")
    parser.add_argument("--jobs", type=int, default=1, help="seeds simulated in parallel")
    parser.add_argument("--store", default="store", help="where run directories go")
    parser.add_argument("--time-limit", type=float, default=None, help="virtual seconds per run")


def add_sweep_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sweep`` on a CLI's subparsers; the parsed args go to ``run_sweep_args``."""
    parser = subparsers.add_parser(
        "sweep", help="seeds of a scenario in simulation until one fails"
    )
    add_sweep_arguments(parser)
    return parser


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """RunOptions of a scenario file on the sim backend, with --seed/--store/--time-limit/
    --no-analyze on top."""
    fields: dict[str, Any] = scenario_run_options(Path(args.scenario))
    fields["scenario"] = Path(args.scenario)
    fields["backend"] = SimBackend.name
    if args.seed is not None:
        fields["seed"] = args.seed
    if args.time_limit is not None:
        fields["time_limit_s"] = args.time_limit
    fields["store"] = Path(args.store).resolve()
    fields["no_analyze"] = bool(args.no_analyze)
    fields.setdefault("test_name", Path(args.scenario).stem)
    allowed = {f.name for f in dataclasses.fields(RunOptions)}
    opts = RunOptions(**{k: v for k, v in fields.items() if k in allowed})
    # what `run` refuses before anything starts, refused here too (every seed's child would
    # otherwise fail alone, as an unknown run)
    shape = shape_problem(opts)
    if shape is not None:
        raise ConfigError(shape.field, shape.why, file=Path(args.scenario))
    why = store_name_problem(opts.test_name) if opts.test_name is not None else None
    if why is not None:
        raise ConfigError("name", why, file=Path(args.scenario))
    return opts


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
        write_json(run_dir / RESULTS, unknown_results([f"analysis failed: {e}"]))
        return EXIT_UNKNOWN
    if code == 0 and not report_valid:
        return code
    try:
        from reports.render import render_report

        render_report(run_dir)
    except Exception as e:
        log.warning("report failed: %s", e)
    return code


def repro_command(scenario: str, seed: int, time_limit: float | None) -> str:
    cmd = ["schemachaos", "run", "--backend", "sim", "--scenario", scenario, "--seed", str(seed)]
    if time_limit is not None:
        cmd += ["--time-limit", str(time_limit)]
    return shlex.join(cmd)


def seed_options(args: argparse.Namespace) -> RunOptions:
    """The sweep's run options, every seed's but the seed (the scenario file read once),
    checked once as `run` resolves a run: a bad setting or nemesis is refused before any
    child starts, not found by every seed alone."""
    ns = argparse.Namespace(**{**vars(args), "seed": args.first_seed, "no_analyze": True})
    opts = options_from_args(ns)
    try:
        resolved = resolve_run(opts)
    except SettingsError as e:  # the scenario's [target] table set it
        raise ConfigError(f"target.{e.key}", e.why, file=Path(args.scenario)) from e
    resolved.backend.check_options(resolved.opts)
    return resolved.opts


def _start(opts: RunOptions, seed: int) -> subprocess.Popen[str]:
    """One seed's run in a child (the sim backend's hash seed), resolved there."""
    payload = options_to_json(dataclasses.replace(opts, seed=seed))
    proc = subprocess.Popen(
        child_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env(HASH_SEED),
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    return proc


@dataclass(frozen=True)
class _Simulated:
    """A seed whose child process has ended: its run directory, if it made one, and its exit."""

    seed: int
    began: float
    run_dir: Path | None
    exit_code: int


def _collect(seed: int, proc: subprocess.Popen[str], began: float) -> _Simulated:
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return _Simulated(seed, began, None, 2)
    info = json.loads(lines[-1])
    return _Simulated(seed, began, Path(info["run_dir"]), int(info["exit_code"]))


def _judge(sim: _Simulated, spark: SparkSession | None) -> SeedResult:
    code = sim.exit_code
    if sim.run_dir is None:
        return SeedResult(sim.seed, code, None, (), time.monotonic() - sim.began)
    if code == 0:
        code = analyze_dir(sim.run_dir, spark, report_valid=False)
    anomalies: tuple[str, ...] = ()
    results = sim.run_dir / RESULTS
    if results.exists():
        data = json.loads(results.read_text())
        anomalies = tuple(sorted({str(a.get("class")) for a in data.get("anomalies", [])}))
    return SeedResult(sim.seed, code, sim.run_dir, anomalies, time.monotonic() - sim.began)


def sweep(args: argparse.Namespace) -> list[SeedResult]:
    """The seeds' results in the order they finished. Finished seeds are judged on one Spark
    session, after the next seeds have been started: the simulator and the checker overlap."""
    if args.seeds < 1 or args.jobs < 1:
        raise ValueError("--seeds and --jobs must be at least 1")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    opts = seed_options(args)
    started = time.monotonic()
    running: dict[int, tuple[subprocess.Popen[str], float]] = {}
    results: list[SeedResult] = []
    spark: SparkSession | None = None
    stop = False
    try:
        while (seeds or running) and not stop:
            _fill(args, opts, seeds, running, started)
            if not running:
                break
            done = [s for s, (p, _) in running.items() if p.poll() is not None]
            if not done:
                time.sleep(POLL_S)
                continue
            simulated = [_collect(seed, *running.pop(seed)) for seed in sorted(done)]
            _fill(args, opts, seeds, running, started)
            for sim in simulated:
                if sim.exit_code == 0 and not _alive(spark):
                    spark = _session(spark)
                result = _judge(sim, spark)
                if result.exit_code == 2 and sim.exit_code == 0 and not _alive(spark):
                    # the session died under this seed's judgment (a local executor lost its
                    # heartbeats after the sweep was suspended, or ran out of memory): every later
                    # seed would be unknown too, so judge it again on a new one
                    spark = _session(spark)
                    result = _judge(sim, spark)
                results.append(result)
                verdict = {0: "valid", 1: "ANOMALIES", 2: "unknown"}.get(result.exit_code, "?")
                print(
                    f"seed {sim.seed}: {verdict} {list(result.anomalies) or ''} "
                    f"({result.wall_s:.1f} s) {result.run_dir or ''}",
                    flush=True,
                )
                if result.exit_code == 1 and not args.all:
                    stop = True
    finally:
        for proc, _ in running.values():  # only our own children, by their Popen handle
            proc.kill()
            proc.wait()
        if spark is not None:
            spark.stop()
    return results


def _fill(
    args: argparse.Namespace,
    opts: RunOptions,
    seeds: list[int],
    running: dict[int, tuple[subprocess.Popen[str], float]],
    started: float,
) -> None:
    """Start seeds until `--jobs` run at once, unless the budget is spent."""
    if args.budget_s is not None and time.monotonic() - started > args.budget_s:
        return
    while seeds and len(running) < args.jobs:
        seed = seeds.pop(0)
        running[seed] = (_start(opts, seed), time.monotonic())


def _session(dead: SparkSession | None = None) -> SparkSession:
    """A new session for the sweep, once the old one (if any) is stopped."""
    from checker.session import build_session, discard_session  # pyspark: only when judging

    if dead is not None:
        discard_session(dead)
    return build_session("local[2]", shuffle_partitions=2)


def _alive(spark: SparkSession | None) -> bool:
    """Whether `spark` can still run a job (its SparkContext is not stopped, its JVM answers)."""
    if spark is None:
        return False
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # py4j: the gateway's JVM is gone
        return False


def run_sweep_args(args: argparse.Namespace) -> int:
    try:
        results = sweep(args)
    except (ConfigError, ValueError, OSError, ProvisionError, BackendOptionsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = sorted((r for r in results if r.exit_code == 1), key=lambda r: r.seed)
    valid = sum(1 for r in results if r.exit_code == 0)
    print(f"{len(results)} seeds: {valid} valid, {len(failed)} with anomalies")
    if failed:
        first = failed[0]
        print(f"first failing seed: {first.seed}: anomalies {list(first.anomalies)}")
        print(f"run dir: {first.run_dir}")
        print(f"repro: {repro_command(args.scenario, first.seed, args.time_limit)}")
        return 1
    return 0 if valid == len(results) and results else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.sweep", description=__doc__)
    add_sweep_arguments(parser)
    return run_sweep_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
