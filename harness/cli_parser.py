"""The command line's grammar: `schemachaos <command> [flags]`, every flag typed and checked
by argparse, errors one line and exit 254 (what each command does is harness.cli)."""

from __future__ import annotations

import argparse
import ipaddress
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from harness.backends import backend_choices
from harness.exit_codes import EXIT_BAD_INPUT
from harness.spark_cli import add_spark_commands
from harness.sweep import add_sweep_command


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) and exit 254."""

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


def _version() -> str:
    """The installed distribution's version: pyproject's, the one a bug report should name."""
    try:
        return metadata.version("schemachaos")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install .)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="schemachaos",
        description="Jepsen-style chaos testing of schema synchronization.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
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
        choices=backend_choices(),
        default=None,
        help=(
            "where nodes run (auto: docker when an engine answers, else local; sim: one "
            "process on virtual time, replayable bit for bit, docs/simulation.md)"
        ),
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
        help="enable a schemasync bug toggle (repeatable; the target setting toggles)",
    )
    run.add_argument("--seed", type=_non_negative_int, default=None, help="random seed (0)")
    run.add_argument("--store", type=Path, default=None, help="results store (./store)")
    run.add_argument("--scenario", type=Path, default=None, help="scenario file (TOML)")
    run.add_argument(
        "--delay-ms",
        type=_positive_int,
        default=None,
        help="schemasync delay duration DD in ms (500)",
    )
    run.add_argument(
        "--max-skew-ms",
        type=_non_negative_int,
        default=None,
        help="schemasync max clock skew CSmax in ms (500)",
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
        type=_positive_float,
        default=None,
        help="seconds to wait for the cluster to be ready (60)",
    )
    run.add_argument(
        "--local-base",
        type=_loopback_base,
        default=None,
        help="local backend: node i binds base+i (127.0.0.10 -> n1 on 127.0.0.11)",
    )
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

    analyze = sub.add_parser("analyze", help="check a stored run (writes results.json)")
    analyze.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="one or more run directories"
    )
    analyzed_at = analyze.add_mutually_exclusive_group()
    analyzed_at.add_argument("--spark-master", default="local[*]")
    analyzed_at.add_argument(
        "--spark-remote", default=None, help="a Spark Connect server (sc://HOST:15002)"
    )

    report = sub.add_parser("report", help="render report.html, junit.xml and plots of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    repro = sub.add_parser("repro", help="run again with a stored run's seed and options")
    repro.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    repro.add_argument("--backend", choices=backend_choices(), default=None)
    repro.add_argument("--store", type=Path, default=None)
    repro.add_argument("--no-analyze", action="store_true")
    repro.add_argument("--no-progress", action="store_true")
    repro.add_argument("-v", "--verbose", action="store_true")

    serve = sub.add_parser("serve", help="browse the store over HTTP")
    serve.add_argument("--store", type=Path, default=Path("store"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080)

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
    nightly.add_argument("--backend", choices=backend_choices(), default=None)
    add_sweep_command(sub)
    add_spark_commands(sub)
    return parser
