"""schema-conformance: every row a client saw must fit the schema active at its timestamp.

Rows stay raw JSON until here and are parsed as map<string, variant>, so a value keeps its JSON
kind (string, integer, decimal, boolean) and is judged against the column type with Spark
expressions over the checker's own type model (`checker.sql_types`); a column of a type the
model does not know (null `base`) has its nulls judged but not its values.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import anomalies, as_column, case, sentence, ts, txt
from checker.frames import RunFrames
from checker.sql_expr import Sql, ref

FLOAT32_MAX = 3.4028234663852886e38
INT32 = (-(2**31), 2**31 - 1)
KEY_COLUMN = "key"  # the primary key every row carries beside its `row`


def observed_rows(frames: RunFrames) -> DataFrame:
    """(run, index, node, source, table, key, ts, sv_reported, row_json) of every row a read
    returned; `sv_reported` is the schema version the read reported (what a clock-free run
    places it by)."""
    reads = frames.ops.where(
        (F.col("op") == "r") & F.col("result").isNotNull() & F.col("result").startswith("{")
    ).select(
        "run",
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
        "run", "index", "node", "table", "ts", "read_sv", F.explode("rows").alias("r")
    ).select(
        "run",
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


def value_fits(j: Column, s: Column) -> Column:
    """Does a value (not null), given as its JSON text `j` and, for a JSON string, its text `s`,
    fit the column type in base/length/prec/scale?

    The JSON text tells the value's kind by its first character, and is computed once per value
    (the variant's own schema string, and regexes in every branch, cost four times as much)."""
    first = F.substring(j, 1, 1)
    is_str = first == '"'
    is_bool = j.isin("true", "false")
    numeric = ~is_str & ~is_bool & ~first.isin("{", "[")
    is_int = numeric & ~j.contains(".") & ~j.contains("e") & ~j.contains("E")
    as_long = j.try_cast("bigint")  # null beyond INT64
    # a DECIMAL as a string (ours) or as a number (the contract leaves the encoding open): its
    # digits either way, a number's as Spark's variant keeps them (exactly up to 38 digits
    # without an exponent; otherwise a double's text)
    d = F.when(is_str, s).when(numeric, j)
    frac = F.regexp_extract(d, r"\.([0-9]*)$", 1)
    whole = F.regexp_extract(d, r"^[+-]?([0-9]*)", 1)
    base = F.col("base")
    return (
        # beyond INT64 the cast is null, and so would the verdict be: false, out of range
        F.when(base == "INT32", is_int & F.coalesce(as_long.between(*INT32), F.lit(False)))
        .when(base.isin("INT64", "TIMESTAMP"), is_int & as_long.isNotNull())
        .when(base == "FLOAT", numeric & (F.abs(j.try_cast("double")) <= FLOAT32_MAX))
        .when(base == "DOUBLE", numeric)
        .when(base == "VARCHAR", is_str & (F.char_length(s) <= F.col("length")))
        .when(
            base == "VARBINARY",
            is_str & s.rlike(r"^([0-9a-fA-F]{2})*$") & (F.length(s) / 2 <= F.col("length")),
        )
        .when(base == "BOOLEAN", is_bool)
        .when(
            base == "DECIMAL",
            d.isNotNull()
            & d.rlike(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$")
            & (F.length(F.rtrim(frac, F.lit("0"))) <= F.col("scale"))
            & (F.length(F.ltrim(whole, F.lit("0"))) <= F.col("prec") - F.col("scale")),
        )
        .otherwise(base.isNull())
    )


def schema_conformance(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Rows with a value in a column the schema lacks, a null in a NOT NULL column, a value
    outside its type, or a missing column that has a default.

    The schema of a row is the one active at its timestamp; on a clock-free run, the one of the
    schema version its read reported (the read's own claim, held against the catalog)."""
    rows = cat.with_schema_version_of(observed_rows(frames), "ts", "table", "sv_reported", "cv")
    # One row per column of the schema, plus one (col_name null) that checks for extra keys:
    # each observed row is parsed once, joined with its schema, and only rows with a problem
    # travel on to be grouped.
    checks = cat.columns.select(
        F.col("run").alias("_cr"),
        F.col("table_id").alias("_cid"),
        F.col("schema_version").alias("_csv"),
        "col_name",
        "col_type",
        "base",
        "length",
        "prec",
        "scale",
        "nullable",
        "has_default",
        F.lit(None).cast("array<string>").alias("col_names"),
    ).unionByName(
        cat.schemas.select(
            F.col("run").alias("_cr"),
            F.col("table_id").alias("_cid"),
            F.col("schema_version").alias("_csv"),
            F.map_keys("col_ids").alias("col_names"),
        ),
        allowMissingColumns=True,
    )
    svs = cat.tables.select(
        F.col("run").alias("_sv_r"),
        F.col("catalog_version").alias("_sv_cv"),
        F.col("table").alias("_sv_t"),
        F.col("table_id").alias("sv_id"),
        F.col("schema_version").alias("sv"),
    )
    rows = rows.join(
        F.broadcast(svs),
        (F.col("_sv_r") == F.col("run"))
        & (F.col("_sv_cv") == F.col("cv"))
        & (F.col("_sv_t") == F.col("table")),
    ).withColumn("m", F.from_json("row_json", "map<string,variant>"))
    per_col = rows.where(F.col("m").isNotNull()).join(
        F.broadcast(checks),
        (F.col("_cr") == F.col("run"))
        & (F.col("_cid") == F.col("sv_id"))
        & (F.col("_csv") == F.col("sv")),
    )
    # The primary key travels outside `row` (history.md): a catalog that lists it as column
    # `key` is answered by the row's key when the row does not repeat it.
    implicit_key = (F.col("col_name") == KEY_COLUMN) & ~F.map_contains_key("m", KEY_COLUMN)
    per_col = per_col.withColumn(
        "_v",
        F.when(implicit_key, F.parse_json(F.col("key").cast("string"))).otherwise(
            F.element_at("m", F.col("col_name"))
        ),
    ).withColumn("present", F.map_contains_key("m", F.col("col_name")) | implicit_key)
    # the value's JSON text (and a string's text) once, in a projection of its own
    per_col = per_col.withColumn("_j", F.to_json("_v"))
    per_col = per_col.withColumn(
        "_s", F.when(F.col("_j").startswith('"'), F.expr("try_variant_get(_v, '$', 'string')"))
    )
    # a row that repeats its own key is no extra column where the catalog leaves the key
    # implicit (any other value under `key` is)
    repeat = F.to_json(F.col("m")[KEY_COLUMN]) == F.col("key").cast("string")
    extra = F.filter(
        F.map_keys("m"),
        lambda k: (
            ~F.array_contains(F.col("col_names"), k)
            & ~F.is_variant_null(F.col("m")[k])
            & ~((k == KEY_COLUMN) & F.coalesce(repeat, F.lit(False)))
        ),
    )
    is_null = ~F.col("present") | F.expr("is_variant_null(_v)")
    # First a small code per (row, column), and the sentence only for the few with a problem:
    # the hot expression stays small enough for Spark to compile.
    code = (
        F.when(F.col("col_name").isNull(), F.when(F.size(extra) > 0, F.lit(4)))
        .when(~F.col("present") & F.col("has_default"), F.lit(1))
        .when(is_null & ~F.col("nullable"), F.lit(2))
        .when(~is_null & ~value_fits(F.col("_j"), F.col("_s")), F.lit(3))
    )
    problem = case(
        (
            "`_pc` = 4",
            sentence(
                "a value in column(s) ",
                F.array_join(extra, ", "),
                " that schema version ",
                txt("sv"),
                " does not have",
            ),
        ),
        ("`_pc` = 1", sentence("column ", ref("col_name"), " (which has a default) is missing")),
        ("`_pc` = 2", sentence("null in NOT NULL column ", ref("col_name"))),
        otherwise=sentence(
            "value ", ref("_j"), " in column ", ref("col_name"), " does not fit ", ref("col_type")
        ),
    )
    context = ["run", "index", "node", "source", "table", "key", "ts", "sv", "row_json"]
    bad = (
        per_col.select("*", code.alias("_pc"))
        .where(F.col("_pc").isNotNull())
        .select(*context, as_column(problem).alias("problem"))
        .groupBy(*context)
        .agg(F.array_sort(F.collect_set("problem")).alias("problems"))
    )
    text = sentence(
        ref("source"),
        " #",
        txt("index"),
        " on ",
        txt("node"),
        " returned ",
        ref("table"),
        " key ",
        txt("key"),
        " at ",
        ts("ts"),
        " as ",
        ref("row_json"),
        ", which does not conform to schema version ",
        txt("sv"),
        " it reported: " if cat.clock_free else " active then: ",
        Sql("array_join(`problems`, '; ')"),
    )
    return anomalies(bad, "schema-conformance", ["index"], ["node"], text)
