"""The authoritative catalog (catalog.jsonl) held in the driver and as small broadcast frames.

The catalog is small (one line per DDL), so it is collected, indexed in Python, and joined to
the events as broadcast DataFrames: `cat(ts)` is a floor lookup by activation_ts done as a
bucketed range join (an equi-join on a coarse bucket plus the exact interval condition), and the
forward-compatibility matrix is precomputed per table with `schemasync.compat`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from schemasync.catalog import Table
from schemasync.compat import change_compatible, diff_tables, forward_compatible_json
from schemasync.types import TypeInvalid, parse_type

MAX_TS = (1 << 63) - 1
BUCKETS = 2048


@dataclass(frozen=True)
class Interval:
    """[lo, hi) with a payload; intervals of one lookup may overlap."""

    lo: int
    hi: int
    payload: tuple[Any, ...]


class IntervalLookup:
    """A broadcast range join of a big frame's numeric column against a few intervals."""

    def __init__(
        self,
        spark: SparkSession,
        intervals: Sequence[Interval],
        payload_schema: Sequence[tuple[str, T.DataType]],
        buckets: int = BUCKETS,
    ) -> None:
        finite = [b for i in intervals for b in (i.lo, i.hi) if b < MAX_TS]
        self.base = min(finite) if finite else 0
        span = (max(finite) - self.base) if finite else 0
        self.width = max(1, -(-span // buckets))
        self.nb = span // self.width + 1
        rows: list[tuple[Any, ...]] = []
        for i in intervals:
            if i.hi <= i.lo:
                continue
            b_lo = self._bucket_py(i.lo)
            b_hi = self._bucket_py(i.hi - 1)
            rows.extend((b, i.lo, i.hi, *i.payload) for b in range(b_lo, b_hi + 1))
        fields = [
            T.StructField("_b", T.LongType()),
            T.StructField("_lo", T.LongType()),
            T.StructField("_hi", T.LongType()),
            *(T.StructField(n, t) for n, t in payload_schema),
        ]
        self.frame = spark.createDataFrame(rows, T.StructType(fields))
        self.payload_names = [n for n, _ in payload_schema]

    def _bucket_py(self, x: int) -> int:
        return min(max((x - self.base) // self.width, 0), self.nb - 1)

    def bucket(self, name: str) -> Column:
        raw = F.expr(f"(`{name}` - {self.base}L) div {self.width}L")
        return F.least(F.greatest(raw, F.lit(0).cast("long")), F.lit(self.nb - 1).cast("long"))

    def join(self, df: DataFrame, x: str, how: str = "left") -> DataFrame:
        """`df` with the payload of every interval containing column `x` (null if none)."""
        n = next(_join_ids)
        x_, b_, lo_, hi_ = f"_x{n}", f"_b{n}", f"_lo{n}", f"_hi{n}"
        left = df.withColumn(x_, F.col(x)).withColumn(b_ + "l", self.bucket(x_))
        right = self.frame.select(
            F.col("_b").alias(b_),
            F.col("_lo").alias(lo_),
            F.col("_hi").alias(hi_),
            *(F.col(p).alias(p) for p in self.payload_names),
        )
        cond = (F.col(b_ + "l") == F.col(b_)) & (F.col(x_) >= F.col(lo_)) & (F.col(x_) < F.col(hi_))
        joined = left.join(F.broadcast(right), cond, how)
        return joined.drop(x_, b_ + "l", b_, lo_, hi_)


_join_ids = itertools.count()


@dataclass(frozen=True)
class TableAt:
    version: int
    name: str
    table: dict[str, Any]


class CatalogIndex:
    """catalog.jsonl in the driver plus the frames the checks join with."""

    def __init__(
        self,
        spark: SparkSession,
        lines: Sequence[dict[str, Any]],
        rename_compatible: bool,
        clock: str = "hlc",
    ) -> None:
        self.spark = spark
        # "hlc": every *_ts is comparable with activation_ts; "none": they are opaque, and a
        # clock-free check places an observation by the schema version it reported
        self.clock = clock
        self.lines = sorted(lines, key=lambda d: int(d["catalog_version"]))
        self.by_version = {int(d["catalog_version"]): d for d in self.lines}
        self.rename_compatible = rename_compatible
        self._floor = self._floor_lookup()
        self.versions = self._versions_frame()
        self.tables = self._tables_frame()
        self.columns = self._columns_frame()
        self.indexes = self._indexes_frame()
        self.incompatible_steps = self._incompatible_steps_frame()

    # -- floor lookup: cat(ts) --------------------------------------------------------------
    def _floor_lookup(self) -> IntervalLookup:
        # cat(ts) = the version with the greatest activation_ts <= ts (ties: the greatest
        # version), which is well defined even when activation order is broken.
        ordered = sorted(
            ((int(d["activation_ts"]), int(d["catalog_version"])) for d in self.lines),
        )
        intervals = []
        for i, (act, version) in enumerate(ordered):
            nxt = ordered[i + 1][0] if i + 1 < len(ordered) else MAX_TS
            intervals.append(Interval(act, nxt, (version, act)))
        return IntervalLookup(
            self.spark,
            intervals,
            [("_cat_version", T.LongType()), ("_cat_activation", T.LongType())],
        )

    def with_version(self, df: DataFrame, ts_col: str, out: str) -> DataFrame:
        """`df` plus `out` = cat(ts_col) and `out`_activation (null when ts is null)."""
        joined = self._floor.join(df, ts_col)
        return joined.withColumnRenamed("_cat_version", out).withColumnRenamed(
            "_cat_activation", out + "_activation"
        )

    def with_table(self, df: DataFrame, version_col: str, table_col: str, prefix: str) -> DataFrame:
        """`df` plus `prefix`_id, `prefix`_sv, `prefix`_since of the table in that version."""
        t = self.tables.select(
            F.col("catalog_version").alias("_tv"),
            F.col("table").alias("_tn"),
            F.col("table_id").alias(prefix + "_id"),
            F.col("schema_version").alias(prefix + "_sv"),
            F.col("since_ts").alias(prefix + "_since"),
        )
        cond = (F.col(version_col) == F.col("_tv")) & (F.col(table_col) == F.col("_tn"))
        return df.join(F.broadcast(t), cond, "left").drop("_tv", "_tn")

    @property
    def clock_free(self) -> bool:
        """Whether the run's timestamps are opaque (`"clock": "none"`)."""
        return self.clock == "none"

    def with_schema_version_of(
        self, df: DataFrame, ts_col: str, table_col: str, sv_col: str, out: str
    ) -> DataFrame:
        """`df` plus `out`, the catalog version an observation is judged in: cat(ts_col) with a
        clock, else one holding table `table_col` at the schema version `sv_col` it reported."""
        if self.clock_free:
            return self.with_reported_version(df, table_col, sv_col, out)
        return self.with_version(df, ts_col, out)

    def with_reported_version(
        self, df: DataFrame, table_col: str, sv_col: str, out: str
    ) -> DataFrame:
        """`df` plus `out` = a catalog version in which table `table_col` has schema version
        `sv_col`: the clock-free stand-in for cat(ts). Every DDL on a table bumps its schema
        version, so all such catalog versions hold the same table; if a dropped table's name
        came back with a version it had before, the newest incarnation is taken."""
        holders = self.tables.groupBy(
            F.col("table").alias("_rt"), F.col("schema_version").alias("_rsv")
        ).agg(F.max("catalog_version").alias(out))
        cond = (F.col(table_col) == F.col("_rt")) & (F.col(sv_col) == F.col("_rsv"))
        return df.join(F.broadcast(holders), cond, "left").drop("_rt", "_rsv")

    def with_enlisted_table(self, df: DataFrame, ts_col: str, prefix: str = "t") -> DataFrame:
        """`df` plus `cv` = cat(ts_col) and `prefix`_id/_sv/_since of the txn's table in it.

        A txn names a table by the name it enlisted it under (at `base_ts`); a later RENAME
        keeps the table (same id), so the table is found by its id at base_ts. Without a
        base_ts (or an unknown name there) the name is looked up in cat(ts_col)."""
        df = self.with_version(df, "base_ts", "_bv")
        b = self.tables.select(
            F.col("catalog_version").alias("_btv"),
            F.col("table").alias("_btn"),
            F.col("table_id").alias("_bid"),
        )
        df = df.join(
            F.broadcast(b),
            (F.col("_bv") == F.col("_btv")) & (F.col("table") == F.col("_btn")),
            "left",
        ).drop("_btv", "_btn", "_bv", "_bv_activation")
        df = self.with_table(self.with_version(df, ts_col, "cv"), "cv", "table", "_n")
        i = self.tables.select(
            F.col("catalog_version").alias("_itv"),
            F.col("table_id").alias("_iid"),
            F.col("schema_version").alias("_i_sv"),
            F.col("since_ts").alias("_i_since"),
        )
        df = df.join(
            F.broadcast(i),
            (F.col("cv") == F.col("_itv")) & (F.col("_bid") == F.col("_iid")),
            "left",
        )
        by_id = F.col("_bid").isNotNull()
        return df.select(
            "*",
            F.when(by_id, F.col("_iid")).otherwise(F.col("_n_id")).alias(prefix + "_id"),
            F.when(by_id, F.col("_i_sv")).otherwise(F.col("_n_sv")).alias(prefix + "_sv"),
            F.when(by_id, F.col("_i_since")).otherwise(F.col("_n_since")).alias(prefix + "_since"),
        ).drop("_bid", "_itv", "_iid", "_i_sv", "_i_since", "_n_id", "_n_sv", "_n_since")

    # -- frames ---------------------------------------------------------------------------------
    def _versions_frame(self) -> DataFrame:
        rows = [
            (
                int(d["catalog_version"]),
                int(d["activation_ts"]),
                int(d["safe_ts"]),
                int(d["delay_ms"]),
                str(d["ddl"]),
            )
            for d in self.lines
        ]
        schema = "catalog_version long, activation_ts long, safe_ts long, delay_ms long, ddl string"
        return self.spark.createDataFrame(rows, schema)

    def table_rows(self) -> list[TableAt]:
        return [
            TableAt(int(d["catalog_version"]), name, t)
            for d in self.lines
            for name, t in d["tables"].items()
        ]

    def _tables_frame(self) -> DataFrame:
        since: dict[tuple[int, int], int] = {}
        rows = []
        for ta in self.table_rows():
            key = (int(ta.table["id"]), int(ta.table["schema_version"]))
            act = int(self.by_version[ta.version]["activation_ts"])
            since.setdefault(key, act)
            rows.append(
                (
                    ta.version,
                    ta.name,
                    key[0],
                    key[1],
                    since[key],
                    [str(c["name"]) for c in ta.table["columns"]],
                )
            )
        schema = (
            "catalog_version long, table string, table_id long, schema_version long, "
            "since_ts long, col_names array<string>"
        )
        return self.spark.createDataFrame(rows, schema)

    def _columns_frame(self) -> DataFrame:
        rows = []
        for ta in self.table_rows():
            for c in ta.table["columns"]:
                try:
                    st = parse_type(str(c["type"]))
                    base, length, prec, scale = st.name, st.length, st.precision, st.scale
                except TypeInvalid:
                    base, length, prec, scale = str(c["type"]), None, None, None
                rows.append(
                    (
                        ta.version,
                        ta.name,
                        int(ta.table["id"]),
                        int(c["id"]),
                        str(c["name"]),
                        str(c["type"]),
                        base,
                        length,
                        prec,
                        scale,
                        bool(c["nullable"]),
                        c.get("default") is not None,
                        _as_row_text(c.get("default")),
                    )
                )
        schema = (
            "catalog_version long, table string, table_id long, col_id long, col_name string, "
            "col_type string, base string, length long, prec long, scale long, "
            "nullable boolean, has_default boolean, default_text string"
        )
        return self.spark.createDataFrame(rows, schema)

    def _indexes_frame(self) -> DataFrame:
        rows = [
            (ta.version, ta.name, str(i["name"]), [str(c) for c in i["columns"]], str(i["state"]))
            for ta in self.table_rows()
            for i in ta.table.get("indexes") or ()
        ]
        schema = (
            "catalog_version long, table string, index string, index_columns array<string>, "
            "state string"
        )
        return self.spark.createDataFrame(rows, schema)

    def incompatible_step_rows(self) -> list[tuple[int, int, str]]:
        """(table_id, version v, why) for every step v-1 -> v not forward compatible."""
        out = []
        for prev, cur in zip(self.lines, self.lines[1:], strict=False):
            new_by_id = {int(t["id"]): (n, t) for n, t in cur["tables"].items()}
            for name, old in prev["tables"].items():
                tid = int(old["id"])
                new = new_by_id.get(tid)
                new_name, new_table = (new[0], new[1]) if new else (None, None)
                ok = forward_compatible_json(
                    old, new_table, self.rename_compatible, (), old_name=name, new_name=new_name
                )
                if not ok:
                    why = self._why_incompatible(name, old, new_name, new_table)
                    out.append((tid, int(cur["catalog_version"]), why))
        return out

    def _why_incompatible(
        self, name: str, old: dict[str, Any], new_name: str | None, new: dict[str, Any] | None
    ) -> str:
        old_t = Table.from_json(old, name)
        new_t = None if new is None else Table.from_json(new, new_name)
        for change in diff_tables(old_t, new_t):
            if not change_compatible(change, self.rename_compatible):
                text = f"{change.kind} {change.subject}"
                plain = (str, int, float, bool)
                if isinstance(change.old, plain) or isinstance(change.new, plain):
                    text += f" ({change.old!r} -> {change.new!r})"
                return text
        return "drop_table " + name if new is None else "incompatible change"

    def _incompatible_steps_frame(self) -> DataFrame:
        return self.spark.createDataFrame(
            self.incompatible_step_rows(), "table_id long, step_version long, why string"
        )


def catalog_json(line: dict[str, Any]) -> str:
    return json.dumps(line, separators=(",", ":"), sort_keys=True)


def _as_row_text(value: Any) -> str | None:
    """A default as a row read as map<string,string> shows it (a string bare, JSON else)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)
