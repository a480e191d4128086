"""`schemachaos spark up [--workers N] [--connect]` and `schemachaos spark down`: the grammar
and the commands of the containerized Spark cluster (harness.spark_cluster)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contract.exit_codes import EXIT_FAILED, EXIT_OK


def add_spark_commands(sub: argparse._SubParsersAction) -> None:
    """Add `spark up` / `spark down` to the top-level subcommands (`sub`)."""
    spark = sub.add_parser("spark", help="a Spark standalone cluster in containers")
    actions = spark.add_subparsers(dest="spark_command", required=True)
    up = actions.add_parser("up", help="start a master, N workers and optionally Spark Connect")
    up.add_argument("--workers", type=_workers, default=2, help="number of workers (2)")
    up.add_argument("--connect", action="store_true", help="also a Spark Connect server (15002)")
    up.add_argument(
        "--store",
        type=Path,
        default=Path("store"),
        help="the run store, bind-mounted at the same path in every container (./store)",
    )
    up.add_argument("--name", default="default", help="cluster name (several may be up)")
    down = actions.add_parser("down", help="remove the cluster's containers and network")
    down.add_argument("--name", default=None, help="only this cluster (default: every one)")


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= 16:
        raise argparse.ArgumentTypeError(f"between 1 and 16, got {value}")
    return value


def cmd_spark(args: argparse.Namespace) -> int:
    """`spark up` prints the URLs to pass to `analyze`; `spark down` what it removed."""
    from harness.remote_docker import docker_client
    from harness.spark_cluster import SparkClusterError, spark_down, spark_up

    client = docker_client(timeout=900)
    if args.spark_command == "down":
        removed = spark_down(client, args.name)
        for item in removed:
            print(f"removed {item}")
        print(f"spark down: {len(removed)} item(s) removed")
        return EXIT_OK
    try:
        cluster = spark_up(
            client,
            args.store,
            workers=args.workers,
            connect=args.connect,
            name=args.name,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except SparkClusterError as e:
        print(f"schemachaos spark up: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"master:  {cluster.master_url}   (analyze --spark-master {cluster.master_url})")
    print(f"web UI:  {cluster.master_ui}")
    if cluster.connect_url:
        print(f"connect: {cluster.connect_url}   (analyze --spark-remote {cluster.connect_url})")
    print(f"store:   {args.store.resolve()} (mounted at the same path on every worker)")
    return EXIT_OK
