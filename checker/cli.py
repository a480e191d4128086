"""`python -m checker RUN_DIR [--spark-master URL | --spark-remote URL]`: analyze a run.

The exit code is the verdict's.

Exit codes are Jepsen's (anomalies.md "Verdict"): 0 valid, 1 anomalies, 2 unknown (including a
history that breaks the contract), 130 interrupted (Ctrl-C), 254 bad arguments or a RUN_DIR
that does not exist (or holds an earlier results.json that cannot be replaced), 255 the
checker itself crashed. A run directory that takes no file (a read-only mount) is judged all
the same: its verdict is printed, not written.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from contract.exit_codes import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_INTERRUPTED


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 254, not its usual 2 (a verdict here)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="checker", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory (history.md contract)")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--spark-master", default="local[*]", help="any Spark master URL")
    engine.add_argument(
        "--spark-remote", default=None, help="a Spark Connect server (sc://HOST:15002)"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    args = parser.parse_args(argv)
    if args.spark_remote is not None and not args.spark_remote.startswith("sc://"):
        parser.error(
            f"--spark-remote: not a Spark Connect URL (sc://HOST:PORT): {args.spark_remote}"
        )
    if not args.run_dir.is_dir():
        why = "not a directory" if args.run_dir.exists() else "not found"
        print(f"checker: RUN_DIR: {why}: {args.run_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        from checker.analyze import analyze_run, exit_code
        from checker.results_file import StaleResults

        results = analyze_run(args.run_dir, args.spark_master, spark_remote=args.spark_remote)
    except StaleResults as e:  # refused before anything was analysed
        print(f"checker: RUN_DIR: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("checker: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # the tool itself failed: say so, distinctly from a verdict
        traceback.print_exc(file=sys.stderr)
        print(f"checker crashed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CRASH
    code = exit_code(results)
    print(f"valid: {results['valid']}  ({len(results['anomalies'])} anomalies)")
    if not args.quiet:
        for err in results["errors"]:
            print(f"error: {err}")
        for a in results["anomalies"][:20]:
            print(f"{a['class']}: {a['explanation']}")
        if results["not_applicable"]:
            print("not applicable: " + ", ".join(results["not_applicable"]))
    written = os.path.isfile(args.run_dir / "results.json")
    print(f"results: {args.run_dir / 'results.json'}" + ("" if written else " (not written)"))
    return code
