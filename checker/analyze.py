"""analyze_runs: run directories in, each one's results.json (verdict, anomalies, statistics)
out, the runs of a batch judged in one plan partitioned by run (analyze_run: a batch of one).

The verdict follows anomalies.md: false when any anomaly is found, "unknown" when the run or
its history is incomplete (and nothing was found in what could be read), true otherwise. A
contract violation is one readable line in `errors`, never a traceback.

Truncated final line (a killed controller): the readable prefix is analyzed, the line is named
in `errors`, and the verdict is "unknown" unless the prefix already shows an anomaly.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checker.anomaly_classes import ANOMALY_CLASSES
from checker.atomicity import ap_violation, mixed_schema_commit, transborder_op
from checker.catalog_index import RUN, CatalogIndex, RunCatalog
from checker.compatibility import incompatible_commit
from checker.completeness import check_completeness
from checker.conformance import schema_conformance
from checker.contract import ContractError, read_catalog_lines, read_run_json
from checker.ddl_outcome import ddl_outcome
from checker.divergence import CAPABILITY as PER_NODE_COPIES
from checker.divergence import replica_divergence
from checker.durability import activation_order, lost_ddl, lost_write
from checker.explain import no_anomalies
from checker.facts import RunFacts
from checker.frames import RunFrames, build_frames, kept_as_rows, release
from checker.freshness import ack_lookup, stale_schema_read
from checker.indexes import index_missing, index_orphan
from checker.ingest import PYTHON_VALIDATION_MAX_BYTES, Validated, ingest_histories
from checker.readable import check_run_dir_readable
from checker.results_file import clear_old_results, write_results
from checker.run_facts import with_facts
from checker.session import build_session, local_heap_bytes
from checker.stats import StatsOptions, compute_stats
from contract.exit_codes import EXIT_ANOMALIES, EXIT_UNKNOWN, EXIT_VALID
from contract.rundir import HISTORY

Check = Callable[[RunFrames, CatalogIndex], DataFrame]


@dataclass(frozen=True)
class CheckSpec:
    """One anomaly class: its check and whether it needs comparable timestamps."""

    name: str
    check: Check
    needs_clock: bool


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("ap-violation", ap_violation, True),
    # without a clock only its first half: participants that disagree among themselves
    CheckSpec("mixed-schema-commit", mixed_schema_commit, False),
    CheckSpec("transborder-op", transborder_op, True),
    CheckSpec("incompatible-commit", incompatible_commit, True),
    CheckSpec("stale-schema-read", stale_schema_read, False),
    CheckSpec("schema-conformance", schema_conformance, False),
    CheckSpec("lost-write", lost_write, False),
    CheckSpec("lost-ddl", lost_ddl, False),
    # without a clock, against the last catalog version (the final reads come after the heal)
    CheckSpec("index-missing", index_missing, False),
    CheckSpec("index-orphan", index_orphan, False),
    CheckSpec("activation-order", activation_order, True),
    # judged by controller time and catalog versions: it needs no clock
    CheckSpec("ddl-outcome", ddl_outcome, False),
    CheckSpec("replica-divergence", replica_divergence, False),
)
CLASSES = tuple(c.name for c in CHECKS)
assert set(CLASSES) <= set(ANOMALY_CLASSES), "a check's name is not an anomaly class"
MAX_PER_CLASS = 1000
# A history this small (about 30,000 events) is judged in a short-lived JVM (C1 alone).
SMALL_HISTORY_BYTES = 16 * 2**20
# The runs of a batch share one plan up to this much history in all (about 500,000 events);
# a bigger run is judged in a plan of its own.
BATCH_MAX_BYTES = 256 * 2**20
# The checks are judged as this many unions at once, beside the statistics. Building a plan is
# one py4j call after another, and a small run's plan runs mostly one stage after another, so
# one union at a time leaves a core idle.
CHECK_UNIONS = 2


@dataclass(frozen=True)
class AnalyzeOptions:
    """Knobs a test or benchmark may turn; defaults are what the CLI uses."""

    max_per_class: int = MAX_PER_CLASS
    python_validation_max_bytes: int = PYTHON_VALIDATION_MAX_BYTES
    stats: StatsOptions = field(default_factory=StatsOptions)
    with_stats: bool = True
    write_results: bool = True
    small_input_events: int = 30_000
    # the checks to run, by name (None: every one). A check left out is not judged, so the
    # result is no verdict and is never written: for a benchmark's floor only (it runs none)
    checks: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.checks is None:
            return
        unknown = sorted(self.checks - set(CLASSES))
        if unknown:
            raise ValueError(f"checks: unknown {unknown} (known: {', '.join(CLASSES)})")
        if self.write_results:
            raise ValueError("checks: a result of some checks only is no verdict to write")


def analyze_run(
    run_dir: Path,
    spark_master: str = "local[*]",
    *,
    spark: SparkSession | None = None,
    options: AnalyzeOptions = AnalyzeOptions(),
    spark_remote: str | None = None,
) -> dict[str, Any]:
    """Analyze `run_dir`, write `results.json` there, and return it.

    Uses `spark` when given (the caller owns it); otherwise makes a session on `spark_master`
    (or on the Spark Connect server `spark_remote`) and stops it before returning.
    """
    return analyze_runs(
        [run_dir], spark_master, spark=spark, options=options, spark_remote=spark_remote
    )[0]


def analyze_runs(
    run_dirs: Sequence[Path],
    spark_master: str = "local[*]",
    *,
    spark: SparkSession | None = None,
    options: AnalyzeOptions = AnalyzeOptions(),
    spark_remote: str | None = None,
) -> list[dict[str, Any]]:
    """Analyze each run directory in one Spark application, writing each one's `results.json`;
    the results in the order given.

    The runs are judged together, in one plan per batch partitioned by run (`batches`): every
    step of a check runs once for all of them, where one plan per run paid each step's fixed
    cost once per run. Each run gets what it gets judged alone. A crash of the checker (a bug,
    never a verdict) is raised once every other run's results.json is written.

    Before anything is analysed each run's old results.json is removed (StaleResults, with
    nothing analysed, when one cannot be); a directory that takes no file is judged all the
    same, its verdict only returned. A directory named twice is judged once."""
    started = time.monotonic()
    # the same directory named twice (or store/latest beside its target) is judged once
    first_of: dict[Path, int] = {}
    for i, d in enumerate(run_dirs):
        first_of.setdefault(Path(d).resolve(), i)
    unique = sorted(first_of.values())
    # before any analysis: no earlier verdict may outlive this one (StaleResults otherwise)
    writable = {i for i in unique if options.write_results and _clear_old(Path(run_dirs[i]))}
    results: dict[int, dict[str, Any]] = {}
    crashes: list[Exception] = []
    readable: list[_Readable] = []
    for i in unique:
        try:  # the small files first: a broken run directory needs no Spark at all
            readable.append(_read_small_files(i, Path(run_dirs[i])))
        except ContractError as e:
            results[i] = _unknown([str(e)], started)
    try:
        if readable:
            owned = spark is None
            session = (
                spark
                if spark is not None
                else build_session(
                    spark_master,
                    remote=spark_remote,
                    short_lived=sum(r.bytes for r in readable) <= SMALL_HISTORY_BYTES,
                )
            )
            try:
                for batch in batches(readable):
                    results.update(_judged_or_isolated(session, batch, options, crashes))
            finally:
                if owned:
                    session.stop()
    finally:  # whatever fails, a run already judged keeps its verdict (a session that would
        # not start or stop, Ctrl-C between batches)
        for i in sorted(writable & results.keys()):
            # a failed write leaves no results.json (the old one is gone): never a stale one
            with contextlib.suppress(OSError):
                write_results(Path(run_dirs[i]), results[i])
    if crashes:  # every run that could be judged has its results.json; the crash still shows
        raise crashes[0]
    return [results[first_of[Path(d).resolve()]] for d in run_dirs]


def _clear_old(run_dir: Path) -> bool:
    """clear_old_results of a run directory that exists (one gone is judged unknown)."""
    return run_dir.is_dir() and clear_old_results(run_dir)


def _judged_or_isolated(
    spark: SparkSession,
    batch: Sequence[_Readable],
    options: AnalyzeOptions,
    crashes: list[Exception],
) -> dict[int, dict[str, Any]]:
    """`batch` judged in one plan; if that crashes, each of its runs judged alone, so that one
    run the checker cannot judge costs a night of runs only its own verdict. Every crash is
    added to `crashes`, the batch's first: a crash that only the batch shows is still a bug."""
    try:
        return _analyze(spark, batch, options)
    except Exception as e:
        # the failed plan's frames (local checkpoints) are not held through the retries
        traceback.clear_frames(e.__traceback__)
        if len(batch) == 1:
            e.add_note(f"while judging {batch[0].dir}")
            crashes.append(e)
            return {}
        e.add_note(f"while judging a batch of {len(batch)} runs; judged again one at a time")
        crashes.append(e)
    first = len(crashes) - 1
    out: dict[int, dict[str, Any]] = {}
    for r in batch:
        out.update(_judged_or_isolated(spark, [r], options, crashes))
    for alone in crashes[first + 1 :]:  # the raised crash names every run that crashed alone
        crashes[first].add_note(f"{alone.__notes__[-1]}, alone: {type(alone).__name__}: {alone}")
    if len(crashes) == first + 1:
        crashes[first].add_note("every run of the batch was judged alone: a bug of the batch")
    return out


@dataclass(frozen=True)
class _Readable:
    """A run directory whose small files were read: its place in the batch (its run id)."""

    run: int
    dir: Path
    meta: dict[str, Any]  # run.json
    lines: list[dict[str, Any]]  # catalog.jsonl
    bytes: int  # history.jsonl's size

    @property
    def clock(self) -> str:
        return str(self.meta.get("clock", "hlc"))


def _read_small_files(run: int, run_dir: Path) -> _Readable:
    if not run_dir.is_dir():
        raise ContractError(str(run_dir), None, None, "not a run directory")
    check_run_dir_readable(run_dir)
    meta = read_run_json(run_dir)
    lines = read_catalog_lines(run_dir)  # read once: 34k versions take 4 s to validate
    if not (run_dir / HISTORY).exists():
        raise ContractError(HISTORY, None, None, "missing from the run directory")
    return _Readable(run, run_dir, meta, lines, _history_bytes(run_dir))


def batches(runs: Sequence[_Readable]) -> list[list[_Readable]]:
    """The plans a batch is judged in: runs of one clock together (clock-free checks take
    other shapes), each plan at most BATCH_MAX_BYTES of history (a bigger run alone)."""
    by_clock: dict[str, list[_Readable]] = {}
    for r in runs:
        by_clock.setdefault(r.clock, []).append(r)
    out: list[list[_Readable]] = []
    for group in by_clock.values():
        plan: list[_Readable] = []
        for r in group:
            if plan and sum(p.bytes for p in plan) + r.bytes > BATCH_MAX_BYTES:
                out.append(plan)
                plan = []
            plan.append(r)
        out.append(plan)
    return out


def _history_bytes(run_dir: Path) -> int:
    try:
        return (Path(run_dir) / HISTORY).stat().st_size
    except OSError:
        return 0


def combined_exit_code(results: Sequence[dict[str, Any]]) -> int:
    """1 if any run has anomalies, else 2 if any is unknown, else 0 (no run: 2)."""
    codes = {exit_code(r) for r in results}
    if 1 in codes:
        return 1
    if 2 in codes or not codes:
        return 2
    return 0


def exit_code(results: dict[str, Any]) -> int:
    """0 valid, 1 anomalies, 2 unknown (255 is the CLI's own crash)."""
    valid = results.get("valid")
    if valid is True:
        return EXIT_VALID
    if valid is False:
        return EXIT_ANOMALIES
    return EXIT_UNKNOWN


def _unknown(errors: list[str], started: float) -> dict[str, Any]:
    return {
        "valid": "unknown",
        "anomalies": [],
        "not_applicable": [],
        "stats": {"analysis_s": round(time.monotonic() - started, 3)},
        "errors": errors,
    }


@dataclass
class _Judged:
    """What a batch's plan found for one of its runs."""

    anomalies: list[dict[str, Any]] = field(default_factory=list)
    per_class: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


def _analyze(
    spark: SparkSession, batch: Sequence[_Readable], options: AnalyzeOptions
) -> dict[int, dict[str, Any]]:
    """Judge the runs of `batch` (one clock) in one plan; each run's results by its id."""
    started = time.monotonic()
    # the catalogs' frames are built while the histories are read (1.4 s of a cold analysis):
    # neither needs the other
    pool = ThreadPoolExecutor(1, thread_name_prefix="catalog")
    catalog = pool.submit(
        CatalogIndex.of_runs,
        spark,
        [RunCatalog(r.lines, rename_column_compatible(r.meta), r.clock, r.run) for r in batch],
    )
    pool.shutdown(wait=False)
    ingested = ingest_histories(
        spark, {r.run: r.dir for r in batch}, options.python_validation_max_bytes
    )
    out = {run: _unknown([str(e)], started) for run, e in ingested.failed.items()}
    cat = catalog.result()
    judged = [r for r in batch if r.run in ingested.runs]
    if ingested.events is None or not judged:
        return out
    runs = tuple(r.run for r in judged)
    total = sum(v.count for v in ingested.runs.values())
    restore = _small_input_mode(spark, total, options.small_input_events)
    try:  # the session's settings come back whatever fails (a batch may be judged again)
        events = ingested.events
        # one partition for a small batch: a single-partition input satisfies every join's and
        # window's distribution, so no shuffle is planned (133 stages -> 56 on a 60-event run)
        events = events.coalesce(1) if restore else events
        frames = build_frames(
            events, cat, as_rows=kept_as_rows(total, local_heap_bytes(spark)), runs=runs
        )
        try:
            frames = with_facts(frames, cat.clock_free)
            errors = {r.run: _errors(frames, cat, r.run, ingested.runs[r.run]) for r in judged}
            not_applicable = {r.run: _not_applicable(r) for r in judged}
            applicable = [
                c
                for c in CHECKS
                if any(c.name not in n for n in not_applicable.values())
                and (options.checks is None or c.name in options.checks)
            ]
            found = _judge(frames, cat, applicable, {r.run: r.meta for r in judged}, options)
        finally:
            release(frames)
    finally:
        for key, value in restore.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    elapsed = round(time.monotonic() - started, 3)
    for r in judged:
        j = found.get(r.run, _Judged())
        # a class that does not apply to this run was judged for the others: its rows dropped
        anomalies = [a for a in j.anomalies if a["class"] not in not_applicable[r.run]]
        stats: dict[str, Any] = {"events": ingested.runs[r.run].count, **j.stats}
        stats["anomalies_by_class"] = {
            c.name: j.per_class.get(c.name, 0)
            for c in applicable
            if c.name not in not_applicable[r.run]
        }
        stats["analysis_s"] = elapsed
        if anomalies:
            valid: bool | str = False
        elif errors[r.run]:
            valid = "unknown"
        else:
            valid = True
        out[r.run] = {
            "valid": valid,
            "anomalies": anomalies,
            "not_applicable": not_applicable[r.run],
            "stats": stats,
            "errors": errors[r.run],
        }
    return out


def _errors(frames: RunFrames, cat: CatalogIndex, run: int, ingested: Validated) -> list[str]:
    """What keeps run `run` from being judged valid: an incomplete history, a part of its
    catalog the checker cannot judge, a history that breaks the contract's pairing rules."""
    errors: list[str] = []
    if ingested.truncated_tail:
        errors.append(
            f"history.jsonl line {ingested.count + 1}: truncated (the controller died while "
            "writing it); the readable prefix was analyzed"
        )
    errors.extend(cat.runs[run].errors)  # parts it cannot judge (an unknown column type)
    facts = frames.known(run)
    errors.extend(e for e in (_unpaired(facts), _reinvoked(facts)) if e)
    if facts.ok == 0:
        # unknown however complete, but what its events prove is still reported (a
        # history whose every txn failed may still show an op on the wrong version)
        errors.append("no client operation completed: the run did not get going (setup?)")
    # An incomplete history can still prove an anomaly, never validity (history.md).
    lines = cat.runs[run].lines
    completeness = check_completeness(
        frames, run, lines[-1] if lines else None, lines, cat.clock_free
    )
    errors.extend(completeness.errors)
    return errors


def _not_applicable(r: _Readable) -> list[str]:
    """The classes that do not apply to a run: those that need a clock, without one; and
    copies per node compared only where the target declares them (anomalies.md): elsewhere two
    nodes' final reads may differ by design (a stale standby's)."""
    out = [c.name for c in CHECKS if c.needs_clock and r.clock == "none"]
    caps = r.meta.get("capabilities")
    if not (isinstance(caps, list) and PER_NODE_COPIES in caps):
        out.append("replica-divergence")
    return out


def _unpaired(facts: RunFacts) -> str | None:
    """A sentence naming the completions without an invoke before them, or None."""
    if not facts.unpaired:
        return None
    return (
        f"history.jsonl: {facts.unpaired} completion(s) follow no invoke of the same process "
        f"and f (first: index {facts.first_unpaired}); whatever pairs an op with its invoke "
        "(latencies, rates, DDL acks, probes, stale-schema-read, incompatible-commit) leaves "
        "them out"
    )


def _reinvoked(facts: RunFacts) -> str | None:
    """A sentence naming the invokes that follow an `info` of the same process, or None."""
    if not facts.reinvoked:
        return None
    return (
        f"history.jsonl: {facts.reinvoked} invoke(s) by a process whose previous op ended in "
        f"info (first: index {facts.first_reinvoked}); a process whose op ended in info never "
        "invokes again (history.md, Events), so this history breaks the contract"
    )


def rename_column_compatible(run: dict[str, Any]) -> bool:
    """Whether run.json's config makes a column rename compatible: its explicit key, else its
    profile's choice (the seed's ids: yes; the ignite profile, as Ignite's validator: no)."""
    config = run.get("config")
    config = config if isinstance(config, dict) else {}
    return bool(config.get("rename_column_compatible", config.get("profile") != "ignite"))


def _small_input_mode(spark: SparkSession, events: int, threshold: int) -> dict[str, str | None]:
    """Interpret expressions instead of compiling them for small runs (compiling the generated
    code of the whole plan costs more than executing it on a few thousand events), in one
    shuffle partition and without adaptive re-planning between stages."""
    if events >= threshold:
        return {}
    confs = {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.optimizer.disableHints": "true",
    }
    restore = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    return restore


def _judge(
    frames: RunFrames,
    cat: CatalogIndex,
    checks: list[CheckSpec],
    metas: Mapping[int, dict[str, Any]],
    options: AnalyzeOptions,
) -> dict[int, _Judged]:
    """Each run's anomalies (at most `options.max_per_class` per class), each class's count and
    the statistics: CHECK_UNIONS unions of the checks and the statistics, each built and
    collected in its own thread, all at once, every run of the batch in each."""
    groups = [g for g in (checks[i::CHECK_UNIONS] for i in range(CHECK_UNIONS)) if g]
    pool = ThreadPoolExecutor(len(groups) + 1, thread_name_prefix="judge")
    try:
        found = [pool.submit(_collect, frames, cat, g, options.max_per_class) for g in groups]
        stats = (
            pool.submit(compute_stats, frames, metas, ack_lookup(frames, cat), options.stats)
            if options.with_stats
            else None
        )
        out = {r: _Judged() for r in frames.runs}
        for f in found:
            group_anomalies, group_counts = f.result()
            for run, a in group_anomalies:
                out[run].anomalies.append(a)
            for (run, cls), n in group_counts.items():
                out[run].per_class[cls] = n
        for j in out.values():  # stable: keeps each class's order
            j.anomalies.sort(key=lambda a: CLASSES.index(a["class"]))
        if stats is not None:
            for run, s in stats.result().items():
                out[run].stats = s
        return out
    finally:
        # on an error (or Ctrl-C) the other threads are not waited for: they fail as soon as
        # the session is stopped
        pool.shutdown(wait=False, cancel_futures=True)


def _collect(
    frames: RunFrames,
    cat: CatalogIndex,
    checks: list[CheckSpec],
    cap: int,
) -> tuple[list[tuple[int, dict[str, Any]]], dict[tuple[int, str], int]]:
    """Run `checks` as one union and bring back at most `cap` anomalies per run and class,
    each with its run, and the count of each (run, class) that has any."""
    union = no_anomalies(frames.events.sparkSession)
    for c in checks:
        union = union.unionByName(c.check(frames, cat))
    # an anomaly may have no witness event (activation-order of versions nobody acknowledged)
    first = F.try_element_at("events", F.lit(1))
    w = Window.partitionBy(RUN, "class").orderBy(first, "explanation")
    ranked = union.select(
        "*",
        F.row_number().over(w).alias("_rn"),
        F.count(F.lit(1)).over(Window.partitionBy(RUN, "class")).alias("_n"),
    ).where(F.col("_rn") <= cap)
    rows = ranked.collect()
    # A run whose history broke the contract is left out of the frames but not of the batch's
    # catalog, so a check of the catalog alone (activation-order) still finds its versions:
    # its verdict is its contract violation, and its rows are dropped here.
    judged = set(frames.runs)
    counts: dict[tuple[int, str], int] = {}
    out = []
    for r in sorted(rows, key=lambda r: (r[RUN], CLASSES.index(r["class"]), r["_rn"])):
        if int(r[RUN]) not in judged:
            continue
        counts[(int(r[RUN]), r["class"])] = int(r["_n"])
        out.append(
            (
                int(r[RUN]),
                {
                    "class": r["class"],
                    "events": [int(e) for e in r["events"]],
                    "nodes": list(r["nodes"]),
                    "explanation": r["explanation"],
                },
            )
        )
    return out, counts
