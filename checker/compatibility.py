"""incompatible-commit: a txn committed across a change that is not forward compatible.

The judgment of each catalog step is the checker's own (`checker.forward_compat`), computed once per
(table, step) in the driver and folded into the catalog timelines as a count per table schema
version: the event path compares two counts, and only the txns reported look up their step.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import case, sentence, sql_text, ts, txt
from checker.frames import RunFrames
from checker.sql_expr import ref


def incompatible_commit(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Committed txns with an incompatible step between base_ts and commit_ts on an enlisted
    table, or whose enlisted table did not exist at commit_ts."""
    tt = frames.txn_tables.where((F.col("type") == "ok") & F.col("commit_ts").isNotNull())
    tt = cat.with_table_at(tt, "base_ts", "table", "b").where(F.col("b_id").isNotNull())
    tt = cat.with_table_id_at(tt, "commit_ts", "b_id", "c")
    bad = tt.where(F.col("c_sv").isNull() | (F.col("c_inc") > F.col("b_inc")))
    # only the txns to report are placed in catalog versions and given their first bad step
    bad = cat.with_version(cat.with_version(bad, "base_ts", "bv"), "commit_ts", "cv")
    steps = cat.incompatible_steps.select(
        F.col("run").alias("_sr"), F.col("table_id").alias("_sid"), "steps"
    )
    bad = bad.join(
        F.broadcast(steps),
        (F.col("_sr") == F.col("run")) & (F.col("_sid") == F.col("b_id")),
        "left",
    )
    first_step = F.try_element_at(
        F.filter(
            "steps", lambda s: (s.step_version > F.col("bv")) & (s.step_version <= F.col("cv"))
        ),
        F.lit(1),
    )
    bad = bad.withColumn("first_step", first_step)
    text = sentence(
        "txn ",
        txt("txn_id"),
        " committed on ",
        txt("node"),
        " at ",
        ts("commit_ts"),
        " with ",
        ref("table"),
        " enlisted at ",
        ts("base_ts"),
        " (catalog version ",
        txt("bv"),
        ", schema version ",
        txt("txn_sv"),
        "), ",
        case(
            (
                "`c_sv` is null",
                sentence("but the table did not exist at commit (catalog version ", txt("cv"), ")"),
            ),
            otherwise=sentence(
                "but catalog version ",
                txt("first_step.step_version"),
                " made a change that is not forward compatible: ",
                ref("first_step.why"),
            ),
        ),
    )
    return bad.selectExpr(
        "run",
        "'incompatible-commit' as class",
        "array(cast(`index` as bigint)) as events",
        "filter(array(`node`), x -> x is not null) as nodes",
        f"{sql_text(text)} as explanation",
    )
