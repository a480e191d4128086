"""analyze_run: a run directory in, results.json (verdict, anomalies, statistics) out.

The verdict follows anomalies.md: false when any anomaly is found, "unknown" when the run or
its history is incomplete (and nothing was found in what could be read), true otherwise. A
contract violation is one readable line in `errors`, never a traceback.

Truncated final line (a killed controller): the readable prefix is analyzed, the line is named
in `errors`, and the verdict is "unknown" unless the prefix already shows an anomaly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checker.anomaly_classes import ANOMALY_CLASSES
from checker.atomicity import ap_violation, mixed_schema_commit, transborder_op
from checker.catalog_index import CatalogIndex
from checker.compatibility import incompatible_commit
from checker.completeness import check_completeness
from checker.conformance import schema_conformance
from checker.contract import ContractError, read_catalog_lines, read_run_json
from checker.divergence import CAPABILITY as PER_NODE_COPIES
from checker.divergence import replica_divergence
from checker.durability import activation_order, lost_ddl, lost_write
from checker.explain import no_anomalies
from checker.facts import RunFacts
from checker.frames import RunFrames, build_frames, kept_as_rows, release
from checker.freshness import ack_lookup, stale_schema_read
from checker.indexes import index_missing, index_orphan
from checker.ingest import PYTHON_VALIDATION_MAX_BYTES, ingest_history
from checker.run_facts import with_facts
from checker.session import build_session, is_connect, local_heap_bytes
from checker.stats import StatsOptions, compute_stats

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
    CheckSpec("index-missing", index_missing, True),
    CheckSpec("index-orphan", index_orphan, True),
    CheckSpec("activation-order", activation_order, True),
    CheckSpec("replica-divergence", replica_divergence, False),
)
CLASSES = tuple(c.name for c in CHECKS)
assert set(CLASSES) <= set(ANOMALY_CLASSES), "a check's name is not an anomaly class"
MAX_PER_CLASS = 1000
# Runs of a batch judged at once on a classic session. On local[2], 8 runs of 8,400 events
# were judged 1.9x faster 2 at a time and 2.1x faster 3 at a time than one at a time; with the
# leaner plans of later code, on another machine, 1, 2 and 3 at a time were alike (8 runs of
# 8,781 events: 88, 99, 92 s), each run's JIT warm-up and fixed steps bounding the batch.
BATCH_CONCURRENCY = 3
# A history this small is judged in one partition (about 30,000 events, the small-input mode),
# so it leaves cores to the batch's other runs; a larger one is judged alone.
SMALL_HISTORY_BYTES = 16 * 2**20
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
    run_dir = Path(run_dir)
    started = time.monotonic()
    try:  # the small files first: a broken run directory needs no Spark at all
        if not run_dir.is_dir():
            raise ContractError(str(run_dir), None, None, "not a run directory")
        run = read_run_json(run_dir)
        lines = read_catalog_lines(run_dir)  # read once: 34k versions take 4 s to validate
        if not (run_dir / "history.jsonl").exists():
            raise ContractError("history.jsonl", None, None, "missing from the run directory")
    except ContractError as e:
        results = _unknown([str(e)], started)
    else:
        owned = spark is None
        session = (
            spark
            if spark is not None
            else build_session(
                spark_master,
                remote=spark_remote,
                short_lived=_history_bytes(run_dir) <= SMALL_HISTORY_BYTES,
            )
        )
        try:
            results = _analyze(session, run_dir, run, lines, options)
        finally:
            if owned:
                session.stop()
    if options.write_results and run_dir.is_dir():
        (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


def analyze_runs(
    run_dirs: Sequence[Path],
    spark_master: str = "local[*]",
    *,
    spark: SparkSession | None = None,
    options: AnalyzeOptions = AnalyzeOptions(),
    spark_remote: str | None = None,
    concurrency: int = BATCH_CONCURRENCY,
) -> list[dict[str, Any]]:
    """Analyze each run directory in one Spark application (one JVM start for all of them),
    writing each one's `results.json`; the results in the order given.

    On a classic session the runs are judged `concurrency` at a time, each in its own session
    of the one SparkContext: a small run's plan is built in Python and runs in one partition,
    so one run at a time leaves a core idle. Its own session keeps each run's SQL settings
    (the small-input mode) from leaking into another's. A Spark Connect session has no
    `newSession`, and its runs are judged one after another."""
    if len(run_dirs) == 1:  # its own session, sized to the one history
        return [analyze_run(run_dirs[0], spark_master, spark=spark, options=options,
                            spark_remote=spark_remote)]  # fmt: skip
    owned = spark is None
    # A few runs as large as one small history in all compile with C1 alone, as that history
    # does; more keep C2 (8 runs of 8,700 events took 154 s with C1 alone against 142 s).
    short_lived = (
        len(run_dirs) <= BATCH_CONCURRENCY
        and sum(_history_bytes(d) for d in run_dirs) <= SMALL_HISTORY_BYTES
    )
    session = (
        spark
        if spark is not None
        else build_session(spark_master, remote=spark_remote, short_lived=short_lived)
    )
    try:
        if concurrency <= 1 or is_connect(session):
            return [analyze_run(d, spark=session, options=options) for d in run_dirs]
        results: dict[int, dict[str, Any]] = {}
        small = [i for i, d in enumerate(run_dirs) if _history_bytes(d) <= SMALL_HISTORY_BYTES]
        pool = ThreadPoolExecutor(concurrency, thread_name_prefix="analyze")
        try:
            judged = pool.map(
                lambda i: analyze_run(run_dirs[i], spark=session.newSession(), options=options),
                small,
            )
            results.update(zip(small, judged, strict=True))
        finally:
            # Ctrl-C: the runs not yet begun are dropped, and the ones under way fail as soon
            # as the session below is stopped, instead of the batch running to its end
            pool.shutdown(wait=False, cancel_futures=True)
        for i, d in enumerate(run_dirs):  # a large run keeps both cores busy on its own
            if i not in results:
                results[i] = analyze_run(d, spark=session, options=options)
        return [results[i] for i in range(len(run_dirs))]
    finally:
        if owned:
            session.stop()


def _history_bytes(run_dir: Path) -> int:
    try:
        return (Path(run_dir) / "history.jsonl").stat().st_size
    except OSError:
        return 0  # a broken run directory: judged unknown at once, by the small ones


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
        return 0
    if valid is False:
        return 1
    return 2


def _unknown(errors: list[str], started: float) -> dict[str, Any]:
    return {
        "valid": "unknown",
        "anomalies": [],
        "not_applicable": [],
        "stats": {"analysis_s": round(time.monotonic() - started, 3)},
        "errors": errors,
    }


def _analyze(
    spark: SparkSession,
    run_dir: Path,
    run: dict[str, Any],
    lines: list[dict[str, Any]],
    options: AnalyzeOptions,
) -> dict[str, Any]:
    started = time.monotonic()
    clock = run.get("clock", "hlc")
    # the catalog's frames are built while the history is read (1.4 s of a cold analysis):
    # neither needs the other
    pool = ThreadPoolExecutor(1, thread_name_prefix="catalog")
    catalog = pool.submit(CatalogIndex, spark, lines, rename_column_compatible(run), clock)
    pool.shutdown(wait=False)
    try:
        ingested = ingest_history(spark, run_dir, options.python_validation_max_bytes)
    except ContractError as e:
        return _unknown([str(e)], started)
    errors: list[str] = []
    if ingested.truncated_tail:
        errors.append(
            f"history.jsonl line {ingested.count + 1}: truncated (the controller died while "
            "writing it); the readable prefix was analyzed"
        )
    cat = catalog.result()
    errors.extend(cat.errors)  # parts of the catalog it cannot judge (an unknown column type)
    restore = _small_input_mode(spark, ingested.count, options.small_input_events)
    # one partition for a small run: a single-partition input satisfies every join's and
    # window's distribution, so no shuffle is planned (133 stages -> 56 on a 60-event run)
    events = ingested.events.coalesce(1) if restore else ingested.events
    frames = build_frames(
        events, cat, as_rows=kept_as_rows(ingested.count, local_heap_bytes(spark))
    )
    try:
        frames = with_facts(frames, cat.clock_free)
        errors.extend(e for e in (_unpaired(frames.known()), _reinvoked(frames.known())) if e)
        if frames.known().ok == 0:
            # unknown however complete, but what its events prove is still reported (a
            # history whose every txn failed may still show an op on the wrong version)
            errors.append("no client operation completed: the run did not get going (setup?)")
        # An incomplete history can still prove an anomaly, never validity (history.md).
        completeness = check_completeness(
            frames, cat.lines[-1] if cat.lines else None, cat.lines, cat.clock_free
        )
        errors.extend(completeness.errors)
        not_applicable = [c.name for c in CHECKS if c.needs_clock and clock == "none"]
        # copies per node are compared only where the target declares them (anomalies.md):
        # elsewhere two nodes' final reads may differ by design (a stale standby's)
        caps = run.get("capabilities")
        if not (isinstance(caps, list) and PER_NODE_COPIES in caps):
            not_applicable.append("replica-divergence")
        applicable = [c for c in CHECKS if c.name not in not_applicable]
        anomalies, per_class, found_stats = _judge(frames, cat, applicable, run, options)
        stats: dict[str, Any] = {"events": ingested.count, **found_stats}
    finally:
        release(frames)
        for key, value in restore.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    stats["anomalies_by_class"] = per_class
    stats["analysis_s"] = round(time.monotonic() - started, 3)
    if anomalies:
        valid: bool | str = False
    elif errors:
        valid = "unknown"
    else:
        valid = True
    return {
        "valid": valid,
        "anomalies": anomalies,
        "not_applicable": not_applicable,
        "stats": stats,
        "errors": errors,
    }


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
    run: dict[str, Any],
    options: AnalyzeOptions,
) -> tuple[list[dict[str, Any]], dict[str, int], dict[str, Any]]:
    """The anomalies (at most `options.max_per_class` per class), each class's count and the
    statistics: CHECK_UNIONS unions of the checks and the statistics, each built and collected
    in its own thread, all at once."""
    groups = [g for g in (checks[i::CHECK_UNIONS] for i in range(CHECK_UNIONS)) if g]
    pool = ThreadPoolExecutor(len(groups) + 1, thread_name_prefix="judge")
    try:
        found = [pool.submit(_collect, frames, cat, g, options.max_per_class) for g in groups]
        stats = (
            pool.submit(compute_stats, frames, run, ack_lookup(frames, cat), options.stats)
            if options.with_stats
            else None
        )
        anomalies: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        for f in found:
            group_anomalies, group_counts = f.result()
            anomalies.extend(group_anomalies)
            counts.update(group_counts)
        anomalies.sort(key=lambda a: CLASSES.index(a["class"]))  # stable: keeps each class's order
        per_class = {c.name: counts[c.name] for c in checks}
        return anomalies, per_class, stats.result() if stats is not None else {}
    finally:
        # on an error (or Ctrl-C) the other threads are not waited for: they fail as soon as
        # the session is stopped
        pool.shutdown(wait=False, cancel_futures=True)


def _collect(
    frames: RunFrames,
    cat: CatalogIndex,
    checks: list[CheckSpec],
    cap: int,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Run `checks` as one union and bring back at most `cap` anomalies per class."""
    union = no_anomalies(frames.events.sparkSession)
    for c in checks:
        union = union.unionByName(c.check(frames, cat))
    # an anomaly may have no witness event (activation-order of versions nobody acknowledged)
    first = F.try_element_at("events", F.lit(1))
    w = Window.partitionBy("class").orderBy(first, "explanation")
    ranked = union.select(
        "*",
        F.row_number().over(w).alias("_rn"),
        F.count(F.lit(1)).over(Window.partitionBy("class")).alias("_n"),
    ).where(F.col("_rn") <= cap)
    rows = ranked.collect()
    per_class = {c.name: 0 for c in checks}
    out = []
    for r in sorted(rows, key=lambda r: (CLASSES.index(r["class"]), r["_rn"])):
        per_class[r["class"]] = int(r["_n"])
        out.append(
            {
                "class": r["class"],
                "events": [int(e) for e in r["events"]],
                "nodes": list(r["nodes"]),
                "explanation": r["explanation"],
            }
        )
    return out, per_class
