"""The derived frames every check reads: completions paired with their invokes, txn ops and
participants exploded, probes, DDL acks and final reads.

Pairing uses Jepsen's rule (an invoke is followed by exactly one completion of the same process),
so a lag over a window per process finds each completion's invoke without a self-join.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

SCHEMA_ERRORS = (
    "SCHEMA_VERSION_MISMATCH",
    "INCOMPATIBLE_SCHEMA",
    "TABLE_DROPPED",
    "TABLE_NOT_FOUND",
)


@dataclass(frozen=True)
class RunFrames:
    """Frames of one run; every column name is stable and documented in the builder."""

    events: DataFrame
    completions: DataFrame
    txns: DataFrame
    ops: DataFrame
    participants: DataFrame
    txn_tables: DataFrame
    probes: DataFrame
    ddls: DataFrame
    table_reads: DataFrame
    index_reads: DataFrame
    nemesis: DataFrame


def build_frames(events: DataFrame) -> RunFrames:
    """Derive the frames from validated events (columns of checker.ingest).

    `completions` and `ops` are persisted (every check reads them); call `release` when done.
    """
    client = events.where(F.col("process") != "nemesis")
    w = Window.partitionBy("process").orderBy("index")
    paired = client.select(
        "*",
        F.lag("type").over(w).alias("_pt"),
        F.lag("f").over(w).alias("_pf"),
        F.lag("index").over(w).alias("invoke_index"),
        F.lag("time").over(w).alias("invoke_time"),
        F.lag("value").over(w).alias("invoke_value"),
    )
    completions = (
        paired.where(
            F.col("type").isin("ok", "fail", "info")
            & (F.col("_pt") == "invoke")
            & (F.col("_pf") == F.col("f"))
        )
        .drop("_pt", "_pf")
        .withColumn("latency_ns", F.col("time") - F.col("invoke_time"))
        .withColumn("error_code", F.col("error.code"))
        .persist()
    )

    txns = completions.where(F.col("f") == "txn").select(
        "index",
        "type",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "error_code",
        F.col("value.txn_id").alias("txn_id"),
        F.col("value.begin_ts").alias("begin_ts"),
        F.col("value.commit_ts").alias("commit_ts"),
        F.col("value.tables").alias("tables"),
        F.col("value.participants").alias("participants"),
        F.col("value.ops").alias("ops"),
        F.col("invoke_value.ops").alias("invoke_ops"),
        F.expr(
            "array_max(transform(coalesce(value.ops, array()), "
            "(o, i) -> if(o.op_ts is not null, i, -1)))"
        ).alias("last_exec"),
    )

    ops = (
        txns.select(
            "index",
            "type",
            "txn_id",
            "commit_ts",
            "tables",
            "last_exec",
            "time",
            "invoke_time",
            F.posexplode("ops").alias("pos", "op"),
        )
        .where(F.col("op.op_ts").isNotNull())
        .select(
            "index",
            "type",
            "txn_id",
            "commit_ts",
            "time",
            "invoke_time",
            "pos",
            F.col("op.op").alias("op"),
            F.col("op.table").alias("table"),
            F.col("op.key").alias("key"),
            F.col("op.row").alias("row"),
            F.col("op.result").alias("result"),
            F.col("op.index").alias("index_name"),
            F.col("op.op_ts").alias("op_ts"),
            F.col("op.node").alias("op_node"),
            F.col("op.schema_version").alias("op_sv"),
            F.element_at("tables", F.col("op.table")).getField("schema_version").alias("txn_sv"),
            F.element_at("tables", F.col("op.table")).getField("base_ts").alias("base_ts"),
            # An op succeeded when the txn committed, or the commit was reached (commit_ts set),
            # or a later op ran after it; the last executed op of an aborted txn may have failed.
            (
                (F.col("type") == "ok")
                | F.col("commit_ts").isNotNull()
                | (F.col("pos") < F.col("last_exec"))
            ).alias("succeeded"),
        )
        .persist()
    )

    participants = (
        txns.where(F.col("commit_ts").isNotNull())
        .select(
            "index",
            "type",
            "txn_id",
            "commit_ts",
            "tables",
            F.posexplode("participants").alias("ppos", "p"),
        )
        .select(
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

    txn_tables = txns.select(
        "index",
        "type",
        "node",
        "txn_id",
        "invoke_time",
        "commit_ts",
        "error_code",
        F.explode("tables").alias("table", "t"),
    ).select(
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
        "index",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "latency_ns",
        F.col("invoke_value.ts").alias("asked_ts"),
        # the ok value of a probe does not repeat the table: the invoke names it
        F.coalesce(F.col("invoke_value.table"), F.col("value.table")).alias("table"),
        F.col("value.ts").alias("ts"),
        F.col("value.catalog_version").alias("catalog_version"),
        F.col("value.table_schema_version").alias("table_sv"),
    )

    ddls = completions.where((F.col("f") == "ddl") & (F.col("type") == "ok")).select(
        "index",
        "node",
        "time",
        "invoke_time",
        "invoke_index",
        "latency_ns",
        F.col("invoke_value.stmt").alias("stmt"),
        F.coalesce(F.col("invoke_value.table"), F.col("value.table")).alias("table"),
        F.col("invoke_value.kind").alias("kind"),
        F.col("value.catalog_version").alias("catalog_version"),
        F.col("value.activation_ts").alias("activation_ts"),
    )

    reads = completions.where((F.col("f") == "final-read") & (F.col("type") == "ok"))
    table_reads = reads.where(F.col("value.index").isNull()).select(
        "index",
        "invoke_index",
        "node",
        F.col("value.table").alias("table"),
        F.col("value.ts").alias("ts"),
        F.col("value.schema_version").alias("read_sv"),
        F.col("value.rows").alias("rows"),
    )
    index_reads = reads.where(F.col("value.index").isNotNull()).select(
        "index",
        "node",
        F.col("value.table").alias("table"),
        F.col("value.index").alias("index_name"),
        F.col("value.ts").alias("ts"),
        F.col("value.entries").alias("entries"),
    )
    nemesis = events.where(F.col("process") == "nemesis").select("index", "time", "f", "value_json")
    return RunFrames(
        events=events,
        completions=completions,
        txns=txns,
        ops=ops,
        participants=participants,
        txn_tables=txn_tables,
        probes=probes,
        ddls=ddls,
        table_reads=table_reads,
        index_reads=index_reads,
        nemesis=nemesis,
    )


def release(frames: RunFrames) -> None:
    """Drop the cached frames of a run."""
    frames.ops.unpersist()
    frames.completions.unpersist()
