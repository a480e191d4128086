"""`python -m checker RUN_DIR [--spark-master URL]`: analyze a run, exit with its verdict code.

The lead wires `schemachaos analyze` to `main`. Exit codes: 0 valid, 1 anomalies, 2 unknown,
255 the checker itself crashed.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

CRASH = 255


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="checker", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory (history.md contract)")
    parser.add_argument("--spark-master", default="local[*]", help="any Spark master URL")
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    args = parser.parse_args(argv)
    try:
        from checker.analyze import analyze_run, exit_code

        results = analyze_run(args.run_dir, args.spark_master)
    except Exception as e:  # the tool itself failed: say so, distinctly from a verdict
        traceback.print_exc(file=sys.stderr)
        print(f"checker crashed: {type(e).__name__}: {e}", file=sys.stderr)
        return CRASH
    code = exit_code(results)
    print(f"valid: {results['valid']}  ({len(results['anomalies'])} anomalies)")
    if not args.quiet:
        for err in results["errors"]:
            print(f"error: {err}")
        for a in results["anomalies"][:20]:
            print(f"{a['class']}: {a['explanation']}")
        if results["not_applicable"]:
            print("not applicable: " + ", ".join(results["not_applicable"]))
    print(f"results: {args.run_dir / 'results.json'}")
    return code
