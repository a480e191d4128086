"""The `schemachaos` command: run a test, analyze or report a stored run, repeat one, serve the
store, build images, clean up after a crash, run the nightly matrix.

Exit codes follow anomalies.md: 0 valid, 1 anomalies, 2 unknown or bad input, 255 a crash of the
tool itself. Bad input is one line naming the flag, file or host.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

EXIT_BAD_INPUT = 2
ROOT_NEMESES = frozenset({"partition", "lagging-learner"})  # iptables/tc on the host
EXIT_CRASH = 255


class BadInput(Exception):
    """Input the tool refuses: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="schemachaos",
        description="Jepsen-style chaos testing of schema synchronization.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser(
        "run",
        help="run a chaos test end to end",
        description=(
            "Provision a cluster, run the workload with the nemesis, record the history, "
            "analyze it. Flags override the fields of --scenario."
        ),
    )
    run.add_argument(
        "--backend",
        choices=["auto", "docker", "local", "ssh"],
        default=None,
        help="where nodes run (auto: docker when an engine answers, else local)",
    )
    run.add_argument("--nodes", type=_positive_int, default=None, help="node count (5)")
    run.add_argument(
        "--voters",
        type=_positive_int,
        default=None,
        help="Meta Storage voters, the first N nodes (3); the rest are learners",
    )
    run.add_argument(
        "--nodes-file",
        type=Path,
        default=None,
        help="TOML of [[nodes]] name, host, port, user, key (ssh backend)",
    )
    run.add_argument(
        "--time-limit", type=_positive_float, default=None, help="seconds of workload (60)"
    )
    run.add_argument("--concurrency", type=_positive_int, default=None, help="client processes (5)")
    run.add_argument(
        "--nemesis",
        default=None,
        help="comma list of fault kinds, 'all' or 'none' (all; on the local backend without "
        "root, the kinds that need no root)",
    )
    run.add_argument(
        "--nemesis-interval", type=_positive_float, default=None, help="seconds between faults (10)"
    )
    run.add_argument("--workload", default=None, help="workload name (ddl-dml)")
    run.add_argument(
        "--toggle",
        action="append",
        default=None,
        metavar="NAME",
        help="enable a bug toggle (repeatable)",
    )
    run.add_argument("--seed", type=_non_negative_int, default=None, help="random seed (0)")
    run.add_argument("--store", type=Path, default=None, help="results store (./store)")
    run.add_argument("--scenario", type=Path, default=None, help="scenario file (TOML)")
    run.add_argument(
        "--delay-ms", type=_positive_int, default=None, help="delay duration DD in ms (500)"
    )
    run.add_argument(
        "--max-skew-ms",
        type=_non_negative_int,
        default=None,
        help="max clock skew CSmax in ms (500)",
    )
    run.add_argument("--test-name", default=None, help="name of the test in the store")
    run.add_argument("--target", default=None, help="database under test (schemasync)")
    run.add_argument("--spark-master", default=None, help="Spark master for the checker")
    run.add_argument(
        "--ready-timeout",
        type=_positive_float,
        default=None,
        help="seconds to wait for the cluster to be ready (60)",
    )
    run.add_argument(
        "--local-base",
        default=None,
        help="local backend: node i binds base+i (127.0.0.10 -> n1 on 127.0.0.11)",
    )
    run.add_argument("--no-analyze", action="store_true", help="record only; no checker, no report")
    run.add_argument("--no-progress", action="store_true", help="no live display")
    run.add_argument(
        "--gate",
        action="store_true",
        help="exit 0 only if the anomaly classes found are exactly the scenario's `expect`",
    )

    analyze = sub.add_parser("analyze", help="check a stored run (writes results.json)")
    analyze.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    analyze.add_argument("--spark-master", default="local[*]")

    report = sub.add_parser("report", help="render report.html, junit.xml and plots of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    repro = sub.add_parser("repro", help="run again with a stored run's seed and options")
    repro.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    repro.add_argument("--backend", choices=["auto", "docker", "local", "ssh"], default=None)
    repro.add_argument("--store", type=Path, default=None)
    repro.add_argument("--no-analyze", action="store_true")
    repro.add_argument("--no-progress", action="store_true")

    serve = sub.add_parser("serve", help="browse the store over HTTP")
    serve.add_argument("--store", type=Path, default=Path("store"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_non_negative_int, default=8080)

    images = sub.add_parser("images", help="node images")
    images_sub = images.add_subparsers(dest="images_command", required=True, parser_class=Parser)
    build = images_sub.add_parser("build", help="build the node image (cached by content hash)")
    build.add_argument("--force", action="store_true", help="rebuild even when tags exist")

    clean = sub.add_parser(
        "clean",
        help="remove every container, network, process and iptables rule left by schemachaos",
    )
    clean.add_argument("--store", type=Path, default=Path("store"))
    clean.add_argument("--run-id", default=None, help="only what this run left")
    clean.add_argument(
        "--nodes-file", type=Path, default=None, help="also clean the ssh backend's hosts"
    )

    nightly = sub.add_parser("nightly", help="run a matrix of scenarios and gate on the results")
    nightly.add_argument("--matrix", type=Path, required=True, metavar="FILE")
    nightly.add_argument("--store", type=Path, default=Path("store"))
    nightly.add_argument("--backend", choices=["auto", "docker", "local", "ssh"], default=None)
    return parser


# -- run -----------------------------------------------------------------------------------


def _scenario_fields(path: Path) -> dict[str, Any]:
    """The run options a scenario sets, by RunOptions field name."""
    if not path.is_file():
        raise BadInput(f"--scenario: file not found: {path}")
    try:
        load_scenario = importlib.import_module("workloads.scenario").load_scenario
    except (ImportError, AttributeError) as e:
        raise BadInput(f"--scenario: scenarios are not available ({e})") from e
    try:
        scenario = load_scenario(path)
    except Exception as e:
        raise BadInput(f"--scenario: {path}: {e}") from e
    from dataclasses import fields, is_dataclass

    from harness.run import RunOptions

    if hasattr(scenario, "run_options_fields"):
        raw = dict(scenario.run_options_fields())
        for extra in ("nemesis_options", "expect"):
            if hasattr(scenario, extra):
                raw[extra] = getattr(scenario, extra)
    elif is_dataclass(scenario):
        raw = {f.name: getattr(scenario, f.name) for f in fields(scenario)}
    else:
        raw = dict(scenario)
    aliases = {"name": "test_name", "path": "scenario"}
    known = {f.name for f in fields(RunOptions)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = aliases.get(key, key)
        if name not in known or value is None:
            continue
        if name in {"nemesis", "toggles", "expect"}:
            value = tuple(value)
        elif name in {"target_config", "workload_options", "nemesis_options"}:
            value = dict(value)
        elif name == "scenario":
            value = Path(value)
        out[name] = value
    return out


def _nemesis_kinds(text: str) -> tuple[str, ...]:
    try:
        parse_kinds = importlib.import_module("nemesis").parse_kinds
    except (ImportError, AttributeError) as e:
        if text.strip() in {"", "none"}:
            return ()
        raise BadInput(f"--nemesis: nemeses are not available ({e})") from e
    try:
        return tuple(parse_kinds(text))
    except ValueError as e:
        raise BadInput(f"--nemesis: {e}") from e


def _known_toggles() -> frozenset[str] | None:
    try:
        from schemasync.toggles import ALL_TOGGLES
    except ImportError:
        return None
    return ALL_TOGGLES


def _validate(opts: Any) -> None:
    """Refuse bad input before anything is started; raise BadInput naming the flag."""
    from harness.cluster import docker_answers
    from harness.run import build_schedule

    if opts.voters > opts.nodes and opts.backend != "ssh":
        raise BadInput(f"--voters: {opts.voters} voters but only {opts.nodes} nodes")
    from harness.target import TARGETS

    if opts.target not in TARGETS:
        raise BadInput(f"--target: unknown target {opts.target!r} (known: {', '.join(TARGETS)})")
    known_toggles = _known_toggles()
    for toggle in opts.toggles:
        if known_toggles is not None and toggle not in known_toggles:
            raise BadInput(
                f"--toggle: unknown toggle {toggle!r} (known: {', '.join(sorted(known_toggles))})"
            )
    try:
        workloads = importlib.import_module("workloads")
        names = getattr(workloads, "WORKLOADS", None)
        if names and opts.workload not in names:
            raise BadInput(
                f"--workload: unknown workload {opts.workload!r} (known: {', '.join(names)})"
            )
    except ImportError:
        pass
    if opts.nemesis:
        nodes = [f"n{i}" for i in range(1, opts.nodes + 1)]
        try:
            build_schedule(opts, nodes, nodes[: opts.voters], nodes[opts.voters :])
        except ImportError as e:
            raise BadInput(f"--nemesis: nemeses are not available ({e})") from e
        except (ValueError, KeyError) as e:
            raise BadInput(f"--nemesis: {e}") from e
    if opts.backend == "ssh":
        from harness.remote_ssh import NodesFileError, load_nodes_file

        if opts.nodes_file is None:
            raise BadInput("--nodes-file: required with --backend ssh")
        try:
            load_nodes_file(opts.nodes_file)
        except NodesFileError as e:
            raise BadInput(f"--nodes-file: {e}") from e
    elif opts.nodes_file is not None and not opts.nodes_file.is_file():
        raise BadInput(f"--nodes-file: file not found: {opts.nodes_file}")
    if opts.backend == "docker" and not docker_answers():
        raise BadInput("--backend docker: the Docker engine does not answer")
    needs_root = sorted(set(opts.nemesis) & ROOT_NEMESES)
    if opts.backend == "local" and needs_root and os.geteuid() != 0:
        raise BadInput(
            f"--nemesis {','.join(needs_root)}: the local backend needs root for iptables/tc "
            "(run as root, or use --backend docker)"
        )
    if opts.backend == "local" or (opts.backend == "auto" and not docker_answers()):
        from harness.remote import RemoteError
        from harness.remote_local import check_ports_free, local_address

        try:
            check_ports_free([local_address(i, opts.local_base) for i in range(1, opts.nodes + 1)])
        except RemoteError as e:
            raise BadInput(f"--backend local: {str(e).removeprefix('local: ')}") from e


def _run_options(args: argparse.Namespace) -> tuple[Any, bool]:
    """RunOptions from scenario then flags, and whether the nemesis list is the default."""
    from harness.run import RunOptions

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
        "toggles": tuple(args.toggle) if args.toggle else None,
        "seed": args.seed,
        "store": args.store,
        "delay_ms": args.delay_ms,
        "max_skew_ms": args.max_skew_ms,
        "test_name": args.test_name,
        "target": args.target,
        "spark_master": args.spark_master,
        "ready_timeout_s": args.ready_timeout,
        "local_base": args.local_base,
    }
    given.update({k: v for k, v in flags.items() if v is not None})
    defaulted = "nemesis" not in given
    if defaulted:
        given["nemesis"] = _nemesis_kinds("all")
    if args.no_analyze:
        given["no_analyze"] = True
    try:
        return RunOptions(**given), defaulted
    except TypeError as e:
        raise BadInput(f"--scenario: {e}") from e


def _execute(opts: Any, show_progress: bool, default_nemesis: bool = False) -> tuple[int, Path]:
    from dataclasses import replace

    from harness.cluster import ProvisionError, resolve_backend
    from harness.run import run_test

    try:
        backend, why = resolve_backend(opts.backend)
    except ProvisionError as e:
        raise BadInput(str(e)) from e
    print(f"schemachaos: {why}", file=sys.stderr)
    opts = replace(opts, backend=backend)
    if backend == "local" and os.geteuid() != 0:
        print(
            "schemachaos: not root: the local backend cannot inject network faults",
            file=sys.stderr,
        )
        if default_nemesis:
            opts = replace(opts, nemesis=tuple(k for k in opts.nemesis if k not in ROOT_NEMESES))
    _validate(opts)
    if not show_progress:
        outcome = run_test(opts)
    else:
        from harness.progress import LiveProgress

        with LiveProgress() as live:
            outcome = run_test(opts, progress=live.update)
    results_path = outcome.run_dir / "results.json"
    verdict = "not analyzed"
    if results_path.is_file():
        results = json.loads(results_path.read_text())
        verdict = f"valid={results.get('valid')}"
        for err in results.get("errors", [])[:5]:
            print(f"error: {err}", file=sys.stderr)
        anomalies = results.get("anomalies", [])
        if anomalies:
            classes = sorted({a.get("class", "?") for a in anomalies})
            verdict += f", {len(anomalies)} anomalies ({', '.join(classes)})"
    print(f"{outcome.run_dir}: {verdict} (exit {outcome.exit_code})")
    return outcome.exit_code, outcome.run_dir


def cmd_run(args: argparse.Namespace) -> int:
    opts, default_nemesis = _run_options(args)
    code, run_dir = _execute(opts, not args.no_progress, default_nemesis)
    return gate(run_dir, opts.expect) if args.gate and code in (0, 1) else code


def gate(run_dir: Path, expect: Sequence[str]) -> int:
    """The scenario's expectation as the exit code: 0 found == expect, 1 otherwise."""
    results = json.loads((run_dir / "results.json").read_text())
    if results.get("valid") == "unknown":
        return EXIT_BAD_INPUT
    found = {a.get("class") for a in results.get("anomalies", [])}
    expected = set(expect)
    missed, unexpected = sorted(expected - found), sorted(found - expected)
    if not missed and not unexpected:
        print(f"gate: as expected ({', '.join(sorted(expected)) or 'no anomalies'})")
        return 0
    print(f"gate: missed {missed or 'nothing'}, unexpected {unexpected or 'nothing'}")
    return 1


def cmd_repro(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from harness.run import options_from_run_json

    run_dir = _run_dir(args.run_dir)
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        raise BadInput(f"RUN_DIR: no run.json in {args.run_dir}")
    try:
        opts = options_from_run_json(run_json, args.store)
    except (ValueError, KeyError, TypeError) as e:
        raise BadInput(f"RUN_DIR: {run_json}: {e}") from e
    if args.backend:
        opts = replace(opts, backend=args.backend)
    if args.no_analyze:
        opts = replace(opts, no_analyze=True)
    code, new_dir = _execute(opts, show_progress=not args.no_progress)
    before, after = _classes(run_dir), _classes(new_dir)
    if before is not None and after is not None:
        if before == after:
            print(f"repro: same anomaly classes as {run_dir.name}: {sorted(before) or 'none'}")
        else:
            print(f"repro: classes differ: was {sorted(before)}, now {sorted(after)}")
    return code


def _classes(run_dir: Path) -> set[str] | None:
    """Anomaly classes of an analyzed run (None: not analyzed or verdict unknown)."""
    path = run_dir / "results.json"
    if not path.is_file():
        return None
    results = json.loads(path.read_text())
    if results.get("valid") == "unknown":
        return None
    return {str(a.get("class")) for a in results.get("anomalies", [])}


def _run_dir(path: Path) -> Path:
    if not path.exists():
        raise BadInput(f"RUN_DIR: not found: {path}")
    if not path.is_dir():
        raise BadInput(f"RUN_DIR: not a directory: {path}")
    return path.resolve()


def cmd_analyze(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    analyze = importlib.import_module("checker.analyze")
    results = analyze.analyze_run(run_dir, spark_master=args.spark_master)
    anomalies = results.get("anomalies", [])
    print(f"{run_dir}: valid={results.get('valid')}, {len(anomalies)} anomalies")
    for a in anomalies[:20]:
        print(f"  {a.get('class')}: {a.get('explanation')}")
    for err in results.get("errors", []):
        print(f"  error: {err}")
    return int(analyze.exit_code(results))


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    render = importlib.import_module("reports.render")
    print(render.render_report(run_dir))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if not args.store.is_dir():
        raise BadInput(f"--store: not a directory: {args.store}")
    serve = importlib.import_module("reports.serve")
    try:
        serve.serve(args.store, host=args.host, port=args.port)
    except OSError as e:
        raise BadInput(f"--port: cannot listen on {args.host}:{args.port}: {e.strerror}") from e
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    from harness.cluster import docker_answers
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
        return EXIT_BAD_INPUT
    print(f"{tags.node} (base {tags.base}) ready in {time.monotonic() - started:.1f}s")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from harness.cluster import clean

    if args.nodes_file is not None:
        from harness.remote_ssh import NodesFileError, load_nodes_file

        try:
            load_nodes_file(args.nodes_file)
        except NodesFileError as e:
            raise BadInput(f"--nodes-file: {e}") from e
    removed = clean(run_id=args.run_id, store=args.store, nodes_file=args.nodes_file)
    for item in removed:
        print(f"removed {item}")
    print(f"clean: {len(removed)} item(s) removed")
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    if not args.matrix.is_file():
        raise BadInput(f"--matrix: file not found: {args.matrix}")
    try:
        nightly = importlib.import_module("reports.nightly")
    except ImportError as e:
        raise BadInput(f"nightly: not available ({e})") from e
    for name in ("run_nightly", "run_matrix"):
        fn = getattr(nightly, name, None)
        if fn is not None:
            kwargs: dict[str, Any] = {"store": args.store}
            if args.backend:
                kwargs["backend"] = args.backend
            return int(fn(args.matrix, **kwargs))
    main_fn = nightly.main
    argv = ["--matrix", str(args.matrix), "--store", str(args.store)]
    if args.backend:
        argv += ["--backend", args.backend]
    return int(main_fn(argv))


COMMANDS = {
    "run": cmd_run,
    "analyze": cmd_analyze,
    "report": cmd_report,
    "repro": cmd_repro,
    "serve": cmd_serve,
    "clean": cmd_clean,
    "nightly": cmd_nightly,
}


def main(argv: Sequence[str] | None = None) -> int:
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
        return EXIT_BAD_INPUT
    except FileNotFoundError as e:
        print(f"schemachaos {command}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        import traceback

        traceback.print_exc()
        print(f"schemachaos {command}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main())
