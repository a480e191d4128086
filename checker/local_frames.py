"""Frames of rows the checker builds itself (the catalog index, an empty anomaly frame).

They cross to the JVM as one Arrow table. PySpark's row path would pickle them into an RDD that
a Python worker unpickles each time a plan reads the frame: on a small run that round trip was
a quarter of the analysis, and on a long catalog the row-by-row conversion cost more than the
rest of the index.
"""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema


def local_frame(spark: SparkSession, rows: list[Any], schema: str | T.StructType) -> DataFrame:
    """A frame of `rows` (tuples in `schema`'s field order) with exactly `schema`."""
    parsed = schema if isinstance(schema, T.StructType) else T._parse_datatype_string(schema)
    struct = cast(T.StructType, parsed)
    arrow = to_arrow_schema(struct)
    columns = zip(*rows, strict=True) if rows else ([] for _ in arrow)
    table = pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for f, c in zip(arrow, columns, strict=True)], schema=arrow
    )
    # the schema given, not inferred from the table: Spark Connect infers none from an empty one
    return spark.createDataFrame(table, schema=struct)
