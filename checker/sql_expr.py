"""Spark SQL expressions written as text.

An expression built from Column objects costs a py4j round trip for every function, cast,
literal and alias. The same expression as text crosses to the JVM once, in a `selectExpr` or
an `F.expr`, and the checks build thousands of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Sql:
    """A Spark SQL expression as text. It is not a str, so Spark never takes it for a
    literal."""

    text: str

    def column(self) -> Column:
        return F.expr(self.text)


def ref(name: str) -> Sql:
    """Column `name` (a dotted name reaches into a struct, as `F.col` reads it)."""
    return Sql(".".join(f"`{part}`" for part in name.split(".")))


def literal(text: str) -> Sql:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return Sql(f"'{escaped}'")
