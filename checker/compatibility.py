"""incompatible-commit: a txn committed across a change that is not forward compatible.

The judgment of each catalog step is `schemasync.compat` (one source of truth), computed once per
(table, step) in the driver; the event path only joins txns with the incompatible steps.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import sentence, ts, txt
from checker.frames import RunFrames


def incompatible_commit(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Committed txns with an incompatible step between base_ts and commit_ts on an enlisted
    table, or whose enlisted table did not exist at commit_ts."""
    tt = frames.txn_tables.where((F.col("type") == "ok") & F.col("commit_ts").isNotNull())
    tt = cat.with_version(tt, "base_ts", "bv")
    tt = cat.with_version(tt, "commit_ts", "cv")
    tt = cat.with_table(tt, "bv", "table", "b").where(F.col("b_id").isNotNull())
    exists = cat.tables.select(
        F.col("catalog_version").alias("_ev"),
        F.col("table_id").alias("_eid"),
        F.col("table").alias("commit_name"),
    )
    tt = tt.join(
        F.broadcast(exists),
        (F.col("_ev") == F.col("cv")) & (F.col("_eid") == F.col("b_id")),
        "left",
    )
    steps = cat.incompatible_steps.select(F.col("table_id").alias("_sid"), "step_version", "why")
    with_steps = tt.join(
        F.broadcast(steps),
        (F.col("_sid") == F.col("b_id"))
        & (F.col("step_version") > F.col("bv"))
        & (F.col("step_version") <= F.col("cv")),
        "left",
    )
    grouped = with_steps.groupBy(
        "index", "node", "txn_id", "table", "base_ts", "commit_ts", "bv", "cv", "txn_sv", "_eid"
    ).agg(F.min(F.struct("step_version", "why")).alias("first_step"))
    bad = grouped.where(F.col("_eid").isNull() | F.col("first_step.step_version").isNotNull())
    text = sentence(
        "txn ",
        txt("txn_id"),
        " committed on ",
        txt("node"),
        " at ",
        ts("commit_ts"),
        " with ",
        F.col("table"),
        " enlisted at ",
        ts("base_ts"),
        " (catalog version ",
        txt("bv"),
        ", schema version ",
        txt("txn_sv"),
        "), ",
        F.when(
            F.col("_eid").isNull(),
            sentence("but the table did not exist at commit (catalog version ", txt("cv"), ")"),
        ).otherwise(
            sentence(
                "but catalog version ",
                txt("first_step.step_version"),
                " made a change that is not forward compatible: ",
                F.col("first_step.why"),
            )
        ),
    )
    return bad.select(
        F.lit("incompatible-commit").alias("class"),
        F.array(F.col("index").cast("bigint")).alias("events"),
        F.filter(F.array(F.col("node")), lambda x: x.isNotNull()).alias("nodes"),
        text.alias("explanation"),
    )
