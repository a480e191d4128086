"""The `schemachaos` command: run a test, analyze or report a stored run, repeat one, serve the
store, build images, clean up after a crash, run the nightly matrix.

Exit codes are Jepsen's (anomalies.md "Verdict"): 0 valid, 1 anomalies, 2 unknown, 130
interrupted (Ctrl-C), 254 bad input (a flag, or a file or directory named on the command line
that is missing or invalid), 255 a crash of the tool itself. Bad input is one line naming the
flag, file, key or host; a history that breaks the contract is a verdict (2), not bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from contract.config_error import ConfigError
from contract.exit_codes import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_INTERRUPTED, EXIT_UNKNOWN
from contract.rundir import RESULTS, RUN_JSON
from contract.target import SettingsError
from harness.backends import (
    BackendOptionsError,
    ProvisionError,
    docker_answers,
    scenario_run_options,
)
from harness.cli_parser import build_parser
from harness.nightly import (
    Matrix,
    NightlyCell,
    RunOutcomeLike,
    cell_options,
    harness_runner,
    load_matrix,
    run_nightly,
)
from harness.options import OptionRangeError, RunOptions, options_from_run_json, shape_problem
from harness.remote_ssh import load_nodes_file
from harness.repro_source import check_repeatable
from harness.resolved_run import ResolvedRun, UnresolvedRun, resolve_run
from harness.run import RunOutcome, run_test
from harness.spark_cli import cmd_spark
from harness.store import store_name_problem
from harness.sweep import run_sweep_args
from nemesis import parse_kinds
from reports.expectation import judge
from targets.registry import TARGETS
from workloads.option_ranges import RANGES


class BadInput(Exception):
    """Input the tool refuses: printed as one line, exit 254."""


# -- run -----------------------------------------------------------------------------------


def _scenario_problem(where: str, e: ConfigError) -> BadInput:
    """`<where>: <file>[: <key>]: <why>`; TOML syntax errors carry their line and column."""
    return BadInput(f"{where}: {e}")


def _scenario_fields(path: Path) -> dict[str, Any]:
    """The run options a scenario sets, by RunOptions field name."""
    try:
        return scenario_run_options(path)
    except ConfigError as e:
        raise _scenario_problem("--scenario", e) from e


def _nemesis_kinds(text: str) -> tuple[str, ...]:
    try:
        return tuple(parse_kinds(text))
    except ValueError as e:
        raise BadInput(f"--nemesis: {e}") from e


# The target settings that `run` also takes as flags (schemasync's), by setting name
_SETTING_FLAGS = {
    "toggles": "--toggle",
    "delay_duration_ms": "--delay-ms",
    "max_clock_skew_ms": "--max-skew-ms",
}


def _range_input(e: OptionRangeError, scenario: Path | None, flagged: frozenset[str]) -> BadInput:
    """An option out of range as bad input, named where it was given: the flag, else the
    scenario file's key."""
    bounds = RANGES[e.field]
    if scenario is not None and e.field not in flagged:
        return BadInput(f"--scenario: {scenario}: {bounds.key}: {e.why}")
    return BadInput(f"{bounds.flag}: {e.why}")


def _check_shape(opts: RunOptions, flagged: frozenset[str] = frozenset()) -> None:
    """What every backend's run must pass before anything starts, named by the flag (or by
    the scenario's key when the value came from the scenario, not a flag in `flagged`): the
    options together (voters and nodes, the schedule's length) and the test's name."""
    shape = shape_problem(opts)
    if shape is not None:
        raise _range_input(shape, opts.scenario, flagged)
    why = store_name_problem(opts.test_name) if opts.test_name is not None else None
    if why is not None:
        if opts.scenario is not None and "test_name" not in flagged:
            raise BadInput(f"--scenario: {opts.scenario}: name: {why}")
        raise BadInput(f"--test-name: {why}")


def _validate(
    opts: RunOptions, *, default_nemesis: bool = False, stored_in: Path | None = None
) -> ResolvedRun:
    """The run resolved (harness.resolved_run), refusing bad input before anything is
    started: BadInput naming the flag, or the scenario's key when the scenario set it, or
    (`stored_in`: the run.json that `repro` repeats) that file's key."""
    _check_shape(opts)
    try:
        resolved = resolve_run(opts, default_nemesis=default_nemesis, stored=stored_in is not None)
    except (ProvisionError, BackendOptionsError) as e:
        raise BadInput(str(e)) from e
    except SettingsError as e:
        if stored_in is not None:
            raise BadInput(f"RUN_DIR: {stored_in}: config.{e.key}: {e.why}") from e
        raise _settings_input(e, opts.scenario) from e
    except UnresolvedRun as e:
        if stored_in is not None:
            key = _RUN_JSON_KEYS.get(e.field, e.field)
            raise BadInput(f"RUN_DIR: {stored_in}: {key}: {e.why}") from e
        raise _unresolved_input(e, opts.scenario) from e
    store = resolved.opts.store
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--store: cannot create {store}: {e.strerror or e}") from e
    try:
        resolved.backend.check_options(resolved.opts)
    except BackendOptionsError as e:
        raise BadInput(str(e)) from e
    return resolved


def _settings_input(e: SettingsError, scenario: Path | None) -> BadInput:
    """A target setting the target refuses, named by the scenario's key (and the flag that
    also sets it), else by the flag, else as `--target: target.KEY`."""
    flag = _SETTING_FLAGS.get(e.key or "")
    if scenario is not None:
        where = f"--scenario: {scenario}: target.{e.key}"
        where += f" (or {flag})" if flag else ""
    else:
        where = flag or f"--target: target.{e.key}"
    return BadInput(f"{where}: {e.why}")


# The flag of each RunOptions field that names something resolution looks up or reads, and
# its key in a stored run.json (`repro` has no such flags: the run.json names them)
_RESOLVED_FLAGS = {"target": "--target", "workload": "--workload", "nodes_file": "--nodes-file"}
_RUN_JSON_KEYS = {"workload": "workload.name", "nodes_file": "options.nodes_file"}


def _unresolved_input(e: UnresolvedRun, scenario: Path | None) -> BadInput:
    """A name or file that refers to nothing usable, named by its flag; a fault schedule
    that cannot be built by `--nemesis`, or the scenario file that asked for it."""
    if e.field == "nemesis":
        where = "--nemesis" if scenario is None else f"--scenario: {scenario}"
        return BadInput(f"{where}: nemesis: {e.why}")
    return BadInput(f"{_RESOLVED_FLAGS.get(e.field, e.field)}: {e.why}")


def _run_options(args: argparse.Namespace) -> tuple[RunOptions, bool]:
    """RunOptions from scenario then flags, and whether the nemesis list is the default."""
    given: dict[str, Any] = {}
    if args.scenario is not None:
        given.update(_scenario_fields(args.scenario))
        given["scenario"] = args.scenario
    flags = {
        "backend": args.backend,
        "nodes": args.nodes,
        "voters": args.voters,
        "nodes_file": args.nodes_file,
        "time_limit_s": args.time_limit,
        "concurrency": args.concurrency,
        "nemesis": _nemesis_kinds(args.nemesis) if args.nemesis is not None else None,
        "nemesis_interval_s": args.nemesis_interval,
        "workload": args.workload,
        "seed": args.seed,
        "store": args.store,
        "test_name": args.test_name,
        "target": args.target,
        "spark_master": args.spark_master,
        "spark_remote": args.spark_remote,
        "ready_timeout_s": args.ready_timeout,
        "local_base": args.local_base,
    }
    given.update({k: v for k, v in flags.items() if v is not None})
    settings = {
        "toggles": list(args.toggle) if args.toggle else None,
        "delay_duration_ms": args.delay_ms,
        "max_clock_skew_ms": args.max_skew_ms,
    }
    given["target_config"] = {
        **given.get("target_config", {}),
        **{k: v for k, v in settings.items() if v is not None},
    }
    defaulted = "nemesis" not in given
    if defaulted:
        given["nemesis"] = _nemesis_kinds("all")
    if args.no_analyze:
        given["no_analyze"] = True
    flagged = frozenset(k for k, v in flags.items() if v is not None)
    try:
        opts = RunOptions(**given)
    except TypeError as e:
        raise BadInput(f"--scenario: {e}") from e
    except OptionRangeError as e:
        raise _range_input(e, args.scenario, flagged) from e
    _check_shape(opts, flagged)  # here: on the path every backend takes (sim included)
    return opts, defaulted


def _execute(
    opts: RunOptions,
    show_progress: bool,
    default_nemesis: bool = False,
    verbose: bool = False,
    *,
    stored_in: Path | None = None,
) -> tuple[int, Path]:
    _check_store_takes_runs(opts.store)
    resolved = _validate(opts, default_nemesis=default_nemesis, stored_in=stored_in)
    print(f"schemachaos: {resolved.backend_why}", file=sys.stderr)
    if resolved.unavailable_kinds:
        print(
            f"schemachaos: the {resolved.backend.name} backend cannot inject "
            f"{', '.join(sorted(resolved.unavailable_kinds))} here (not root: iptables/tc)",
            file=sys.stderr,
        )
    if not show_progress and not verbose:
        outcome = run_test(resolved)
    else:
        from harness.progress import LineProgress, run_display

        display = run_display(verbose) if show_progress else LineProgress(sys.stderr, verbose)
        with display:
            outcome = run_test(resolved, progress=display.update if show_progress else None)
    return _report_outcome(outcome)


def _check_store_takes_runs(store: Path) -> None:
    """An existing --store that takes no new directory (read-only) is refused before any run."""
    from checker.results_file import refuses_files

    why = refuses_files(store) if store.is_dir() else None
    if why is not None:
        raise BadInput(f"--store: {store}: a run directory cannot be made there ({why})")


def _report_outcome(outcome: RunOutcome) -> tuple[int, Path]:
    """The run's last line: its directory, verdict, the faults that ran and the exit code."""
    results = _stored_results(outcome.run_dir)
    verdict = "not analyzed"
    if results is not None:
        verdict = f"valid={results.get('valid')}"
        for err in results.get("errors", [])[:5]:
            print(f"error: {err}", file=sys.stderr)
        anomalies = results.get("anomalies", [])
        if anomalies:
            classes = sorted({a.get("class", "?") for a in anomalies})
            verdict += f", {len(anomalies)} anomalies ({', '.join(classes)})"
    faults = ", ".join(f"{k} ×{n}" for k, n in sorted(outcome.faults_run.items())) or "none"
    print(f"{outcome.run_dir}: {verdict}; faults run: {faults} (exit {outcome.exit_code})")
    return outcome.exit_code, outcome.run_dir


def _stored_results(run_dir: Path) -> dict[str, Any] | None:
    """The run's results.json, or None when there is none to read: a write that failed
    leaves none (checker.results_file), and that is a verdict of unknown, not a crash."""
    try:
        results = json.loads((run_dir / RESULTS).read_text())
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def cmd_run(args: argparse.Namespace) -> int:
    if args.gate and args.no_analyze:
        raise BadInput("--gate: gates on the analysis, which --no-analyze skips")
    opts, default_nemesis = _run_options(args)
    code, run_dir = _execute(opts, not args.no_progress, default_nemesis, args.verbose)
    return gate(run_dir, opts.expect, tuple(opts.allow)) if args.gate and code in (0, 1) else code


def gate(run_dir: Path, expect: Sequence[str], allow: Sequence[str] = ()) -> int:
    """The scenario's expectation as the exit code: 0 every expected class found and nothing
    else but allowed ones, 1 otherwise, 2 unknown. The judgement is reports.expectation's, the
    same the report, junit.xml and nightly show."""
    results = _stored_results(run_dir)
    if results is None:
        print(f"gate: no readable {RESULTS} in {run_dir}: unknown", file=sys.stderr)
        return EXIT_UNKNOWN
    verdict = judge(results, expect, allow)
    if verdict.status == "unknown":
        return EXIT_UNKNOWN
    print(f"gate: {verdict.describe()}")
    return 0 if verdict.passed else 1


def cmd_repro(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    run_json = run_dir / RUN_JSON
    if not run_json.is_file():
        raise BadInput(f"RUN_DIR: no run.json in {args.run_dir}")
    try:
        check_repeatable(run_json)
        opts = options_from_run_json(run_json, args.store)
    except (ValueError, KeyError, TypeError) as e:
        raise BadInput(f"RUN_DIR: {run_json}: {e}") from e
    if opts.target not in TARGETS:  # the run's own name for it, not a flag of repro's
        raise BadInput(f"RUN_DIR: {run_json}: unknown target {opts.target!r}")
    if args.backend:
        opts = replace(opts, backend=args.backend)
    try:  # as `run` checks it, on every backend's path
        _check_shape(opts, frozenset(RANGES) | {"test_name"})
    except BadInput as e:
        raise BadInput(f"RUN_DIR: {run_json}: {e}") from e
    if args.no_analyze:
        opts = replace(opts, no_analyze=True)
    code, new_dir = _execute(
        opts, show_progress=not args.no_progress, verbose=args.verbose, stored_in=run_json
    )
    before, after = _classes(run_dir), _classes(new_dir)
    if before is not None and after is not None:
        if before == after:
            print(f"repro: same anomaly classes as {run_dir.name}: {sorted(before) or 'none'}")
        else:
            print(f"repro: classes differ: was {sorted(before)}, now {sorted(after)}")
    return code


def _classes(run_dir: Path) -> set[str] | None:
    """Anomaly classes of an analyzed run (None: not analyzed or verdict unknown)."""
    results = _stored_results(run_dir)
    if results is None or results.get("valid") == "unknown":
        return None
    anomalies = results.get("anomalies")
    if not isinstance(anomalies, list):
        return None
    return {str(a.get("class")) for a in anomalies if isinstance(a, dict)}


def _run_dir(path: Path) -> Path:
    """RUN_DIR as given on the command line: missing or not a directory is bad input (254);
    what is inside it is the checker's to judge (a broken history is a verdict, unknown)."""
    if not path.exists():
        raise BadInput(f"RUN_DIR: not found: {path}")
    if not path.is_dir():
        raise BadInput(f"RUN_DIR: not a directory: {path}")
    return path.resolve()


def cmd_analyze(args: argparse.Namespace) -> int:
    """Every RUN_DIR judged in one Spark application; exit 1 if any has anomalies, else 2 if
    any is unknown, else 0."""
    # all checked before Spark starts; one named twice (store/latest and its target) once
    run_dirs = list(dict.fromkeys(_run_dir(d) for d in args.run_dirs))
    _check_cluster_reaches(args, run_dirs)
    from checker.analyze import analyze_runs, combined_exit_code  # pyspark: only now
    from checker.results_file import StaleResults

    try:
        all_results = analyze_runs(
            run_dirs, spark_master=args.spark_master, spark_remote=args.spark_remote
        )
    except StaleResults as e:
        raise BadInput(f"RUN_DIR: {e}") from e
    for run_dir, results in zip(run_dirs, all_results, strict=True):
        anomalies = results.get("anomalies", [])
        print(f"{run_dir}: valid={results.get('valid')}, {len(anomalies)} anomalies")
        if not os.path.isfile(run_dir / RESULTS):
            print("  results.json: not written (the run directory takes no file)")
        for a in anomalies[:20]:
            print(f"  {a.get('class')}: {a.get('explanation')}")
        for err in results.get("errors", []):
            print(f"  error: {err}")
    return combined_exit_code(all_results)


def _check_cluster_reaches(args: argparse.Namespace, run_dirs: list[Path]) -> None:
    """A run outside the store our Spark cluster mounts is bad input, not a Java stack."""
    from harness.spark_mounts import outside_mounted_store

    for flag in ("spark_master", "spark_remote"):
        url = getattr(args, flag)
        why = outside_mounted_store(url, run_dirs) if url else None
        if why is not None:
            raise BadInput(f"--{flag.replace('_', '-')}: {why}")


def cmd_report(args: argparse.Namespace) -> int:
    """A directory that is not a run (neither run.json nor history.jsonl) is bad input and is
    left untouched; a run with a broken or partial history still gets its UNKNOWN page."""
    run_dir = _run_dir(args.run_dir)
    from reports.render import ReportNotWritten, UnreadableRun, UnusableResults, render_report
    from reports.rundata import NotARunDirectory

    try:  # matplotlib loads only here, when rendering
        print(render_report(run_dir, args.out))
    except (NotARunDirectory, UnusableResults, UnreadableRun) as e:
        raise BadInput(f"RUN_DIR: {e}") from e
    except ReportNotWritten as e:
        raise BadInput(f"{'--out' if args.out else 'RUN_DIR'}: {e}") from e
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if not args.store.is_dir():
        raise BadInput(f"--store: not a directory: {args.store}")
    from reports.serve import serve

    try:
        serve(args.store, host=args.host, port=args.port)
    except OSError as e:
        raise BadInput(f"--port: cannot listen on {args.host}:{args.port}: {e.strerror}") from e
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    """A failed build is reported like a run whose setup failed: one line, exit 2."""
    from harness.images import ImageBuildError, ensure_images
    from harness.progress import build_progress

    if not docker_answers():
        raise BadInput("images build: the Docker engine does not answer")
    started = time.monotonic()
    try:
        with build_progress() as report:
            tags = ensure_images(progress=report, force=args.force)
    except ImageBuildError as e:
        print(f"images build: {e}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"{tags.node} (base {tags.base}) ready in {time.monotonic() - started:.1f}s")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from harness.cluster import clean, collect_dead_catalogs

    hosts = []
    if args.nodes_file is not None:
        try:
            hosts = load_nodes_file(args.nodes_file)
        except ConfigError as e:
            raise BadInput(f"--nodes-file: {e}") from e
    for note in collect_dead_catalogs(args.store, args.run_id):  # before the nodes go
        print(note)
    removed = clean(run_id=args.run_id, store=args.store, hosts=hosts)
    for item in removed:
        print(f"removed {item}")
    print(f"clean: {len(removed)} item(s) removed")
    return 0


def _check_matrix(
    path: Path, store: Path, backend: str | None = None
) -> tuple[Matrix, dict[str, ResolvedRun]]:
    """The whole matrix is read before the first cell runs, and every cell resolved as `run`
    resolves its run (a target setting, a toggle, a nemesis for the cluster's shape): a typo
    in it, or in a scenario file it names, is bad input now, with the cell named, not a
    failed cell hours into the night. The cells' runs are left for judging together."""
    if not path.is_file():
        raise BadInput(f"--matrix: file not found: {path}")
    try:
        matrix = load_matrix(path)
    except ConfigError as e:
        raise BadInput(f"--matrix: {e}") from e
    runs = {}
    for cell in matrix.cells():
        try:
            opts = replace(cell_options(cell, store, backend), no_analyze=True)
            runs[cell.name] = _validate(opts)
        except OptionRangeError as e:  # the matrix checks ranges: a guard, named all the same
            raise BadInput(f"--matrix: {path}: cell {cell.name}: {e}") from e
        except BadInput as e:
            raise BadInput(f"--matrix: {path}: cell {cell.name}: {e}") from e
    return matrix, runs


def cmd_nightly(args: argparse.Namespace) -> int:
    store = args.store.resolve()
    matrix, runs = _check_matrix(args.matrix, store, args.backend)
    run_cell = harness_runner(runs)

    def run_or_stop(cell: NightlyCell, store: Path) -> RunOutcomeLike:
        """Ctrl-C stops the night, not only the cell it came in (run_test absorbs it)."""
        outcome = run_cell(cell, store)
        if outcome.exit_code == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        return outcome

    night = run_nightly(matrix, store=store, runner=run_or_stop, judge_together_after=True)
    return night.exit_code


COMMANDS = {
    "run": cmd_run,
    "analyze": cmd_analyze,
    "report": cmd_report,
    "repro": cmd_repro,
    "serve": cmd_serve,
    "clean": cmd_clean,
    "nightly": cmd_nightly,
    "sweep": run_sweep_args,
    "spark": cmd_spark,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (argparse's own errors leave by SystemExit(254))."""
    args = build_parser().parse_args(argv)
    command = args.command
    try:
        if command == "images":
            return cmd_images_build(args)
        return COMMANDS[command](args)
    except BadInput as e:
        print(f"schemachaos {command}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"schemachaos {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        traceback.print_exc()
        print(f"schemachaos {command}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main())
