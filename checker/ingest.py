"""history.jsonl into a typed, validated DataFrame with a Parquet copy next to the run.

One JSON parse per line: the text is parsed with an explicit schema (no inference; a field of the
wrong type is null, not the whole line), written to `history.parquet/` with a per-line problem
column, and validated by aggregating that column, so a re-analysis reads Parquet only.
Polymorphic fields (rows, results) stay raw JSON strings and are parsed where a check needs
them; a nemesis event's value is kept as its JSON text alone.

Our own controller also writes the events typed (`history.columnar.parquet`, see the recorder):
when that copy is complete (its footer counts every event of history.jsonl, byte for byte) it is
read instead of the JSON, with the same per-line checks; a torn or partial copy (a killed
controller) is ignored and the JSONL is parsed as for any foreign history. A small complete copy
is the cache itself: its events are validated and kept in memory in one job, with no Parquet
rewrite (a second job, and a tenth of a cold analysis of 7,000 events). A run directory that
takes no file (a read-only mount) gets no cache: its events are kept by Spark for the analysis.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from checker.catalog_index import RUN
from checker.contract import ContractError, validate_history_file
from checker.results_file import refuses_files
from contract.history_shape import CLIENT_FS, DDL_KINDS, EVENT_TYPES, OP_KINDS, arrow_schema
from contract.rundir import HISTORY, HISTORY_COLUMNAR, HISTORY_PARQUET

# footer keys of the recorder's copy (workloads.history writes them when it closes)
META_EVENTS = b"schemachaos.events"
META_JSONL_BYTES = b"schemachaos.jsonl_bytes"
SOURCE_STAMP = "_source.json"
# raised whenever the cache's columns or per-line checks change: an older cache is rebuilt
FORMAT_VERSION = 10
# Histories up to this size are validated against the full JSON Schema in Python first (exact
# messages); bigger ones by Spark expressions over the required fields.
PYTHON_VALIDATION_MAX_BYTES = 32 * 1024 * 1024
# A complete columnar copy of at most this many events is read in place (kept in memory); a
# larger one is rewritten once into history.parquet/ like a parsed JSONL, so that its scans
# read the per-line problem column instead of computing it again each time.
IN_PLACE_MAX_EVENTS = 200_000
# The runs of a batch opened (a JSONL one parsed into its cache) at once
OPEN_THREADS = 4


CORRUPT = "_corrupt"
# a client event's process is a number; "nemesis" and any other string (monitor samples, a
# foreign harness's own events) are not a client's, and a client operation from one breaks the
# contract
CLIENT_PROCESS = r"^-?[0-9]+$"
S = T.StringType()


def columnar_spark_schema() -> T.StructType:
    """The recorder's columns as Spark reads them (the event's typed columns and its value's
    JSON text): the contract's Arrow schema, converted, so the two never differ."""
    return from_arrow_schema(arrow_schema())


COLUMNAR_SCHEMA = columnar_spark_schema()
# a line as parsed: the same columns but the value's text, and the whole line when a field could
# not be read as its type (a string or a float where the contract says int, an integer beyond
# 64 bits): without it the field is just null
LINE_SCHEMA = T.StructType(
    [f for f in COLUMNAR_SCHEMA.fields if f.name != "value_json"]
    + [T.StructField(CORRUPT, S, True)]
)
VALUE_SCHEMA = cast(T.StructType, LINE_SCHEMA["value"].dataType)


# The value fields the contract types for each client event (history.md, by f and type), for
# telling a mistyped contract field from a mistyped extra one: LINE_SCHEMA types the union of
# every kind's value fields, so an extra field of a txn that a probe's contract types (`ts`)
# fails the parse as well, and extra fields are allowed everywhere. A kind not listed types no
# value field (a probe's fail, any final-read but ok).
_DDL = ("stmt", "table", "kind")
_TXN = ("ops", "txn_id", "begin_ts", "commit_ts", "tables", "participants")
CONTRACT_VALUE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ddl", "invoke"): _DDL,
    ("ddl", "ok"): (*_DDL, "catalog_version", "activation_ts"),
    ("ddl", "fail"): _DDL,
    ("ddl", "info"): _DDL,
    ("txn", "invoke"): ("ops",),
    ("txn", "ok"): _TXN,
    ("txn", "fail"): _TXN,
    ("txn", "info"): _TXN,
    ("probe", "invoke"): ("table", "ts"),
    ("probe", "ok"): ("ts", "catalog_version", "table_schema_version", "columns"),
    ("final-read", "ok"): ("table", "index", "ts", "schema_version", "rows", "entries"),
}


def _contract_schema(fields: tuple[str, ...]) -> T.StructType:
    """LINE_SCHEMA with only the value `fields` (no value at all when there are none)."""
    value = T.StructType([x for x in VALUE_SCHEMA.fields if x.name in fields])
    return T.StructType(
        [
            T.StructField("value", value, True) if x.name == "value" else x
            for x in LINE_SCHEMA
            if x.name != "value" or fields
        ]
    )


# a field of the wrong type is null and the line is kept whole in CORRUPT
# NaN and Infinity are not JSON (Jackson, like Python, reads them unless told not to)
PERMISSIVE = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": CORRUPT,
    "allowNonNumericNumbers": "false",
}


@dataclass(frozen=True)
class Validated:
    """What validation of one run's history noticed."""

    count: int
    truncated_tail: bool
    source: str  # what was read: history.jsonl, the columnar copy, or the Parquet cache


@dataclass(frozen=True)
class Ingested:
    """The validated events of one run and what validation noticed."""

    events: DataFrame
    count: int
    truncated_tail: bool
    source: str


@dataclass(frozen=True)
class IngestedRuns:
    """The runs of a batch, ingested: every valid run's events in one frame, each event with
    its run's id (`run`); what validation noticed of each; why each other run failed it."""

    events: DataFrame | None  # None when no run passed
    runs: dict[int, Validated]
    failed: dict[int, ContractError]


def ingest_history(
    spark: SparkSession,
    run_dir: Path,
    python_validation_max_bytes: int = PYTHON_VALIDATION_MAX_BYTES,
) -> Ingested:
    """Validate history.jsonl and return its events (from the Parquet copy); ContractError."""
    batch = ingest_histories(spark, {0: run_dir}, python_validation_max_bytes)
    if 0 in batch.failed:
        raise batch.failed[0]
    assert batch.events is not None
    v = batch.runs[0]
    return Ingested(batch.events.drop(RUN), v.count, v.truncated_tail, v.source)


@dataclass(frozen=True)
class _Opened:
    """One run's events as read, before (`stamp` set) or after validation (`known` set)."""

    raw: DataFrame  # with the validation columns (in place: the copy as stored)
    source: Path  # its history.jsonl
    used: str
    known: Validated | None = None  # from the cache's stamp: nothing left to validate
    torn_known: bool = False  # the Python validator found the last line torn
    in_place: bool = False  # a small columnar copy, kept in memory by the validation job
    stamp: dict[str, int] | None = None  # written into the cache once validated


def ingest_histories(
    spark: SparkSession,
    dirs: Mapping[int, Path],
    python_validation_max_bytes: int = PYTHON_VALIDATION_MAX_BYTES,
) -> IngestedRuns:
    """Validate each run's history.jsonl (keyed by its run id) and return the events of those
    that pass in one frame. Whatever still needs Spark's validation is validated for every run
    in one job (the small columnar copies kept in memory by it), not in a job per run."""
    failed: dict[int, ContractError] = {}
    opened: dict[int, _Opened] = {}

    def open_run(run_dir: Path) -> _Opened | ContractError:
        try:
            return _open(spark, Path(run_dir), python_validation_max_bytes)
        except ContractError as e:
            return e

    # A JSONL history is parsed into its cache in a job of its own, mostly waiting on the
    # driver's planning and scheduling: a few at once keep both cores busy.
    pool = ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix="open")
    try:
        for run, got in zip(dirs, pool.map(open_run, dirs.values()), strict=True):
            if isinstance(got, ContractError):
                failed[run] = got
            else:
                opened[run] = got
    finally:
        # on Ctrl-C the parses still running fail as soon as the session is stopped
        pool.shutdown(wait=False, cancel_futures=True)
    # the small copies read in place are kept in memory, all of them in one checkpoint
    in_place = {r: o.raw for r, o in opened.items() if o.in_place}
    kept = (
        _typed_columnar(
            _union(in_place).coalesce(_partitions(spark, len(in_place))), (RUN,)
        ).localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
        if in_place
        else None
    )
    tagged = {r: _tag(r, o.raw) for r, o in opened.items() if not o.in_place}
    tagged.update({r: kept.where(F.col(RUN) == r) for r in in_place if kept is not None})
    # every read still to validate, validated in one job (which also fills the checkpoint)
    unchecked = [tagged[r] for r, o in opened.items() if o.known is None and not o.in_place]
    together = [kept] if kept is not None else []
    parts = _partition_counts(_union_all([*together, *unchecked])) if together or unchecked else {}
    runs: dict[int, Validated] = {}
    for r, o in opened.items():
        if o.known is not None:
            runs[r] = o.known
            continue
        try:
            count, truncated = _judge_parts(tagged[r], parts.get(r, []), o.source, o.torn_known)
        except ContractError as e:
            failed[r] = e
            if not o.in_place:
                shutil.rmtree(o.source.parent / HISTORY_PARQUET, ignore_errors=True)
            continue
        runs[r] = Validated(count, truncated, o.used)
        if o.stamp is not None:
            stamp = {**o.stamp, "count": count, "truncated_tail": truncated, "from": o.used}
            (o.source.parent / HISTORY_PARQUET / SOURCE_STAMP).write_text(
                json.dumps(stamp), "utf-8"
            )
    frames = [tagged[r] for r in opened if r in runs and r not in in_place]
    if kept is not None and any(r in runs for r in in_place):
        passed = [r for r in in_place if r in runs]
        frames.append(kept if len(passed) == len(in_place) else kept.where(F.col(RUN).isin(passed)))
    events = _good(_union_all(frames)) if frames else None
    return IngestedRuns(events, runs, failed)


def _partitions(spark: SparkSession, runs: int) -> int:
    """The partitions the small copies of `runs` runs are read in, as many as the plan's
    shuffles have: read as they come, each copy is a partition, and the per-line checks of 20
    runs (9,872 events each) took 36 s on a cold JVM in 20 partitions, 11 s in 2 or 4."""
    return max(1, min(runs, int(spark.conf.get("spark.sql.shuffle.partitions") or 1)))


def _tag(run: int, raw: DataFrame) -> DataFrame:
    return raw.select(F.lit(run).cast("long").alias(RUN), "*")


def _union(raws: Mapping[int, DataFrame]) -> DataFrame:
    return _union_all([_tag(r, df) for r, df in raws.items()])


def _union_all(frames: Sequence[DataFrame]) -> DataFrame:
    return functools.reduce(DataFrame.unionByName, frames)


def _open(spark: SparkSession, run_dir: Path, python_validation_max_bytes: int) -> _Opened:
    """One run's history as read (the cache, the columnar copy, or history.jsonl parsed into the
    cache, with a small one checked by the Python validator meanwhile); ContractError."""
    source = run_dir / HISTORY
    if not source.exists():
        raise ContractError(HISTORY, None, None, "missing from the run directory")
    stat = source.stat()
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "format": FORMAT_VERSION}
    parquet = run_dir / HISTORY_PARQUET
    stamp_file = parquet / SOURCE_STAMP
    if _stamp_matches(stamp_file, stamp):  # OSError (none there, unreadable): no
        saved = json.loads(stamp_file.read_text("utf-8"))
        known = Validated(int(saved["count"]), bool(saved["truncated_tail"]), HISTORY_PARQUET)
        return _Opened(spark.read.parquet(str(parquet)), source, HISTORY_PARQUET, known=known)
    rows = columnar_rows(run_dir / HISTORY_COLUMNAR, stat.st_size)
    if rows is not None and rows <= IN_PLACE_MAX_EVENTS:
        # typed with the batch's other copies (ingest_histories)
        raw = _scan_columnar(spark, run_dir / HISTORY_COLUMNAR)
        return _Opened(raw, source, HISTORY_COLUMNAR, in_place=True)
    if refuses_files(run_dir) is not None:
        return _uncached(spark, run_dir, rows is not None, python_validation_max_bytes)
    if parquet.exists():
        shutil.rmtree(parquet)
    truncated = False
    if rows is not None:
        _read_columnar(spark, run_dir / HISTORY_COLUMNAR).write.mode("overwrite").parquet(
            str(parquet)
        )
    else:
        # The full JSON Schema check of a small history runs in Python beside Spark's parse (the
        # JVM does not hold the GIL), so it costs the longer of the two, not their sum.
        with ThreadPoolExecutor(1, thread_name_prefix="validate") as pool:
            small = stat.st_size <= python_validation_max_bytes
            full = pool.submit(validate_history_file, source) if small else None
            try:
                _parse_lines(spark, source).write.mode("overwrite").parquet(str(parquet))
            finally:
                if full is not None:
                    try:
                        _, truncated = full.result()
                    except ContractError:
                        shutil.rmtree(parquet, ignore_errors=True)
                        raise
    used = HISTORY_COLUMNAR if rows is not None else HISTORY
    raw = spark.read.parquet(str(parquet))
    return _Opened(raw, source, used, torn_known=truncated, stamp=stamp)


def _uncached(
    spark: SparkSession, run_dir: Path, columnar: bool, python_validation_max_bytes: int
) -> _Opened:
    """A run directory that takes no file (a read-only mount) is judged without its cache: the
    events parsed once and kept by Spark (in memory, else its local disks) for the analysis."""
    source = run_dir / HISTORY
    truncated = False
    if columnar:
        parsed = _read_columnar(spark, run_dir / HISTORY_COLUMNAR)
    else:
        if source.stat().st_size <= python_validation_max_bytes:
            _, truncated = validate_history_file(source)
        parsed = _parse_lines(spark, source)
    raw = parsed.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
    used = HISTORY_COLUMNAR if columnar else HISTORY
    return _Opened(raw, source, used, torn_known=truncated)


def _good(raw: DataFrame) -> DataFrame:
    """The events of the lines without a problem, without the validation columns."""
    return raw.where(F.col("_problem").isNull()).drop("_problem", "_pid", "_pos")


def _stamp_matches(stamp_file: Path, stamp: dict[str, int]) -> bool:
    try:
        saved = json.loads(stamp_file.read_text("utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return all(saved.get(k) == v for k, v in stamp.items())


def columnar_complete(path: Path, jsonl_bytes: int) -> bool:
    """Whether the recorder's copy at `path` is whole: a readable footer that counts as many
    events as its rows and names history.jsonl's current size (a killed controller leaves no
    footer; an appended or edited JSONL no longer matches)."""
    return columnar_rows(path, jsonl_bytes) is not None


def columnar_rows(path: Path, jsonl_bytes: int) -> int | None:
    """The events of the recorder's copy at `path` if it is whole (columnar_complete), else
    None."""
    if not path.exists():
        return None
    import pyarrow.parquet as pq  # only our own runs have the copy

    try:
        meta = pq.ParquetFile(path).metadata
        kv = meta.metadata or {}
        whole = int(kv[META_EVENTS]) == meta.num_rows and int(kv[META_JSONL_BYTES]) == jsonl_bytes
    except (OSError, KeyError, ValueError):  # pyarrow.ArrowInvalid is a ValueError
        return None
    return int(meta.num_rows) if whole else None


def _position() -> tuple[Column, Column]:
    """(partition id, position in the partition): the line order, for the order check."""
    pid = F.spark_partition_id()
    mid = F.monotonically_increasing_id()
    return pid.alias("_pid"), (mid - F.shiftleft(pid.cast("long"), 33)).alias("_pos")


def _scan_columnar(spark: SparkSession, path: Path) -> DataFrame:
    """The recorder's copy as stored, for _typed_columnar."""
    return spark.read.schema(COLUMNAR_SCHEMA).parquet(str(path))


def _read_columnar(spark: SparkSession, path: Path) -> DataFrame:
    """The recorder's typed events in the shape _parse_lines gives (nothing to parse)."""
    return _typed_columnar(_scan_columnar(spark, path))


def _typed_columnar(df: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """Stored copies (one, or the union of several tagged with their run: `keep`) in the shape
    _parse_lines gives. Over a union the per-line checks are one projection, compiled once:
    each run's own, its id a literal in it, was compiled again for every run (the ingest of a
    batch of 20: 49.6 s, 41.4 s once)."""
    names = [f.name for f in LINE_SCHEMA.fields if f.name != CORRUPT]
    e = F.struct(*(F.col(n) for n in names), F.lit(None).cast(S).alias(CORRUPT))
    pid, pos = _position()
    is_client = F.col("process").rlike(CLIENT_PROCESS)
    return _typed(
        df.select(
            *keep,
            e.alias("e"),
            pid,
            pos,
            F.when(is_client, F.col("value")).alias("v"),
            F.when(~is_client, F.col("value_json")).alias("value_json"),
            F.lit(False).alias("_mistyped"),  # typed as it was recorded
        ),
        keep,
    )


def _parse_lines(spark: SparkSession, source: Path) -> DataFrame:
    text = spark.read.text(str(source))
    pid, pos = _position()
    parsed = text.select(
        F.from_json("value", LINE_SCHEMA, PERMISSIVE).alias("e"),
        "value",
        pid,
        pos,
    )
    is_client = F.col("e.process").rlike(CLIENT_PROCESS)
    # The parsed line is its own projection: the problem column reads the parsed struct (the
    # optimizer does not inline an expensive expression used twice).
    with_value = parsed.select(
        "e",
        "_pid",
        "_pos",
        F.when(is_client, F.col("e.value")).alias("v"),
        F.when(~is_client, F.get_json_object("value", "$.value")).alias("value_json"),
        _mistyped(F.col(f"e.{CORRUPT}"), F.col("e.f"), F.col("e.type")).alias("_mistyped"),
    )
    return _typed(with_value)


def _mistyped(corrupt: Column, f: Column, type_: Column) -> Column:
    """Whether a line that failed the parse (`corrupt` is its text) fails it on a field the
    contract types for its own f and type: parsed again, only then, with those fields alone."""

    def fails(fields: tuple[str, ...]) -> Column:
        reparsed = F.from_json(corrupt, _contract_schema(fields), PERMISSIVE)
        return reparsed.getField(CORRUPT).isNotNull()

    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for kind, fields in CONTRACT_VALUE_FIELDS.items():
        groups.setdefault(fields, []).append(kind)
    again = fails(())  # every other kind: index, time and error alone
    for fields, kinds in groups.items():
        match = functools.reduce(Column.__or__, [(f == kf) & (type_ == kt) for kf, kt in kinds])
        again = F.when(match, fails(fields)).otherwise(again)
    return F.when(corrupt.isNotNull(), again).otherwise(F.lit(False))


def _typed(with_value: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """The event columns and the problem of each line, from the parsed struct `e`."""
    return with_value.select(
        *keep,
        F.col("e.index").alias("index"),
        F.col("e.time").alias("time"),
        F.col("e.type").alias("type"),
        F.col("e.process").alias("process"),
        F.col("e.f").alias("f"),
        F.col("e.node").alias("node"),
        F.col("v").alias("value"),
        "value_json",
        F.col("e.error").alias("error"),
        _problem_expr().alias("_problem"),
        "_pid",
        "_pos",
    )


def _problem_expr() -> Column:
    """The first violated requirement of a parsed line, as 'field: why', or null."""
    e = F.col("e")
    client = F.coalesce(F.col("e.process").rlike(CLIENT_PROCESS), F.lit(False))
    completion = F.col("e.type").isin("ok", "fail", "info")
    v = F.col("v")
    ok = F.col("e.type") == "ok"
    txn = F.col("e.f") == "txn"
    checks: list[tuple[Column, str]] = [
        (e.isNull(), "(line): not JSON"),
        (F.col("e.index").isNull(), "index: missing or not an integer"),
        (F.col("e.index") < 0, "index: below 0 (indexes ascend from 0)"),
        (F.col("e.time").isNull(), "time: missing or not an integer"),
        (F.col("e.type").isNull(), "type: missing"),
        (~F.col("e.type").isin(*EVENT_TYPES), "type: not one of invoke/ok/fail/info"),
        (F.col("e.process").isNull(), "process: missing"),
        (F.col("e.f").isNull(), "f: missing"),
        (F.col("e.process") == "", "process: empty"),
        (client & ~F.col("e.f").isin(*CLIENT_FS), "f: not a client operation"),
        # (a JSON string of digits reads as a number here: only the Python validator tells)
        (
            ~client & F.col("e.f").isin(*CLIENT_FS),
            "process: a client operation needs an integer process",
        ),
        (
            (F.col("e.process") == "nemesis") & (F.col("e.type") != "info"),
            "type: nemesis events are info",
        ),
        (
            client & F.col("_mistyped"),
            "a field is not of its contract type (a string or fraction where an integer is "
            "required, or an integer beyond 64 bits)",
        ),
        (client & completion & ~ok & F.col("e.error.code").isNull(), "error: missing"),
        (
            client
            & completion
            & ~ok
            & (F.col("e.error.message").isNull() | F.col("e.error.retriable").isNull()),
            "error: message or retriable missing",
        ),
        (
            client & txn & (F.col("e.type") == "invoke") & v.ops.isNull(),
            "value.ops: missing",
        ),
        (client & ok & txn & v.participants.isNull(), "value.participants: missing"),
        (
            client & ok & (F.col("e.f") == "ddl") & v.catalog_version.isNull(),
            "value.catalog_version: missing",
        ),
        (
            client & ok & (F.col("e.f") == "ddl") & v.activation_ts.isNull(),
            "value.activation_ts: missing",
        ),
        # (txn_id may be null: the schema types it string or null, and Spark reads a missing
        # field as null)
        (client & ok & (F.col("e.f") == "txn") & v.ops.isNull(), "value.ops: missing"),
        (client & ok & (F.col("e.f") == "txn") & v.tables.isNull(), "value.tables: missing"),
        (
            # an `ix` op (a lookup through an index) finds keys and names none of its own
            client & txn & F.exists(v.ops, lambda o: o.key.isNull() & ~o.op.eqNullSafe("ix")),
            "value.ops[].key: missing or null (the contract says int)",
        ),
        (
            client
            & txn
            & F.exists(
                v.ops,
                # schema_version may be null: no table of that name at op_ts (TABLE_DROPPED)
                lambda o: o.op_ts.isNotNull() & o.node.isNull(),
            ),
            "value.ops[]: an executed op (op_ts set) lacks its node",
        ),
        (
            client
            & txn
            & F.exists(
                v.participants,
                lambda p: (
                    p.commit_schema_version.isNull()
                    | p.partition.isNull()
                    | p.node.isNull()
                    | p.table.isNull()
                ),
            ),
            "value.participants[]: node, table, partition or commit_schema_version missing",
        ),
        (
            client
            & txn
            & F.exists(
                F.map_values(v.tables),
                lambda t: t.base_ts.isNull() | t.schema_version.isNull(),
            ),
            "value.tables{}: base_ts or schema_version missing or null",
        ),
        (
            client
            & txn
            & F.exists(
                v.ops,
                lambda o: (
                    ~F.coalesce(o.op.isin(*OP_KINDS), F.lit(False))
                    | o.table.isNull()
                    | ~_object_or_null(o.row)
                    | ((o.op == "ix") & o.index.isNull())
                ),
            ),
            f"value.ops[]: an op whose op is not one of {'/'.join(OP_KINDS)}, without its table, "
            "with a row that is not an object, or a lookup (ix) without its index",
        ),
        (
            client & (F.col("e.f") == "ddl") & (F.col("e.type") == "invoke") & v.stmt.isNull(),
            "value.stmt: missing",
        ),
        (
            client
            & (F.col("e.f") == "ddl")
            & (F.col("e.type") == "invoke")
            & ~F.coalesce(v.kind.isin(*DDL_KINDS), F.lit(False)),
            "value.kind: missing or not a DDL kind of the contract",
        ),
        (client & ok & (F.col("e.f") == "probe") & v.ts.isNull(), "value.ts: missing"),
        (
            client & ok & (F.col("e.f") == "probe") & v.catalog_version.isNull(),
            "value.catalog_version: missing",
        ),
        (client & ok & (F.col("e.f") == "final-read") & v.ts.isNull(), "value.ts: missing"),
        (client & ok & (F.col("e.f") == "final-read") & v.table.isNull(), "value.table: missing"),
        (
            client
            & ok
            & (F.col("e.f") == "final-read")
            & (
                F.exists(
                    v.rows, lambda r: r.key.isNull() | ~F.coalesce(_object(r.row), F.lit(False))
                )
                | F.exists(
                    v.entries,
                    lambda x: x.key.isNull() | ~F.coalesce(_object(x.values), F.lit(False)),
                )
            ),
            "value.rows[] / entries[]: an item without its key, or whose row or values is not an "
            "object",
        ),
        (
            client
            & ok
            & (F.col("e.f") == "final-read")
            & F.when(v.index.isNull(), v.rows.isNull() | v.schema_version.isNull()).otherwise(
                v.entries.isNull()
            ),
            "value: a final read has a table's schema_version and rows, or an index and its "
            "entries",
        ),
        (
            # a nemesis event or monitor sample keeps its value as JSON text (a string's
            # content, unquoted, so only its first character can tell)
            ~client & ~_object_or_null(F.col("value_json")),
            "value: not an object",
        ),
    ]
    out = F.lit(None).cast("string")
    for cond, why in reversed(checks):
        out = F.when(cond, F.lit(why)).otherwise(out)
    return out


def _object(text: Column) -> Column:
    """Whether a field kept as JSON text holds an object. Spark's reader gives an object's
    text, and a string's content unquoted, so a string that begins with `{` passes."""
    return text.startswith("{")


def _object_or_null(text: Column) -> Column:
    """Whether JSON text is an object, absent or null (our recorder writes a null as 'null')."""
    return F.coalesce(_object(text) | (text == "null"), F.lit(True))


def _partition_counts(tagged: DataFrame) -> dict[int, list[Row]]:
    """Per run, per partition of its read (in order): its lines, the bounds of index minus
    position in the partition, the run's first position in it, and its problems. One job for
    every run of a batch."""
    rows = (
        tagged.groupBy(RUN, "_pid")
        .agg(
            F.count(F.lit(1)).alias("n"),
            # an index below 0 is a problem of its line; try_subtract keeps it from overflowing here
            F.min(F.try_subtract("index", "_pos")).alias("lo"),
            F.max(F.try_subtract("index", "_pos")).alias("hi"),
            F.min("_pos").alias("first_pos"),  # not 0 where runs share a partition
            F.count(F.col("index")).alias("with_index"),
            F.min(F.when(F.col("_problem").isNotNull(), F.col("_pos"))).alias("first_bad"),
            F.count(F.col("_problem")).alias("bad"),
        )
        .orderBy(RUN, "_pid")
        .collect()
    )
    out: dict[int, list[Row]] = {}
    for row in rows:
        out.setdefault(int(row[RUN]), []).append(row)
    return out


def _judge_parts(
    raw: DataFrame, parts: list[Row], source: Path, torn_known: bool
) -> tuple[int, bool]:
    """Check one run's problems and index order from its partitions' counts (and, if they show
    gaps in the indexes, a job of its own); returns (events, truncated tail)."""
    total = sum(int(p["n"]) for p in parts)
    bad = sum(int(p["bad"]) for p in parts)
    torn = torn_known or _torn_tail(source)
    if bad == 0 or (torn and bad == 1 and _only_bad_is_last(parts)):
        start = 0
        ordered = True
        for p in parts:
            good_n = int(p["n"]) - int(p["bad"])
            # in order with no gap: index = start + the line's place among the run's in it
            if good_n and not (p["lo"] == p["hi"] and p["lo"] + p["first_pos"] == start):
                ordered = False
                break
            start += good_n
        if ordered or _ascending(raw):
            return total - bad, torn and bad == 1
    # Something is wrong: find the exact first violation with the line-by-line validator, or
    # (what JSON Schema allows but a 64-bit column cannot hold) the first line Spark flagged.
    validate_history_file(source)
    first = _first_problem_line(raw, parts)
    if first is not None:
        raise ContractError(HISTORY, first[0], None, first[1])
    raise ContractError(HISTORY, None, None, "lines out of order")


def _ascending(raw: DataFrame) -> bool:
    """Whether the good lines' indexes start at 0 and ascend, with gaps: the contract's order,
    checked only when the one aggregate found gaps (a sort of every partition)."""
    good = raw.where(F.col("_problem").isNull())
    by_line = Window.partitionBy("_pid").orderBy("_pos")
    per_part = (
        good.select("_pid", "index", F.lag("index").over(by_line).alias("_prev"))
        .groupBy("_pid")
        .agg(
            F.min("index").alias("first"),
            F.max("index").alias("last"),
            F.count(F.when(F.col("index") <= F.col("_prev"), 1)).alias("descents"),
        )
        .orderBy("_pid")
        .collect()
    )
    previous = -1
    for p in per_part:
        first = int(p["first"])
        if p["descents"] or first <= previous or (previous < 0 and first != 0):
            return False
        previous = int(p["last"])
    return True


def _first_problem_line(raw: DataFrame, parts: list[Row]) -> tuple[int, str] | None:
    """(line number, problem) of the first line with a problem, from the per-partition counts."""
    bad = [p for p in parts if int(p["bad"]) > 0]
    if not bad:
        return None
    first = min(bad, key=lambda p: p["_pid"])
    before = sum(int(p["n"]) for p in parts if p["_pid"] < first["_pid"])
    row = (
        raw.where((F.col("_pid") == first["_pid"]) & (F.col("_pos") == first["first_bad"]))
        .select("_problem")
        .first()
    )
    why = str(row["_problem"]) if row is not None else "malformed"
    return before + int(first["first_bad"]) - int(first["first_pos"]) + 1, why


def _only_bad_is_last(parts: list[Row]) -> bool:
    last = max((p for p in parts if int(p["n"]) > 0), key=lambda p: p["_pid"], default=None)
    if last is None or last["first_bad"] is None:
        return False
    return int(last["first_bad"]) == int(last["first_pos"]) + int(last["n"]) - 1


def _torn_tail(source: Path) -> bool:
    with open(source, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size == 0:
            return False
        f.seek(size - 1)
        return f.read(1) != b"\n"


def load_runs(spark: SparkSession, root: Path) -> DataFrame:
    """Every run under `root` as one events dataset with a `run` column (for trends).

    Each run is ingested (and validated) as `analyze` ingests it: its Parquet cache, its
    complete columnar copy, or its JSONL parsed once; an invalid run raises ContractError."""
    runs = sorted(p for p in root.iterdir() if (p / HISTORY).exists())
    frames = [ingest_history(spark, run).events.withColumn("run", F.lit(run.name)) for run in runs]
    if not frames:
        raise ContractError(str(root), None, None, "holds no run directory with a history.jsonl")
    return functools.reduce(lambda a, b: a.unionByName(b), frames)
