"""The derived frames every check reads: completions paired with their invokes, txn ops and
participants exploded (and placed in the catalog), probes, DDL acks and final reads.

Pairing uses Jepsen's rule (an invoke is followed by exactly one completion of the same process),
so a lag over a window per process finds each completion's invoke without a self-join. Only a
light projection of each event takes part (no ops, rows or participants), so the one shuffle of
the analysis moves a few columns; the heavy frames come straight from the completion events,
which carry everything the checks of ops and participants need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checker.catalog_index import RUN, CatalogIndex
from checker.facts import RunFacts
from checker.ingest import CLIENT_PROCESS

SCHEMA_ERRORS = (
    "SCHEMA_VERSION_MISMATCH",
    "INCOMPATIBLE_SCHEMA",
    "TABLE_DROPPED",
    "TABLE_NOT_FOUND",
)
COMPLETION_TYPES = ("ok", "fail", "info")


@dataclass(frozen=True)
class RunFrames:
    """Frames of one run; every column name is stable and documented in the builder."""

    events: DataFrame
    all_completions: DataFrame  # paired or not (`paired` says)
    completions: DataFrame
    unpaired: DataFrame
    txns: DataFrame
    ops: DataFrame
    participants: DataFrame
    off_participants: DataFrame
    txn_tables: DataFrame
    probes: DataFrame
    ddls: DataFrame
    table_reads: DataFrame
    index_reads: DataFrame
    nemesis: DataFrame
    persisted: tuple[DataFrame, ...]
    # the ids of the runs the frames hold (their `run` column)
    runs: tuple[int, ...] = (0,)
    # the driver-side facts of each run (checker.run_facts.with_facts), once collected
    facts: Mapping[int, RunFacts] | None = None

    def known(self, run: int | None = None) -> RunFacts:
        """The collected facts of `run` (None: of the frames' only run); a check that needs
        them runs after with_facts."""
        if self.facts is None:
            raise RuntimeError("the run's facts were not collected (checker.run_facts)")
        if run is None:
            if len(self.runs) != 1:
                raise ValueError(f"frames of {len(self.runs)} runs: say whose facts")
            run = self.runs[0]
        return self.facts[run]

    def all_facts(self) -> tuple[RunFacts, ...]:
        """Every run's facts, in the order of `runs`."""
        return tuple(self.known(r) for r in self.runs)


# A side of a join derived from the history is broadcast up to this many rows, shuffled beyond
# (a broadcast that grows with the history ran out of driver memory at 10^6).
MAX_BROADCAST_ROWS = 100_000
# Bytes of heap per event from which a history's kept frames are stored as rows (`kept_as_rows`).
HEAP_PER_EVENT_AS_ROWS = 4096


def bounded_broadcast(df: DataFrame, rows: int) -> DataFrame:
    """`df` hinted for broadcast if `rows` (its row count, known in the driver from the run's
    facts) is at most MAX_BROADCAST_ROWS; shuffled beyond."""
    return F.broadcast(df) if rows <= MAX_BROADCAST_ROWS else df


def _light(client: DataFrame) -> DataFrame:
    """The few small fields of every client event that pairing and the light checks need."""
    v = F.col("value")
    return client.select(
        RUN,
        "index",
        "time",
        "type",
        "process",
        "f",
        "node",
        F.col("error.code").alias("error_code"),
        v.txn_id.alias("txn_id"),
        v.begin_ts.alias("begin_ts"),
        v.commit_ts.alias("commit_ts"),
        v.tables.alias("tables"),
        v.ts.alias("v_ts"),
        v.table.alias("v_table"),
        v.index.alias("v_ix"),
        v.catalog_version.alias("catalog_version"),
        v.table_schema_version.alias("table_sv"),
        v.activation_ts.alias("activation_ts"),
        v.stmt.alias("v_stmt"),
        v.kind.alias("v_kind"),
        v.safe_time_waits.alias("safe_time_waits"),
    )


def _paired(client: DataFrame) -> DataFrame:
    """Every client completion with its invoke's index, time and small value fields, and
    whether it has one (`paired`)."""
    w = Window.partitionBy(RUN, "process").orderBy("index")
    # one lag of a struct: the window evaluates one function per row instead of eight
    prev = F.lag(
        F.struct("type", "f", "index", "time", "v_ts", "v_table", "v_ix", "v_stmt", "v_kind")
    ).over(w)
    lagged = (
        _light(client)
        # the event before the invoke: an `info` there means the process invoked again after
        # an op of unknown outcome, which the contract forbids (history.md, Events)
        .select("*", prev.alias("_p"), F.lag("type", 2).over(w).alias("_ppt"))
        .select(
            "*",
            F.col("_p.type").alias("_pt"),
            F.col("_p.f").alias("_pf"),
            F.col("_p.index").alias("invoke_index"),
            F.col("_p.time").alias("invoke_time"),
            F.col("_p.v_ts").alias("asked_ts"),
            F.col("_p.v_table").alias("invoke_table"),
            F.col("_p.v_ix").alias("invoke_ix"),
            F.col("_p.v_stmt").alias("invoke_stmt"),
            F.col("_p.v_kind").alias("invoke_kind"),
        )
    )
    paired = (F.col("_pt") == "invoke") & (F.col("_pf") == F.col("f"))
    return (
        lagged.where(F.col("type").isin(*COMPLETION_TYPES))
        .withColumn("paired", F.coalesce(paired, F.lit(False)))
        .withColumn("after_info", F.col("paired") & (F.col("_ppt") == "info").eqNullSafe(True))
        # null rather than an overflow where the two times are 2^63 apart (any int is legal)
        .withColumn("latency_ns", F.try_subtract("time", "invoke_time"))
        .drop("_p", "_pt", "_pf", "_ppt")
    )


def _succeeded() -> Column:
    # An op succeeded when the txn committed, or the commit was reached (commit_ts set), or a
    # later op ran after it, or it returned what the client saw (a read's row, an index
    # lookup's keys: a failed op returns none); the last executed op of an aborted txn may
    # otherwise have failed.
    reached_commit = (F.col("type") == "ok") | F.col("commit_ts").isNotNull()
    return reached_commit | (F.col("pos") < F.col("last_exec")) | F.col("o.result").isNotNull()


def _ops(txn_events: DataFrame, cat: CatalogIndex) -> DataFrame:
    """Every executed op of every txn completion, with the txn's I and base_ts for its table
    and (with a clock) `t_id`/`t_sv`/`t_since`: the enlisted table in cat(op_ts)."""
    last_exec = F.expr(
        "array_max(transform(coalesce(value.ops, array()), "
        "(o, i) -> if(o.op_ts is not null, i, -1)))"
    )
    exploded = txn_events.select(
        RUN,
        "index",
        "type",
        "time",
        F.col("value.txn_id").alias("txn_id"),
        F.col("value.commit_ts").alias("commit_ts"),
        F.col("value.tables").alias("tables"),
        last_exec.alias("last_exec"),
        F.posexplode("value.ops").alias("pos", "o"),
    ).where(F.col("o.op_ts").isNotNull())
    entry = F.element_at("tables", F.col("o.table"))
    ops = exploded.select(
        RUN,
        "index",
        "type",
        "txn_id",
        "commit_ts",
        "time",
        "pos",
        F.col("o.op").alias("op"),
        F.col("o.table").alias("table"),
        F.col("o.key").alias("key"),
        F.col("o.row").alias("row"),
        F.col("o.result").alias("result"),
        F.col("o.index").alias("index_name"),
        F.col("o.lookup").alias("lookup"),
        F.col("o.op_ts").alias("op_ts"),
        F.col("o.node").alias("op_node"),
        F.col("o.schema_version").alias("op_sv"),
        entry.getField("schema_version").alias("txn_sv"),
        entry.getField("base_ts").alias("base_ts"),
        _succeeded().alias("succeeded"),
    )
    if cat.clock_free:
        return ops
    return cat.with_enlisted_table(ops, "op_ts")


def _participants(txn_events: DataFrame, cat: CatalogIndex) -> DataFrame:
    """One row per participant of each txn that reached its commit, with (with a clock) the
    enlisted table in cat(commit_ts) as `t_id`/`t_sv`/`t_since`. Without a clock an ok txn
    counts whatever its (opaque) commit_ts: its participants are compared among themselves."""
    reached = F.col("value.commit_ts").isNotNull()
    if cat.clock_free:
        reached = reached | (F.col("type") == "ok")
    parts = (
        txn_events.where(reached)
        .select(
            RUN,
            "index",
            "type",
            F.col("value.txn_id").alias("txn_id"),
            F.col("value.commit_ts").alias("commit_ts"),
            F.col("value.tables").alias("tables"),
            F.posexplode("value.participants").alias("ppos", "p"),
        )
        .select(
            RUN,
            "index",
            "type",
            "txn_id",
            "commit_ts",
            "ppos",
            F.col("p.node").alias("p_node"),
            F.col("p.table").alias("table"),
            F.col("p.partition").alias("partition"),
            F.col("p.commit_schema_version").alias("commit_sv"),
            F.element_at("tables", F.col("p.table")).getField("base_ts").alias("base_ts"),
        )
    )
    if cat.clock_free:
        return parts
    return cat.with_enlisted_table(parts, "commit_ts")


def ddl_statement() -> list[Column]:
    """A DDL completion's statement, table and kind: its own, or its invoke's when the
    completion does not repeat them."""
    return [
        F.coalesce(F.col("invoke_stmt"), F.col("v_stmt")).alias("stmt"),
        F.coalesce(F.col("invoke_table"), F.col("v_table")).alias("table"),
        F.coalesce(F.col("invoke_kind"), F.col("v_kind")).alias("kind"),
    ]


def build_frames(
    events: DataFrame,
    cat: CatalogIndex,
    *,
    as_rows: bool = False,
    runs: Sequence[int] = (0,),
) -> RunFrames:
    """Derive the frames from validated events (columns of checker.ingest, and `run`: which of
    the batch's `runs` each belongs to; an event's index is unique within its run).

    `completions`, `ops` and `off_participants` are kept (several checks read each, and the
    ops are the bulk of a history); call `release` when done. `as_rows`: keep them as rows
    rather than serialized (`kept_as_rows` says when that pays).
    """
    level = StorageLevel.MEMORY_AND_DISK_DESER if as_rows else StorageLevel.MEMORY_AND_DISK

    def _kept(df: DataFrame) -> DataFrame:
        return kept(df, level)

    client = events.where(F.col("process").rlike(CLIENT_PROCESS))
    all_completions = _kept(_paired(client))
    completions = all_completions.where(F.col("paired"))
    unpaired = all_completions.where(~F.col("paired")).select(RUN, "index", "process", "f")

    txns = completions.where(F.col("f") == "txn").select(
        RUN,
        "index",
        "type",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "error_code",
        "txn_id",
        "begin_ts",
        "commit_ts",
        "tables",
    )
    txn_events = client.where((F.col("f") == "txn") & F.col("type").isin(*COMPLETION_TYPES))
    ops = _kept(_ops(txn_events, cat))
    # Participants are read whole only around a txn with one off tsv(t, commit_ts): the few
    # that are off are kept, the rest are recomputed if ever needed (keeping all 7.5 million
    # of 10^7 events cost more than placing them).
    participants = _participants(txn_events, cat)
    off_participants = (
        participants
        if cat.clock_free  # not placed: the checks that read it need a clock
        else _kept(participants.where(~F.col("commit_sv").eqNullSafe(F.col("t_sv"))))
    )

    txn_tables = txns.select(
        RUN,
        "index",
        "type",
        "node",
        "txn_id",
        "invoke_time",
        "commit_ts",
        "error_code",
        F.explode("tables").alias("table", "t"),
    ).select(
        RUN,
        "index",
        "type",
        "node",
        "txn_id",
        "invoke_time",
        "commit_ts",
        "error_code",
        "table",
        F.col("t.base_ts").alias("base_ts"),
        F.col("t.schema_version").alias("txn_sv"),
    )

    probes = completions.where((F.col("f") == "probe") & (F.col("type") == "ok")).select(
        RUN,
        "index",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "latency_ns",
        "asked_ts",
        # the ok value of a probe does not repeat the table: the invoke names it
        F.coalesce(F.col("invoke_table"), F.col("v_table")).alias("table"),
        F.col("v_ts").alias("ts"),
        "catalog_version",
        "table_sv",
    )

    ddls = completions.where((F.col("f") == "ddl") & (F.col("type") == "ok")).select(
        RUN,
        "index",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "latency_ns",
        *ddl_statement(),
        "catalog_version",
        "activation_ts",
    )

    # Final reads are few but carry whole tables: they come from the events, and only their
    # invoke index from the paired completions.
    read_invokes = completions.where(F.col("f") == "final-read").select(
        F.col(RUN).alias("_rr"), F.col("index").alias("_ri"), "invoke_index"
    )
    reads = client.where((F.col("f") == "final-read") & (F.col("type") == "ok"))
    table_reads = (
        reads.where(F.col("value.index").isNull())
        .select(
            RUN,
            "index",
            "node",
            F.col("value.table").alias("table"),
            F.col("value.ts").alias("ts"),
            F.col("value.schema_version").alias("read_sv"),
            F.col("value.rows").alias("rows"),
        )
        .join(
            F.broadcast(read_invokes),
            (F.col("_rr") == F.col(RUN)) & (F.col("_ri") == F.col("index")),
            "left",
        )
        .drop("_rr", "_ri")
    )
    index_reads = reads.where(F.col("value.index").isNotNull()).select(
        RUN,
        "index",
        "node",
        F.col("value.table").alias("table"),
        F.col("value.index").alias("index_name"),
        F.col("value.ts").alias("ts"),
        F.col("value.entries").alias("entries"),
    )
    nemesis = events.where(F.col("process") == "nemesis").select(
        RUN, "index", "time", "f", "value_json"
    )
    return RunFrames(
        events=events,
        all_completions=all_completions,
        completions=completions,
        unpaired=unpaired,
        txns=txns,
        ops=ops,
        participants=participants,
        off_participants=off_participants,
        txn_tables=txn_tables,
        probes=probes,
        ddls=ddls,
        table_reads=table_reads,
        index_reads=index_reads,
        nemesis=nemesis,
        persisted=(all_completions, ops, off_participants),
        runs=tuple(runs),
    )


def kept_as_rows(events: int, heap_bytes: int | None) -> bool:
    """Whether a history of `events` events should have its frames kept as rows, in a heap of
    `heap_bytes` that holds the executors' storage (None: not known, or not the executors').

    pyspark's MEMORY_AND_DISK is serialized: Java serialization of every row, undone on every
    scan. As rows, a warm 10^6-event analysis took 20 s instead of 25-26 s (8 GiB heap), but the
    rows take more memory: with about 2 KiB of heap per event they were no faster (3 * 10^6 in
    6 GiB) or slower (10^6 in 2 GiB: 34 s against 30 s; 10^7 in 6 GiB: 177 s against 131 s).
    So rows only from twice that room (nothing was measured between 2 and 6 KiB)."""
    return heap_bytes is not None and events * HEAP_PER_EVENT_AS_ROWS <= heap_bytes


def kept(df: DataFrame, level: StorageLevel) -> DataFrame:
    """`df` computed once, on first use, and read back by every later plan. A local checkpoint
    rather than a cache: the frame's plan becomes one leaf, so each check built on it is analysed
    and optimised without its derivation (a cached plan is still matched against the cache's
    entries), about 10% of a cold analysis. Its blocks live on the executors; losing one fails
    the analysis where a cache would recompute. `level`: rows or serialized (`kept_as_rows`)."""
    return df.localCheckpoint(eager=False, storageLevel=level)


def release(frames: RunFrames) -> None:
    """Let go of a run's kept frames. A local checkpoint's blocks are freed once its frame is
    garbage-collected (Spark's ContextCleaner; over Spark Connect the client tells the server);
    `unpersist` drops any frame that was cached instead."""
    for df in frames.persisted:
        df.unpersist()
