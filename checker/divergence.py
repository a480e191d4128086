"""replica-divergence: after the heal, two nodes' copies of one table disagree.

Final reads are taken after every acknowledged write, so two ok final reads of a table on two
nodes must hold the same rows (compared by key, each row by column id in the schema version
the read reported, whatever the order of keys or columns in the JSON); two final probes of a
table on two nodes must name the same schema version and the same columns (in any order). A
final probe is one invoked after the final-read phase began.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import anomalies, case, sentence, ts, txt
from checker.frames import RunFrames
from checker.sql_expr import Sql, ref

CAPABILITY = "per-node-copies"  # run.json "capabilities": the target keeps a copy per node


def _latest_per_node(df: DataFrame) -> DataFrame:
    w = Window.partitionBy("run", "table", "node").orderBy(F.col("index").desc())
    return df.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn")


def _normal_rows(by_id: bool) -> Column:
    """The rows of a read as a sorted array of (key, sorted column/value pairs): each column
    by its id in the read's schema (`col_ids`) where `by_id` and the catalog knows it, by its
    name otherwise. Columns are identified by id, so a read before a RENAME COLUMN and one
    after it hold the same rows."""

    def column(c: Column) -> Column:
        name = c.getField("key")
        key = F.coalesce(F.element_at("col_ids", name).cast("string"), name) if by_id else name
        return F.struct(key.alias("key"), c.getField("value").alias("value"))

    def normal(r: Column) -> Column:
        cols = F.map_entries(F.from_json(r.row, "map<string,string>"))
        return F.struct(r.key.alias("key"), F.array_sort(F.transform(cols, column)).alias("cols"))

    return F.array_sort(F.transform(F.coalesce("rows", F.array()), normal))


def _with_column_ids(reads: DataFrame, cat: CatalogIndex) -> DataFrame:
    """`reads` plus `col_ids` (column name -> id) of the table named `table` at the schema
    version `read_sv` the read reported (its newest incarnation if a dropped table's name came
    back); null when the catalog has no such schema."""
    placed = cat.with_table(
        cat.with_reported_version(reads, "table", "read_sv", "_rv"), "_rv", "table", "_r"
    )
    schemas = cat.schemas.select(
        F.col("run").alias("_srun"),
        F.col("table_id").alias("_sid"),
        F.col("schema_version").alias("_ssv"),
        "col_ids",
    )
    cond = (
        (F.col("_srun") == F.col("run"))
        & (F.col("_r_id") == F.col("_sid"))
        & (F.col("read_sv") == F.col("_ssv"))
    )
    return placed.join(F.broadcast(schemas), cond, "left").drop(
        "_rv", "_r_id", "_r_sv", "_r_since", "_srun", "_sid", "_ssv"
    )


def _node_pairs(df: DataFrame) -> DataFrame:
    """Each two nodes' rows of one table of one run: columns `a_*`, `b_*` and `run`."""
    a = df.select("run", *(F.col(c).alias(f"a_{c}") for c in df.columns if c != "run"))
    b = df.select(
        *(F.col(c).alias(f"b_{c}") for c in df.columns if c != "run"), F.col("run").alias("_r")
    )
    cond = (
        (F.col("run") == F.col("_r"))
        & (F.col("a_table") == F.col("b_table"))
        & (F.col("a_node") < F.col("b_node"))
    )
    return a.join(b, cond).drop("_r")


def _row_text(side: str) -> Sql:
    """The first differing key's row on one side as `{c=v, ...}`, or 'absent'."""
    row = f"try_element_at(filter(`{side}_named`, r -> r.`key` = `diff_key`), 1)"
    cols = f"transform({row}.cols, c -> concat(c.`key`, '=', coalesce(c.`value`, 'null')))"
    return Sql(f"coalesce(concat('{{', array_join({cols}, ', '), '}}'), 'absent')")


# a probe's columns (history.md: id, name, type, nullable, default), compared in any order
COLUMNS = (
    "array<struct<id: bigint, name: string, type: string, nullable: boolean, default: string>>"
)


def _columns_text(side: str) -> Sql:
    """A probe's columns as `[c1 INT32, c2 VARCHAR(4) NOT NULL DEFAULT x]`."""
    one = (
        "concat(c.name, ' ', c.type, if(c.nullable, '', ' NOT NULL'), "
        "coalesce(concat(' DEFAULT ', c.`default`), ''))"
    )
    return Sql(
        f"coalesce(concat('[', array_join(transform(`{side}`, c -> {one}), ', '), ']'), '[]')"
    )


def replica_divergence(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Pairs of nodes whose final reads (rows) or final probes (schema) of a table disagree."""
    reads = _with_column_ids(_latest_per_node(frames.table_reads), cat).select(
        "run",
        "table",
        "node",
        "index",
        "ts",
        _normal_rows(by_id=True).alias("rows"),
        _normal_rows(by_id=False).alias("named"),  # as the node named them, for the sentence
    )
    pairs = _node_pairs(reads).where(F.col("a_rows") != F.col("b_rows"))
    differing = F.array_union(
        F.array_except("a_rows", "b_rows"), F.array_except("b_rows", "a_rows")
    )
    keys = F.array_distinct(F.transform(differing, lambda r: r.key))
    pairs = pairs.withColumn("n_keys", F.size(keys)).withColumn("diff_key", F.array_min(keys))
    rows_text = sentence(
        "final reads of ",
        ref("a_table"),
        " disagree after the heal: #",
        txt("a_index"),
        " on ",
        ref("a_node"),
        " at ",
        ts("a_ts"),
        " and #",
        txt("b_index"),
        " on ",
        ref("b_node"),
        " at ",
        ts("b_ts"),
        " differ in ",
        txt("n_keys"),
        " key(s); key ",
        txt("diff_key"),
        " is ",
        _row_text("a"),
        " on ",
        ref("a_node"),
        " and ",
        _row_text("b"),
        " on ",
        ref("b_node"),
    )
    by_rows = anomalies(
        pairs, "replica-divergence", ["a_index", "b_index"], ["a_node", "b_node"], rows_text
    )

    phase = (
        frames.events.where((F.col("f") == "final-read") & (F.col("type") == "invoke"))
        .groupBy("run")
        .agg(F.min("index").alias("_phase"))
        .withColumnRenamed("run", "_pr")
    )
    probes = (
        frames.probes.where(F.col("table").isNotNull())
        .join(F.broadcast(phase), F.col("_pr") == F.col("run"))
        .where(F.col("invoke_index") > F.col("_phase"))
    )
    probes = _latest_per_node(probes).select("run", "table", "node", "index", "table_sv")
    # the columns each final probe answered: the final probes (few, broadcast) pick their
    # events out, and only theirs are parsed
    answered = frames.events.where((F.col("f") == "probe") & (F.col("type") == "ok")).select(
        F.col("run").alias("_ar"),
        F.col("index").alias("_pi"),
        F.col("value.columns").alias("_cols"),
    )
    probes = (
        answered.join(
            F.broadcast(probes), (F.col("_ar") == F.col("run")) & (F.col("_pi") == F.col("index"))
        )
        .withColumn("cols", F.array_sort(F.from_json("_cols", COLUMNS)))
        .drop("_ar", "_pi", "_cols")
    )
    schema_pairs = _node_pairs(probes).where(
        ~F.col("a_table_sv").eqNullSafe(F.col("b_table_sv"))
        # columns are compared where both probes gave them (history.md: a list or null)
        | (F.col("a_cols") != F.col("b_cols")).eqNullSafe(True)
    )
    schema_text = sentence(
        "final probes of ",
        ref("a_table"),
        " disagree on its schema after the heal: ",
        ref("a_node"),
        " (#",
        txt("a_index"),
        ") answered schema version ",
        txt("a_table_sv"),
        case(
            ("`a_table_sv` <=> `b_table_sv`", sentence(" with columns ", _columns_text("a_cols"))),
            otherwise="",
        ),
        ", ",
        ref("b_node"),
        " (#",
        txt("b_index"),
        ") answered ",
        txt("b_table_sv"),
        case(
            ("`a_table_sv` <=> `b_table_sv`", sentence(" with columns ", _columns_text("b_cols"))),
            otherwise="",
        ),
    )
    by_schema = anomalies(
        schema_pairs,
        "replica-divergence",
        ["a_index", "b_index"],
        ["a_node", "b_node"],
        schema_text,
    )
    return by_rows.unionByName(by_schema)
