"""schema-conformance: every row a client saw must fit the schema active at its timestamp.

Rows stay raw JSON until here and are parsed as map<string, variant>, so a value keeps its JSON
kind (string, integer, decimal, boolean) and is judged against the column type with Spark
expressions mirroring `schemasync.types.value_problem`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import anomalies, sentence, ts, txt
from checker.frames import RunFrames

FLOAT32_MAX = 3.4028234663852886e38
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def observed_rows(frames: RunFrames) -> DataFrame:
    """(index, node, source, table, key, ts, sv, row_json) of every row a read returned; `sv` is
    the schema version the read reported (what a clock-free run places it by)."""
    reads = frames.ops.where(
        (F.col("op") == "r") & F.col("result").isNotNull() & F.col("result").startswith("{")
    ).select(
        "index",
        F.col("op_node").alias("node"),
        F.lit("read").alias("source"),
        "table",
        "key",
        F.col("op_ts").alias("ts"),
        F.col("op_sv").alias("sv_reported"),
        F.col("result").alias("row_json"),
    )
    final = frames.table_reads.select(
        "index", "node", "table", "ts", "read_sv", F.explode("rows").alias("r")
    ).select(
        "index",
        "node",
        F.lit("final read").alias("source"),
        "table",
        F.col("r.key").alias("key"),
        "ts",
        F.col("read_sv").alias("sv_reported"),
        F.col("r.row").alias("row_json"),
    )
    return reads.unionByName(final)


def _value_ok(v: Column) -> Column:
    """Does variant `v` (not null) fit the column type in base/length/prec/scale?"""
    sv = F.expr("schema_of_variant(_v)")
    is_int = sv.isin("BIGINT", "INT", "SMALLINT", "TINYINT") | sv.rlike(r"^DECIMAL\(\d+,0\)$")
    as_dec = F.expr("try_variant_get(_v, '$', 'decimal(38,0)')")
    numeric = is_int | sv.startswith("DECIMAL") | sv.isin("DOUBLE", "FLOAT")
    s = F.expr("try_variant_get(_v, '$', 'string')")
    is_str = sv == "STRING"
    frac = F.regexp_extract(s, r"\.([0-9]*)$", 1)
    whole = F.regexp_extract(s, r"^[+-]?([0-9]*)", 1)
    base = F.col("base")
    return (
        F.when(base == "INT32", is_int & as_dec.between(*INT32))
        .when(base.isin("INT64", "TIMESTAMP"), is_int & as_dec.between(*INT64))
        .when(
            base == "FLOAT",
            numeric & (F.abs(F.expr("try_variant_get(_v, '$', 'double')")) <= FLOAT32_MAX),
        )
        .when(base == "DOUBLE", numeric)
        .when(base == "VARCHAR", is_str & (F.char_length(s) <= F.col("length")))
        .when(
            base == "VARBINARY",
            is_str & s.rlike(r"^([0-9a-fA-F]{2})*$") & (F.length(s) / 2 <= F.col("length")),
        )
        .when(base == "BOOLEAN", sv == "BOOLEAN")
        .when(
            base == "DECIMAL",
            is_str
            & s.rlike(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$")
            & (F.length(F.rtrim(frac, F.lit("0"))) <= F.col("scale"))
            & (F.length(F.ltrim(whole, F.lit("0"))) <= F.col("prec") - F.col("scale")),
        )
        .otherwise(F.lit(False))
    )


def schema_conformance(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Rows with a value in a column the schema lacks, a null in a NOT NULL column, a value
    outside its type, or a missing column that has a default.

    The schema of a row is the one active at its timestamp; on a clock-free run, the one of the
    schema version its read reported (the read's own claim, held against the catalog)."""
    rows = cat.with_schema_version_of(observed_rows(frames), "ts", "table", "sv_reported", "cv")
    tables = cat.tables.select(
        F.col("catalog_version").alias("_tv"),
        F.col("table").alias("_tn"),
        F.col("schema_version").alias("sv"),
        "col_names",
    )
    rows = (
        rows.join(
            F.broadcast(tables),
            (F.col("_tv") == F.col("cv")) & (F.col("_tn") == F.col("table")),
            "inner",
        )
        .drop("_tv", "_tn")
        .withColumn("m", F.from_json("row_json", "map<string,variant>"))
        .where(F.col("m").isNotNull())
        .withColumn("_rid", F.monotonically_increasing_id())
    )

    extra = rows.withColumn(
        "extra",
        F.expr(
            "filter(map_keys(m), k -> not array_contains(col_names, k) "
            "and not is_variant_null(m[k]))"
        ),
    ).where(F.size("extra") > 0)
    extra_problems = extra.select(
        "_rid",
        sentence(
            "a value in column(s) ",
            F.array_join("extra", ", "),
            " that schema version ",
            txt("sv"),
            " does not have",
        ).alias("problem"),
    )

    cols = cat.columns.select(
        F.col("catalog_version").alias("_cv"),
        F.col("table").alias("_ct"),
        "col_name",
        "col_type",
        "base",
        "length",
        "prec",
        "scale",
        "nullable",
        "has_default",
    )
    per_col = rows.select("_rid", "cv", "table", "m").join(
        F.broadcast(cols), (F.col("_cv") == F.col("cv")) & (F.col("_ct") == F.col("table"))
    )
    per_col = per_col.withColumn("_v", F.element_at("m", F.col("col_name"))).withColumn(
        "present", F.map_contains_key("m", F.col("col_name"))
    )
    is_null = ~F.col("present") | F.expr("is_variant_null(_v)")
    problem = (
        F.when(
            ~F.col("present") & F.col("has_default"),
            sentence("column ", F.col("col_name"), " (which has a default) is missing"),
        )
        .when(is_null & ~F.col("nullable"), sentence("null in NOT NULL column ", F.col("col_name")))
        .when(
            ~is_null & ~_value_ok(F.col("_v")),
            sentence(
                "value ",
                F.expr("to_json(_v)"),
                " in column ",
                F.col("col_name"),
                " does not fit ",
                F.col("col_type"),
            ),
        )
    )
    col_problems = per_col.select("_rid", problem.alias("problem")).where(
        F.col("problem").isNotNull()
    )
    problems = (
        extra_problems.unionByName(col_problems)
        .groupBy("_rid")
        .agg(F.array_sort(F.collect_list("problem")).alias("problems"))
    )
    bad = rows.join(problems, "_rid")
    text = sentence(
        F.col("source"),
        " #",
        txt("index"),
        " on ",
        txt("node"),
        " returned ",
        F.col("table"),
        " key ",
        txt("key"),
        " at ",
        ts("ts"),
        " as ",
        F.col("row_json"),
        ", which does not conform to schema version ",
        txt("sv"),
        " it reported: " if cat.clock_free else " active then: ",
        F.array_join("problems", "; "),
    )
    return anomalies(bad, "schema-conformance", ["index"], ["node"], text)
