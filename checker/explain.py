"""The shape of an anomaly row and Spark expressions that render its sentence.

Every check returns the same columns (the run of the batch, class, events, nodes, explanation)
so the analyzer can union them; timestamps are rendered as `physical_ms:logical`, as people
read HLC values.

A sentence is SQL text (`checker.sql_expr`) and crosses to the JVM once: built from Column
objects it was a quarter of the py4j round trips of a whole analysis. A part that can only be
a Column (a Python lambda over an array) makes the sentence a Column again.
"""

from __future__ import annotations

from typing import overload

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.catalog_index import RUN
from checker.local_frames import local_frame
from checker.sql_expr import Sql, literal, ref

ANOMALY_SCHEMA = (
    "run bigint, class string, events array<bigint>, nodes array<string>, explanation string"
)
Text = Sql | Column


def as_column(text: Text) -> Column:
    return text.column() if isinstance(text, Sql) else text


def ts(col: str | Sql) -> Sql:
    """An HLC timestamp as `physical_ms:logical` ('none' when null)."""
    c = _operand(col)
    return Sql(
        f"coalesce(concat(cast(shiftright({c}, 16) as string), ':', "
        f"cast({c} & 65535 as string)), 'none')"
    )


@overload
def txt(col: Column) -> Column: ...
@overload
def txt(col: str | Sql) -> Sql: ...
def txt(col: str | Text) -> Text:
    """Any column as text, 'null' when null."""
    if isinstance(col, Column):
        return F.coalesce(col.cast("string"), F.lit("null"))
    return Sql(f"coalesce(cast({_operand(col)} as string), 'null')")


def secs(col: str | Sql) -> Sql:
    """Controller time (ns since run start) as seconds with 3 decimals."""
    return Sql(f"format_number({_operand(col)} / 1000000000.0D, 3)")


@overload
def sentence(*parts: str | Sql) -> Sql: ...
@overload
def sentence(*parts: str | Text) -> Text: ...
def sentence(*parts: str | Text) -> Text:
    """Concatenate literal strings, SQL text and columns into one sentence."""
    if any(isinstance(p, Column) for p in parts):
        return F.concat(*(_part_column(p) for p in parts))
    return Sql(f"concat({', '.join(sql_text(p) for p in parts)})")


@overload
def case(*branches: tuple[str, str | Sql], otherwise: str | Sql) -> Sql: ...
@overload
def case(*branches: tuple[str, str | Text], otherwise: str | Text) -> Text: ...
def case(*branches: tuple[str, str | Text], otherwise: str | Text) -> Text:
    """CASE WHEN cond THEN part ... ELSE otherwise END: each cond is SQL text, each part as a
    sentence's (literal text, SQL text or a column)."""
    parts = [v for _, v in branches] + [otherwise]
    if any(isinstance(p, Column) for p in parts):
        chain = F.when(F.expr(branches[0][0]), _part_column(branches[0][1]))
        for cond, value in branches[1:]:
            chain = chain.when(F.expr(cond), _part_column(value))
        return chain.otherwise(_part_column(otherwise))
    whens = " ".join(f"when {c} then {sql_text(v)}" for c, v in branches)
    return Sql(f"case {whens} else {sql_text(otherwise)} end")


def no_anomalies(spark: SparkSession) -> DataFrame:
    """An empty frame of anomalies (a check that knows early it has nothing to report)."""
    return local_frame(spark, [], ANOMALY_SCHEMA)


def anomalies(df: DataFrame, cls: str, events: list[str], nodes: list[str], text: Sql) -> DataFrame:
    """`df` projected to the anomaly columns; null events and nodes are left out."""
    ev = ", ".join(f"cast({ref(e).text} as bigint)" for e in events)
    nd = ", ".join(f"cast({ref(n).text} as string)" for n in nodes)
    return df.selectExpr(
        RUN,
        f"{literal(cls).text} as class",
        f"array_distinct(filter(array({ev}), x -> x is not null)) as events",
        f"array_distinct(filter(array({nd}), x -> x is not null)) as nodes",
        f"{text.text} as explanation",
    )


def _operand(col: str | Sql) -> str:
    return col.text if isinstance(col, Sql) else ref(col).text


def sql_text(part: str | Text) -> str:
    if isinstance(part, Column):
        raise TypeError("a column has no SQL text")
    return part.text if isinstance(part, Sql) else literal(part).text


def _part_column(part: str | Text) -> Column:
    return F.lit(part) if isinstance(part, str) else as_column(part)
