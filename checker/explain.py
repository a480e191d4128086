"""The shape of an anomaly row and Spark expressions that render its sentence.

Every check returns the same four columns (class, events, nodes, explanation) so the analyzer
can union them; timestamps are rendered as `physical_ms:logical`, as people read HLC values.

A sentence is built as SQL text (`Sql`) and crosses to the JVM once, as one expression: built
from Column objects it cost a py4j round trip per function, cast, literal and alias, a quarter
of the round trips of a whole analysis. A part that can only be a Column (a lambda over an
array) makes the sentence a Column again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.local_frames import local_frame

ANOMALY_SCHEMA = "class string, events array<bigint>, nodes array<string>, explanation string"


@dataclass(frozen=True)
class Sql:
    """A Spark SQL expression as text (a plain str among a sentence's parts is literal text)."""

    text: str

    def column(self) -> Column:
        return F.expr(self.text)


Text = Sql | Column


def ref(name: str) -> Sql:
    """Column `name` (a dotted name reaches into a struct, as `F.col` reads it)."""
    return Sql(".".join(f"`{part}`" for part in name.split(".")))


def literal(text: str) -> Sql:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return Sql(f"'{escaped}'")


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


def sentence(*parts: str | Text) -> Text:
    """Concatenate literal strings, SQL text and columns into one sentence."""
    if any(isinstance(p, Column) for p in parts):
        return F.concat(*(_part_column(p) for p in parts))
    return Sql(f"concat({', '.join(sql_text(p) for p in parts)})")


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


def anomalies(
    df: DataFrame, cls: str, events: list[str | Column], nodes: list[str | Column], text: Text
) -> DataFrame:
    """`df` projected to the anomaly columns; null events and nodes are left out."""
    if all(isinstance(c, str) for c in (*events, *nodes)) and isinstance(text, Sql):
        ev = ", ".join(f"cast({ref(str(e)).text} as bigint)" for e in events)
        nd = ", ".join(f"cast({ref(str(n)).text} as string)" for n in nodes)
        return df.selectExpr(
            f"{literal(cls).text} as class",
            f"array_distinct(filter(array({ev}), x -> x is not null)) as events",
            f"array_distinct(filter(array({nd}), x -> x is not null)) as nodes",
            f"{text.text} as explanation",
        )
    ev_cols = [F.col(e) if isinstance(e, str) else e for e in events]
    nd_cols = [F.col(n) if isinstance(n, str) else n for n in nodes]
    return df.select(
        F.lit(cls).alias("class"),
        F.array_distinct(
            F.filter(F.array(*(e.cast("bigint") for e in ev_cols)), lambda x: x.isNotNull())
        ).alias("events"),
        F.array_distinct(
            F.filter(F.array(*(n.cast("string") for n in nd_cols)), lambda x: x.isNotNull())
        ).alias("nodes"),
        as_column(text).alias("explanation"),
    )


def _operand(col: str | Sql) -> str:
    return col.text if isinstance(col, Sql) else ref(col).text


def sql_text(part: str | Text) -> str:
    if isinstance(part, Column):
        raise TypeError("a column has no SQL text")
    return part.text if isinstance(part, Sql) else literal(part).text


def _part_column(part: str | Text) -> Column:
    return F.lit(part) if isinstance(part, str) else as_column(part)
