"""A class-data-sharing archive of the classes an analysis loads, so that the driver's JVM maps
them instead of finding, reading and verifying each in some 250 jars.

    python -m checker.class_archive RUN_DIR

analyzes RUN_DIR in a JVM started with `-XX:ArchiveClassesAtExit` and keeps the archive it
writes as it exits (`make setup` does this once, on a labelled history of the repository).
`build_session` passes `-XX:SharedArchiveFile` when the archive (`CLASS_ARCHIVE`) is there. An
archive belongs to one JDK and one pyspark: it lives in the virtualenv beside that pyspark, and
a JVM that finds it does not match (another JDK) says so on stderr and starts without it.
Measured on a cold 8,700-event history: a session start went from 13-16 s to 8-9 s, and the
first read + count of its JSON from 10-11 s to 5-6 s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkContext

from checker.analyze import AnalyzeOptions, analyze_run
from checker.session import CLASS_ARCHIVE as ARCHIVE
from checker.session import build_session
from contract.exit_codes import EXIT_BAD_INPUT


def build(run_dir: Path) -> Path:
    """Analyze `run_dir` in a JVM that writes the archive as it exits; the archive's path."""
    partial = ARCHIVE.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    spark = build_session(
        "local[2]",
        short_lived=True,
        java_options=f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off",
    )
    proc = SparkContext._gateway.proc if SparkContext._gateway is not None else None
    try:
        analyze_run(run_dir, spark=spark, options=AnalyzeOptions(write_results=False))
    finally:
        spark.stop()
    if proc is None:
        raise RuntimeError("the driver's JVM was not started by this process")
    # the JVM exits when its stdin closes, and writes the archive on the way out
    proc.stdin.close()
    proc.wait(timeout=600)
    if not partial.is_file():
        raise RuntimeError(f"the JVM exited ({proc.returncode}) without writing {partial}")
    os.replace(partial, ARCHIVE)
    return ARCHIVE


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python -m checker.class_archive RUN_DIR", file=sys.stderr)
        return EXIT_BAD_INPUT
    ARCHIVE.unlink(missing_ok=True)  # the JVM must not map the old one while it dumps
    path = build(Path(sys.argv[1]))
    print(f"class archive: {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
