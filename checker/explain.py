"""The shape of an anomaly row and Spark expressions that render its sentence.

Every check returns the same four columns (class, events, nodes, explanation) so the analyzer
can union them; timestamps are rendered as `physical_ms:logical`, as people read HLC values.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.local_frames import local_frame

ANOMALY_SCHEMA = "class string, events array<bigint>, nodes array<string>, explanation string"


def ts(col: str | Column) -> Column:
    """An HLC timestamp as `physical_ms:logical` ('none' when null)."""
    c = F.col(col) if isinstance(col, str) else col
    text = F.concat(
        F.shiftright(c, 16).cast("string"), F.lit(":"), c.bitwiseAND(F.lit(65535)).cast("string")
    )
    return F.coalesce(text, F.lit("none"))


def txt(col: str | Column) -> Column:
    """Any column as text, 'null' when null."""
    c = F.col(col) if isinstance(col, str) else col
    return F.coalesce(c.cast("string"), F.lit("null"))


def secs(col: str | Column) -> Column:
    """Controller time (ns since run start) as seconds with 3 decimals."""
    c = F.col(col) if isinstance(col, str) else col
    return F.format_number(c / F.lit(1e9), 3)


def sentence(*parts: str | Column) -> Column:
    """Concatenate literal strings and columns into one sentence."""
    return F.concat(*(F.lit(p) if isinstance(p, str) else p for p in parts))


def no_anomalies(spark: SparkSession) -> DataFrame:
    """An empty frame of anomalies (a check that knows early it has nothing to report)."""
    return local_frame(spark, [], ANOMALY_SCHEMA)


def anomalies(
    df: DataFrame, cls: str, events: list[str | Column], nodes: list[str | Column], text: Column
) -> DataFrame:
    """`df` projected to the anomaly columns; null events and nodes are left out."""
    ev = [F.col(e) if isinstance(e, str) else e for e in events]
    nd = [F.col(n) if isinstance(n, str) else n for n in nodes]
    return df.select(
        F.lit(cls).alias("class"),
        F.array_distinct(
            F.filter(F.array(*(e.cast("bigint") for e in ev)), lambda x: x.isNotNull())
        ).alias("events"),
        F.array_distinct(
            F.filter(F.array(*(n.cast("string") for n in nd)), lambda x: x.isNotNull())
        ).alias("nodes"),
        text.alias("explanation"),
    )
