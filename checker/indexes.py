"""F1's index corruptions in the final reads: index-missing and index-orphan.

Only indexes AVAILABLE at the read's timestamp are judged: a REGISTERED or BUILDING index is
legitimately incomplete. Without comparable timestamps (`"clock": "none"`) the index's state is
the one of the last catalog version: final reads come after the heal, when the catalog is the
last one (history.md lists both classes among those that apply on such a run).
An entry whose row does not exist, or whose indexed values differ from the row's, is an
orphan; a row with no entry at all is a missing entry.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.durability import same_value
from checker.explain import anomalies, case, sentence, ts, txt
from checker.frames import RunFrames
from checker.sql_expr import ref


def _available_index_reads(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    latest = Window.partitionBy("run", "table", "index_name").orderBy(F.col("index").desc())
    reads = frames.index_reads.withColumn("_rn", F.row_number().over(latest)).where(
        F.col("_rn") == 1
    )
    reads = _with_index_version(reads, cat)
    idx = cat.indexes.select(
        F.col("run").alias("_irun"),
        F.col("catalog_version").alias("_icv"),
        F.col("table").alias("_it"),
        F.col("index").alias("_in"),
        "index_columns",
        "state",
    )
    return (
        reads.join(
            F.broadcast(idx),
            (F.col("_irun") == F.col("run"))
            & (F.col("_icv") == F.col("iv"))
            & (F.col("_it") == F.col("table"))
            & (F.col("_in") == F.col("index_name")),
        )
        .where(F.col("state") == "AVAILABLE")
        .drop("_irun")
    )


def _with_index_version(reads: DataFrame, cat: CatalogIndex) -> DataFrame:
    """`reads` plus `iv`: cat(ts) of each read, or the run's last version without a clock."""
    if not cat.clock_free:
        return cat.with_version(reads, "ts", "iv")
    last = cat.versions.groupBy(F.col("run").alias("_lr")).agg(F.max("catalog_version").alias("iv"))
    return reads.join(F.broadcast(last), F.col("_lr") == F.col("run")).drop("_lr")


def _table_reads(frames: RunFrames) -> DataFrame:
    """The latest final read of each table (even an empty one); its run as `_trun`."""
    latest = Window.partitionBy("run", "table").orderBy(F.col("index").desc())
    reads = frames.table_reads.withColumn("_rn", F.row_number().over(latest)).where(
        F.col("_rn") == 1
    )
    return reads.select(
        F.col("run").alias("_trun"),
        F.col("table").alias("_tt"),
        F.col("index").alias("table_read"),
        F.col("node").alias("table_node"),
        F.col("ts").alias("table_ts"),
        "rows",
    )


def _table_rows(frames: RunFrames) -> DataFrame:
    return (
        _table_reads(frames)
        .select(
            "_trun", "_tt", "table_read", "table_node", "table_ts", F.explode("rows").alias("r")
        )
        .select(
            "_trun",
            "_tt",
            "table_read",
            "table_node",
            "table_ts",
            F.col("r.key").alias("row_key"),
            F.col("r.row").alias("row_json"),
        )
    )


def index_missing(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Rows of the final table read with no entry in an AVAILABLE index of that table."""
    reads = _available_index_reads(frames, cat)
    entries = reads.select(
        F.col("run").alias("_er"), F.col("index").alias("_ir"), F.explode("entries").alias("e")
    ).select("_er", "_ir", F.col("e.key").alias("_ek"))
    rows = _table_rows(frames)
    pairs = reads.select(
        "run",
        F.col("index").alias("index_read"),
        F.col("node").alias("index_node"),
        "table",
        "index_name",
        F.col("ts").alias("index_ts"),
    ).join(rows, (F.col("_trun") == F.col("run")) & (F.col("_tt") == F.col("table")))
    missing = pairs.join(
        entries,
        (F.col("_er") == F.col("run"))
        & (F.col("_ir") == F.col("index_read"))
        & (F.col("_ek") == F.col("row_key")),
        "left_anti",
    )
    text = sentence(
        "row key ",
        txt("row_key"),
        " of ",
        ref("table"),
        " (final read #",
        txt("table_read"),
        " at ",
        ts("table_ts"),
        ": ",
        ref("row_json"),
        ") has no entry in AVAILABLE index ",
        ref("index_name"),
        " (final read #",
        txt("index_read"),
        " at ",
        ts("index_ts"),
        ")",
    )
    return anomalies(
        missing, "index-missing", ["table_read", "index_read"], ["table_node", "index_node"], text
    )


def index_orphan(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Entries of an AVAILABLE index whose row does not exist or has other indexed values."""
    reads = _available_index_reads(frames, cat)
    entries = reads.select(
        "run",
        F.col("index").alias("index_read"),
        F.col("node").alias("index_node"),
        "table",
        "index_name",
        "index_columns",
        F.col("ts").alias("index_ts"),
        F.explode("entries").alias("e"),
    ).select(
        "*",
        F.col("e.key").alias("entry_key"),
        F.from_json(F.col("e.values"), "map<string,string>").alias("ev"),
        F.col("e.values").alias("entry_json"),
    )
    reads_t = _table_reads(frames).drop("rows")
    entries = entries.join(
        reads_t, (F.col("_trun") == F.col("run")) & (F.col("_tt") == F.col("table"))
    ).drop("_trun", "_tt")
    rows = _table_rows(frames).select(
        "_trun",
        "_tt",
        "row_key",
        "row_json",
        F.from_json("row_json", "map<string,string>").alias("rm"),
    )
    j = entries.join(
        rows,
        (F.col("_trun") == F.col("run"))
        & (F.col("_tt") == F.col("table"))
        & (F.col("row_key") == F.col("entry_key")),
        "left",
    )
    stale = F.exists(
        "index_columns",
        lambda c: ~same_value(F.element_at("ev", c), F.element_at("rm", c)),
    )
    bad = j.where(F.col("row_key").isNull() | stale)
    text = sentence(
        "AVAILABLE index ",
        ref("index_name"),
        " of ",
        ref("table"),
        " (final read #",
        txt("index_read"),
        " at ",
        ts("index_ts"),
        ") has an entry ",
        ref("entry_json"),
        " for key ",
        txt("entry_key"),
        case(
            ("`row_key` is null", ", but the final table read has no such row"),
            otherwise=sentence(
                ", but the row in final read #",
                txt("table_read"),
                " is ",
                ref("row_json"),
                " (stale index values)",
            ),
        ),
    )
    return anomalies(
        bad, "index-orphan", ["index_read", "table_read"], ["index_node", "table_node"], text
    )
