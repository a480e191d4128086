"""The command line's grammar: `schemachaos <command> [flags]`, every flag typed and checked
by argparse, errors one line and exit 254 (what each command does is harness.cli)."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from contract.exit_codes import EXIT_BAD_INPUT
from harness.backends import backend_choices
from harness.cluster_spec import check_run_id
from harness.spark_cli import add_spark_commands
from harness.sweep import add_sweep_command
from workloads.option_ranges import RANGES


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) and exit 254."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


# What `add_subparsers` returns: each command's function adds its parser to it
Subparsers = argparse._SubParsersAction


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _in_range(field: str) -> Callable[[str], int | float]:
    """The argparse type of a ranged run option (workloads.option_ranges): a value out of its
    range, NaN or infinite is refused here, naming the range."""
    bounds = RANGES[field]

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if bounds.integer else float(text)
        except ValueError:
            what = "an integer" if bounds.integer else "a number"
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        why = bounds.problem(value)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    parse.__name__ = field  # argparse names the type in its own messages
    return parse


def _ranged_help(field: str, what: str) -> str:
    """`what (default); its range`: the range is the table's, as the error states it."""
    return f"{what}; {RANGES[field].describe()}"


def _bounded_ms(low: int, high: int) -> Callable[[str], int]:
    """Milliseconds of a target setting given as a flag, within low..high."""

    def parse(text: str) -> int:
        value = _non_negative_int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"needs an integer in {low}..{high}, got {value}")
        return value

    return parse


MAX_SETTING_MS = 3_600_000  # DD and CSmax as flags: up to an hour


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port (0..65535): {value}")
    return value


def _loopback_base(text: str) -> str:
    """--local-base: node i binds base + i, so the base must be a 127.0.0.0/8 address."""
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None
    if not address.is_loopback:
        raise argparse.ArgumentTypeError(f"not in 127.0.0.0/8: {text}")
    return text


def _run_id(text: str) -> str:
    """--run-id: exactly one run's id; an empty one must not widen clean to every run."""
    try:
        return check_run_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _version() -> str:
    """The installed distribution's version: pyproject's, the one a bug report should name."""
    try:
        return metadata.version("schemachaos")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install .)"


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: one function each, in the order `--help` lists them."""
    parser = Parser(
        prog="schemachaos",
        description="Jepsen-style chaos testing of schema synchronization.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_run(sub)
    _add_analyze(sub)
    _add_report(sub)
    _add_repro(sub)
    _add_serve(sub)
    _add_images(sub)
    _add_clean(sub)
    _add_nightly(sub)
    add_sweep_command(sub)
    add_spark_commands(sub)
    return parser


def _add_run(sub: Subparsers) -> None:
    run = sub.add_parser(
        "run",
        help="run a chaos test end to end",
        description=(
            "Provision a cluster, run the workload with the nemesis, record the history, "
            "analyze it. Flags override the fields of --scenario."
        ),
    )
    _add_cluster_flags(run)
    _add_workload_flags(run)
    _add_target_flags(run)
    _add_run_output_flags(run)


def _add_cluster_flags(run: argparse.ArgumentParser) -> None:
    """Where the nodes run and how many; the ranged ones say their range in their help."""
    run.add_argument(
        "--backend",
        choices=backend_choices(),
        default=None,
        help=(
            "where nodes run (auto: docker when an engine answers, else local; sim: one "
            "process on virtual time, replayable bit for bit, docs/simulation.md)"
        ),
    )
    run.add_argument(
        "--nodes",
        type=_in_range("nodes"),
        default=None,
        help=_ranged_help("nodes", "node count (5)"),
    )
    run.add_argument(
        "--voters",
        type=_in_range("voters"),
        default=None,
        help=_ranged_help(
            "voters", "Meta Storage voters, the first N nodes (3); the rest are learners"
        ),
    )
    run.add_argument(
        "--nodes-file",
        type=Path,
        default=None,
        help="TOML of [[nodes]] name, host, port, user, key (ssh backend)",
    )


def _add_workload_flags(run: argparse.ArgumentParser) -> None:
    """What the clients and the nemesis do, for how long, from which seed, into which store."""
    run.add_argument(
        "--time-limit",
        type=_in_range("time_limit_s"),
        default=None,
        help=_ranged_help("time_limit_s", "seconds of workload (60)"),
    )
    run.add_argument(
        "--concurrency",
        type=_in_range("concurrency"),
        default=None,
        help=_ranged_help("concurrency", "client processes (5)"),
    )
    run.add_argument(
        "--nemesis",
        default=None,
        help="comma list of fault kinds, 'all' or 'none' (all; on the local backend without "
        "root, the kinds that need no root)",
    )
    run.add_argument(
        "--nemesis-interval",
        type=_in_range("nemesis_interval_s"),
        default=None,
        help=_ranged_help(
            "nemesis_interval_s",
            "seconds between faults (10), at most 302400 faults (7 days at 1 s) a run",
        ),
    )
    run.add_argument("--workload", default=None, help="workload name (ddl-dml)")
    run.add_argument(
        "--toggle",
        action="append",
        default=None,
        metavar="NAME",
        help="enable a schemasync bug toggle (repeatable; the target setting toggles)",
    )
    run.add_argument(
        "--seed", type=_in_range("seed"), default=None, help=_ranged_help("seed", "random seed (0)")
    )
    run.add_argument("--store", type=Path, default=None, help="results store (./store)")
    run.add_argument("--scenario", type=Path, default=None, help="scenario file (TOML)")


def _add_target_flags(run: argparse.ArgumentParser) -> None:
    """The database under test and the settings of schemasync's that are also flags."""
    run.add_argument(
        "--delay-ms",
        type=_bounded_ms(1, MAX_SETTING_MS),
        default=None,
        help=f"schemasync delay duration DD in ms (500; 1..{MAX_SETTING_MS})",
    )
    run.add_argument(
        "--max-skew-ms",
        type=_bounded_ms(0, MAX_SETTING_MS),
        default=None,
        help=f"schemasync max clock skew CSmax in ms (500; 0..{MAX_SETTING_MS})",
    )
    run.add_argument("--test-name", default=None, help="name of the test in the store")
    run.add_argument("--target", default=None, help="database under test (schemasync)")
    spark_at = run.add_mutually_exclusive_group()
    spark_at.add_argument("--spark-master", default=None, help="Spark master for the checker")
    spark_at.add_argument(
        "--spark-remote", default=None, help="a Spark Connect server (sc://HOST:15002)"
    )
    run.add_argument(
        "--ready-timeout",
        type=_in_range("ready_timeout_s"),
        default=None,
        help=_ranged_help("ready_timeout_s", "seconds to wait for the cluster to be ready (60)"),
    )
    run.add_argument(
        "--local-base",
        type=_loopback_base,
        default=None,
        help="local backend: node i binds base+i (127.0.0.10 -> n1 on 127.0.0.11)",
    )


def _add_run_output_flags(run: argparse.ArgumentParser) -> None:
    """What the run shows while it goes and what its exit code judges."""
    run.add_argument("--no-analyze", action="store_true", help="record only; no checker, no report")
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="show nothing while the run goes (default: a live panel on a terminal, else one "
        "line per phase and per fault)",
    )
    run.add_argument(
        "-v", "--verbose", action="store_true", help="also stream controller.log to stderr"
    )
    run.add_argument(
        "--gate",
        action="store_true",
        help="exit 0 only if the anomaly classes found are exactly the scenario's `expect`",
    )


def _add_analyze(sub: Subparsers) -> None:
    analyze = sub.add_parser("analyze", help="check a stored run (writes results.json)")
    analyze.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="one or more run directories"
    )
    analyzed_at = analyze.add_mutually_exclusive_group()
    analyzed_at.add_argument("--spark-master", default="local[*]")
    analyzed_at.add_argument(
        "--spark-remote", default=None, help="a Spark Connect server (sc://HOST:15002)"
    )


def _add_report(sub: Subparsers) -> None:
    report = sub.add_parser("report", help="render report.html, junit.xml and plots of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    report.add_argument(
        "--out", type=Path, default=None, metavar="DIR",
        help="write the pages here instead (a read-only or archived run directory)",
    )  # fmt: skip


def _add_repro(sub: Subparsers) -> None:
    repro = sub.add_parser("repro", help="run again with a stored run's seed and options")
    repro.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    repro.add_argument("--backend", choices=backend_choices(), default=None)
    repro.add_argument("--store", type=Path, default=None)
    repro.add_argument("--no-analyze", action="store_true")
    repro.add_argument("--no-progress", action="store_true")
    repro.add_argument("-v", "--verbose", action="store_true")


def _add_serve(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="browse the store over HTTP")
    serve.add_argument("--store", type=Path, default=Path("store"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080)


def _add_images(sub: Subparsers) -> None:
    images = sub.add_parser("images", help="node images")
    images_sub = images.add_subparsers(dest="images_command", required=True, parser_class=Parser)
    build = images_sub.add_parser("build", help="build the node image (cached by content hash)")
    build.add_argument("--force", action="store_true", help="rebuild even when tags exist")


def _add_clean(sub: Subparsers) -> None:
    clean_help = (
        "remove what schemachaos runs left: without --run-id everything of ours, of every run "
        "(runs still going too, and the Spark cluster); with it, that run's only"
    )
    clean = sub.add_parser("clean", help=clean_help, description=clean_help)
    clean.add_argument("--store", type=Path, default=Path("store"))
    clean.add_argument(
        "--run-id",
        type=_run_id,
        default=None,
        help="only what this run left (its containers, network, processes, reaper or watchdog, "
        "host iptables rules, temp area), matched exactly; without it, every run's",
    )
    clean.add_argument(
        "--nodes-file", type=Path, default=None, help="also clean the ssh backend's hosts"
    )


def _add_nightly(sub: Subparsers) -> None:
    nightly = sub.add_parser("nightly", help="run a matrix of scenarios and gate on the results")
    nightly.add_argument("--matrix", type=Path, required=True, metavar="FILE")
    nightly.add_argument("--store", type=Path, default=Path("store"))
    nightly.add_argument("--backend", choices=backend_choices(), default=None)
