"""Checker scale benchmark: synthetic histories of 10^5, 10^6 and 10^7 events analyzed end to
end on local[2]; prints events/s, how time grows with size, and the ratio to a bare Spark scan
of the same Parquet.

    python benchmarks/checker_scale.py [--sizes 100000 1000000 10000000] [--dir /tmp/checker-bench]

Histories come from `synthetic` (a model of a correct cluster, so the verdict must be
valid: true) and are kept in --dir between runs. "first" is the whole pipeline from JSON
(parse, validation, Parquet copy, checks, statistics); "again" re-analyzes from the Parquet
copy. "pair" is the pairing of completions with invokes alone, from the same copy: a floor no
analysis goes below, to judge a target against. "growth" is the exponent k of time ~ events^k
between one size and the previous (1 is linear). Targets (issue 7): >= 200,000 events/s at
10^7, growth at most n log n, again <= 3x the bare scan; issue 20's at 10^7: 200,000 events/s
from the columnar copy and 100,000 from JSONL ("first"). "again" re-reads the Parquet copy the
first analysis wrote, which is what a columnar copy of that size is rewritten into. The
driver's peak heap over both analyses of a size (not the bare scans) is printed with them
(local mode: the executors' heap too).

    python benchmarks/checker_scale.py --ratios RUN_DIR [--spark-remote sc://HOST:15002|local[2]]
        [--floors]

prints issue 20's ratios, one measurement each, every cold one in a fresh process (a JVM start
included): a cold `python -m checker` of RUN_DIR (a real run of ~10^4 events) against a bare
session start + JSON read + count of its history; the same run through a warm Spark Connect
session (the median of the later half of --warm-rounds analyses); 20 copies of it in one
`analyze_runs` (one plan for the batch, partitioned by run) against one cold; and a synthetic
foreign JSONL of --foreign-events (10^6) analyzed cold against a bare inferred JSON scan +
count. With --floors each ratio is followed by its floor: the same analysis with no check and
no statistics (the history read and validated, the frames, the facts, the verdict's
preconditions), and, warm, an action's round trip through the same session.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from checker.analyze import AnalyzeOptions, analyze_run
from checker.session import build_session, connect_session
from contract.rundir import HISTORY_PARQUET
from synthetic import generate_run


def pairing_floor(spark: SparkSession, parquet: Path) -> float:
    """Seconds to pair every completion with its invoke and nothing else: the light columns
    read, one lag per process in index order (Jepsen's pairing, which every check reads), and
    a sum over the result so that no part of it is pruned. No analysis can be faster."""
    start = time.monotonic()
    w = Window.partitionBy("process").orderBy("index")
    events = spark.read.parquet(str(parquet)).select("index", "process", "type", "f")
    paired = events.select(
        "index", "type", F.lag(F.struct("type", "f", "index")).over(w).alias("p")
    ).where((F.col("type") != "invoke") & (F.col("p.type") == "invoke"))
    paired.select(F.sum(F.col("index") - F.col("p.index"))).collect()
    return time.monotonic() - start


def bare_scan(spark: SparkSession, parquet: Path) -> float:
    """Seconds to read every column of every event (a no-op sink) and count them."""
    start = time.monotonic()
    df = spark.read.parquet(str(parquet))
    df.write.format("noop").mode("overwrite").save()
    df.select(F.count(F.lit(1))).collect()
    return time.monotonic() - start


class HeapPeak:
    """The driver JVM's peak heap while analyses run (in local mode the executors share it):
    the heap in use sampled every `every` seconds (garbage not yet collected included), and the
    old generation's own peak, an upper bound of what the analyses kept live (G1 keeps dead
    objects there until a mixed collection). The figures are taken when the block ends."""

    OLD_POOLS = ("Old Gen", "Tenured Gen", "Old Generation")

    def __init__(self, spark: SparkSession, every: float = 0.2) -> None:
        mf = spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
        self._heap = mf.getMemoryMXBean()
        self._old = [
            p for p in mf.getMemoryPoolMXBeans() if any(n in p.getName() for n in self.OLD_POOLS)
        ]
        self._every = every
        self._stop = threading.Event()
        self._peak_used = 0
        self._failed: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.figures: dict[str, Any] = {}

    def _sample(self) -> None:
        self._peak_used = max(self._peak_used, self._heap.getHeapMemoryUsage().getUsed())

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every):
                self._sample()
        except Exception as e:  # the gateway went away: say so rather than understate the peak
            self._failed = f"{type(e).__name__}: {e}"

    def __enter__(self) -> HeapPeak:
        for pool in self._old:
            pool.resetPeakUsage()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        gib = 2**30
        if self._failed is not None:
            self.figures = {"heap_peak_gib": f"sampling failed ({self._failed})"}
            return
        self._sample()
        old = sum(p.getPeakUsage().getUsed() for p in self._old) if self._old else None
        self.figures = {
            "heap_peak_gib": round(self._peak_used / gib, 2),
            "old_gen_peak_gib": "n/a" if old is None else round(old / gib, 2),
            "heap_max_gib": round(self._heap.getHeapMemoryUsage().getMax() / gib, 2),
        }


def measure(spark: SparkSession, run: Path, size: int) -> dict[str, Any]:
    if not (run / "history.jsonl").exists():
        t = time.monotonic()
        n = generate_run(run, seed=size, events=size)
        print(f"generated {n} events in {time.monotonic() - t:.1f} s", flush=True)
    shutil.rmtree(run / HISTORY_PARQUET, ignore_errors=True)
    with HeapPeak(spark) as heap:
        t = time.monotonic()
        first = analyze_run(run, spark=spark)
        first_s = time.monotonic() - t
        t = time.monotonic()
        again = analyze_run(run, spark=spark)
        again_s = time.monotonic() - t
    scan_s = min(bare_scan(spark, run / HISTORY_PARQUET) for _ in range(2))
    pairing_s = min(pairing_floor(spark, run / HISTORY_PARQUET) for _ in range(2))
    n = int(first["stats"]["events"])
    assert first["valid"] is True and again["valid"] is True, (
        first["errors"],
        first["anomalies"][:3],
    )
    return {
        "events": n,
        "first_s": round(first_s, 2),
        "events_per_s_first": round(n / first_s),
        "again_s": round(again_s, 2),
        "events_per_s_again": round(n / again_s),
        "bare_scan_s": round(scan_s, 2),
        "ratio_again_to_scan": round(again_s / scan_s, 1),
        "pairing_only_s": round(pairing_s, 2),
        "events_per_s_pairing_only": round(n / pairing_s),
        **heap.figures,
    }


def _timed(code: str, *args: str) -> float:
    """Wall seconds of `python -c code args...` in a fresh process (a cold JVM)."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", code, *args],
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - start


ANALYZE = (
    "import sys; from pathlib import Path; from checker.analyze import analyze_runs; "
    "analyze_runs([Path(p) for p in sys.argv[2:]], sys.argv[1])"
)
# the floor of an analysis: the history read and validated, the frames, the facts and the
# verdict's preconditions, with no check and no statistics (what every check builds on)
ANALYZE_FLOOR = (
    "import sys; from pathlib import Path; from checker.analyze import AnalyzeOptions, "
    "analyze_runs; analyze_runs([Path(p) for p in sys.argv[2:]], sys.argv[1], options="
    "AnalyzeOptions(checks=frozenset(), with_stats=False, write_results=False))"
)
BARE = (
    "import sys; from checker.session import build_session; s = build_session(sys.argv[1]); "
    "s.read.json(sys.argv[2]).count(); s.stop()"
)
# the same without the class archive (checker.class_archive): a JVM as Spark starts it
BARE_UNARCHIVED = BARE.replace(
    "build_session(sys.argv[1])", "build_session(sys.argv[1], java_options='')"
)


def _fresh(run: Path, dest: Path) -> Path:
    """A copy of `run` without the checker's own cache (a first analysis)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        run, dest, ignore=shutil.ignore_patterns(HISTORY_PARQUET, "results.json", "nodes")
    )
    return dest


def _warm_rounds(
    spark: SparkSession, run: Path, work: Path, rounds: int, options: AnalyzeOptions
) -> list[float]:
    """Wall seconds of `rounds` analyses of fresh copies of `run` in `spark`, in turn."""
    times = []
    for _ in range(rounds):
        warm = _fresh(run, work / "warm")  # the copy is not timed
        start = time.monotonic()
        analyze_run(warm, spark=spark, options=options)
        times.append(time.monotonic() - start)
    return times


def _print_warm_floors(spark: SparkSession, run: Path, work: Path, rounds: int) -> None:
    """What a warm analysis pays before its first check, in the same warm session: an action's
    round trip, and the analysis with no check and no statistics (the history read and
    validated, the frames, the facts, completeness). Medians of the later half of the rounds;
    the checks and statistics cost the rest of the warm figure."""
    trips = []
    for _ in range(rounds):
        start = time.monotonic()
        spark.range(1).collect()
        trips.append(time.monotonic() - start)
    no_checks = AnalyzeOptions(checks=frozenset(), with_stats=False, write_results=False)
    floor = _warm_rounds(spark, run, work, rounds, no_checks)
    print(f"warm floors: an action's round trip {statistics.median(trips[rounds // 2 :]):.3f} s; "
          f"the analysis without checks or statistics {statistics.median(floor[rounds // 2 :]):.2f}"
          " s", flush=True)  # fmt: skip


def _print_floor(what: str, dirs: list[str], master: str, against: float) -> None:
    """The cold analysis of `dirs` with no check and no statistics, in a fresh process, as a
    multiple of `against` (the target's denominator)."""
    floor = _timed(ANALYZE_FLOOR, master, *dirs)
    print(f"  floor of {what}: no check, no statistics {floor:.1f} s = {floor / against:.2f}x",
          flush=True)  # fmt: skip


def ratios(
    run: Path,
    work: Path,
    master: str,
    remote: str | None,
    foreign: int,
    warm_rounds: int,
    floors: bool = False,
) -> None:
    """Issue 20's ratios; with `floors`, each followed by its floor (docs/checker-speed.md)."""
    work.mkdir(parents=True, exist_ok=True)
    cold = _timed(ANALYZE, master, str(_fresh(run, work / "cold")))
    bare = _timed(BARE, master, str(run / "history.jsonl"))
    print(f"cold analyze {cold:.1f} s / bare session+read+count {bare:.1f} s = {cold / bare:.2f}x"
          " (target <= 1.5x; both map the class archive if made)", flush=True)  # fmt: skip
    if floors:
        _print_floor("the cold analysis", [str(_fresh(run, work / "cold"))], master, bare)
    unarchived = _timed(BARE_UNARCHIVED, master, str(run / "history.jsonl"))
    print(f"cold analyze {cold:.1f} s / bare without the class archive {unarchived:.1f} s = "
          f"{cold / unarchived:.2f}x", flush=True)  # fmt: skip
    if remote is not None:
        # A server's JIT keeps compiling for some 25 analyses (docs/checker-speed.md): the
        # first half of the rounds warm it, the median of the second half is the figure.
        spark = connect_session(remote, shuffle_partitions=2)
        times = _warm_rounds(spark, run, work, warm_rounds, AnalyzeOptions())
        later = times[warm_rounds // 2 :]
        print(f"warm through Spark Connect ({remote}): {times[0]:.1f} s the first time, median "
              f"{statistics.median(later):.2f} s of analyses {warm_rounds // 2 + 1}-{warm_rounds}"
              " (target <= 2 s)", flush=True)  # fmt: skip
        if floors:
            _print_warm_floors(spark, run, work, warm_rounds)
        spark.stop()
    copies = [str(_fresh(run, work / f"batch-{i:02d}")) for i in range(20)]
    batch = _timed(ANALYZE, master, *copies)
    print(f"batch of 20 {batch:.1f} s / one cold {cold:.1f} s = {batch / cold:.2f}x"
          " (target <= 3x)", flush=True)  # fmt: skip
    if floors:
        copies = [str(_fresh(run, work / f"batch-{i:02d}")) for i in range(20)]
        _print_floor("the batch", copies, master, cold)
    if foreign:
        synth = work / f"foreign-{foreign}"
        if not (synth / "history.jsonl").exists():
            generate_run(synth, seed=foreign, events=foreign)
        shutil.rmtree(synth / HISTORY_PARQUET, ignore_errors=True)
        first = _timed(ANALYZE, master, str(synth))
        scan = _timed(BARE, master, str(synth / "history.jsonl"))
        print(f"{foreign} foreign JSONL events: analyze {first:.1f} s / bare inferred scan+count"
              f" {scan:.1f} s = {first / scan:.2f}x (target <= 3x)", flush=True)  # fmt: skip
        if floors:
            shutil.rmtree(synth / HISTORY_PARQUET, ignore_errors=True)
            _print_floor("the foreign JSONL", [str(synth)], master, scan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", type=Path, default=None, help="a real run directory")
    parser.add_argument(
        "--spark-remote",
        default=None,
        help="sc://HOST:15002, or local[2] for a server pyspark starts, for the warm figure",
    )
    parser.add_argument("--warm-rounds", type=int, default=12, help="analyses through Connect")
    parser.add_argument(
        "--floors",
        action="store_true",
        help="after each ratio, the same analysis with no check and no statistics",
    )
    parser.add_argument("--foreign-events", type=int, default=1_000_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/checker-bench"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="6g", help="Spark driver heap (local mode)")
    args = parser.parse_args()
    os.environ["CHECKER_DRIVER_MEMORY"] = args.driver_memory
    if args.ratios is not None:
        if not (args.ratios / "history.jsonl").is_file():
            parser.error(f"--ratios: no history.jsonl in {args.ratios}")
        if args.warm_rounds < 2:
            parser.error("--warm-rounds: at least 2 (the first half warms the server)")
        ratios(args.ratios, args.dir / "ratios", args.master, args.spark_remote,
               args.foreign_events, args.warm_rounds, args.floors)  # fmt: skip
        return
    spark = build_session(args.master, shuffle_partitions=8)
    rows: list[dict[str, Any]] = []
    for size in args.sizes:
        rows.append(measure(spark, args.dir / f"run-{size}", size))
        prev = rows[-2] if len(rows) > 1 else None
        if prev is not None:
            scale = math.log(rows[-1]["events"] / prev["events"])
            rows[-1]["growth_again"] = round(
                math.log(rows[-1]["again_s"] / prev["again_s"]) / scale, 2
            )
            rows[-1]["growth_first"] = round(
                math.log(rows[-1]["first_s"] / prev["first_s"]) / scale, 2
            )
        print(json.dumps(rows[-1]), flush=True)
    spark.stop()
    print(
        f"{'events':>10} {'first s':>8} {'ev/s':>9} {'again s':>8} {'ev/s':>9} "
        f"{'scan s':>7} {'pair s':>7} {'ratio':>6} {'growth':>7} {'heap GiB':>9} {'old gen':>8}"
    )
    for r in rows:
        print(
            f"{r['events']:>10} {r['first_s']:>8} {r['events_per_s_first']:>9} "
            f"{r['again_s']:>8} {r['events_per_s_again']:>9} {r['bare_scan_s']:>7} "
            f"{r['pairing_only_s']:>7} "
            f"{r['ratio_again_to_scan']:>6} {r.get('growth_again', '-'):>7} "
            f"{r['heap_peak_gib']!s:>9} {r.get('old_gen_peak_gib', '-')!s:>8}"
        )


if __name__ == "__main__":
    main()
