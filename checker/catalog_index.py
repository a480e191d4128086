"""The authoritative catalog (catalog.jsonl) held in the driver and as small broadcast frames.

The catalog is small (one line per DDL), so it is collected, indexed in Python, and joined to
the events as broadcast DataFrames: `cat(ts)` is a floor lookup by activation_ts done as a
bucketed range join (an equi-join on a coarse bucket plus the exact interval condition), and the
forward-compatibility matrix is precomputed per table with the checker's own rules
(`checker.forward_compat`), never the system under test's. A batch of runs is judged in one
plan: each run's catalog is a RunCatalog, and the frames hold every run's rows tagged with its
id (`run`), which every lookup matches.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checker.forward_compat import first_incompatible
from checker.local_frames import local_frame
from checker.sql_expr import ref
from checker.sql_types import column_type

MAX_TS = (1 << 63) - 1
MIN_TS = -(1 << 63)
MAX_SPAN = 1 << 62
BUCKETS = 2048
MAX_LOOKUP_ROWS = 200_000
# the column that tells the runs of a batch apart in every frame (checker.frames)
RUN = "run"


@dataclass(frozen=True)
class Interval:
    """[lo, hi) with a payload, optionally for one key (a table name or id), of one run of a
    batch; intervals of one lookup may overlap."""

    lo: int
    hi: int
    payload: tuple[Any, ...]
    key: Any = None
    run: int = 0


@dataclass(frozen=True)
class _Grid:
    """One run's grid of buckets: [base, base + nb * width), edge buckets open-ended."""

    base: int
    width: int
    nb: int

    @staticmethod
    def fit(intervals: Sequence[Interval], buckets: int, max_rows: int) -> _Grid:
        # The grid spans the interior boundaries: the first interval often starts at 0 (the
        # first catalog version), and a grid from 0 to an HLC of today would put every row in
        # one bucket. Values outside the grid fall into its edge buckets, which hold the edge
        # intervals. Its span stays within 2^62, so that a value clamped into it minus its base
        # fits in 64 bits (timestamps may be any int64).
        points = sorted({b for i in intervals for b in (i.lo, i.hi) if b < MAX_TS})
        inner = points[1:] if len(points) > 2 else points
        base = inner[0] if inner else 0
        span = min(inner[-1] - base, MAX_SPAN) if inner else 0
        # An interval is copied into every bucket it spans: the grid is as fine as it can be
        # while the copies stay under max_rows (long-lived keys cost the most copies).
        top = base + span
        covered = sum(max(0, min(i.hi, top) - max(i.lo, base)) for i in intervals)
        if covered > 0:
            room = max(max_rows - len(intervals), 0)
            buckets = max(16, min(buckets, room * span // covered))
        width = max(1, -(-span // buckets))
        return _Grid(base, width, span // width + 1)

    def bucket(self, x: int) -> int:
        return min(max((x - self.base) // self.width, 0), self.nb - 1)

    def sql(self, x: str) -> str:
        # clamped into the grid before the subtraction, which could overflow outside it
        top = self.base + (self.nb - 1) * self.width
        inside = f"least(greatest({x}, {self.base}L), {top}L)"
        return f"({inside} - {self.base}L) div {self.width}L"


class IntervalLookup:
    """A broadcast range join of a big frame's numeric column against intervals (as many as
    the catalog's versions), each optionally restricted to rows whose key column equals its key,
    and always to rows of its own run (the frame's `run` column).

    Each interval is copied into the buckets of a fixed grid it overlaps, so a row meets only
    the intervals of its own bucket (an equi-join) and then the exact bounds are checked. Each
    run has a grid of its own: the runs of a batch have unrelated timestamps."""

    def __init__(
        self,
        spark: SparkSession,
        intervals: Sequence[Interval],
        payload_schema: Sequence[tuple[str, T.DataType]],
        buckets: int = BUCKETS,
        key_type: T.DataType | None = None,
    ) -> None:
        self.keyed = key_type is not None
        # Bounds computed beyond 64 bits (a window around the largest ts) end at its edges; an
        # interval wholly outside holds no int64 and is dropped.
        by_run: dict[int, list[Interval]] = {}
        for i in intervals:
            c = replace(i, lo=_int64(i.lo), hi=_int64(i.hi))
            if c.hi > c.lo:
                by_run.setdefault(c.run, []).append(c)
        # the copies of a batch share one budget: the frame is broadcast whole
        max_rows = MAX_LOOKUP_ROWS // max(len(by_run), 1)
        self.grids = {r: _Grid.fit(ivs, buckets, max_rows) for r, ivs in sorted(by_run.items())}
        rows: list[tuple[Any, ...]] = []
        for r, ivs in by_run.items():
            g = self.grids[r]
            for i in ivs:
                rows.extend(
                    (r, i.key, b, i.lo, i.hi, *i.payload)
                    for b in range(g.bucket(i.lo), g.bucket(i.hi - 1) + 1)
                )
        fields = [
            T.StructField("_r", T.LongType()),
            T.StructField("_k", key_type or T.NullType()),
            T.StructField("_b", T.LongType()),
            T.StructField("_lo", T.LongType()),
            T.StructField("_hi", T.LongType()),
            *(T.StructField(n, t) for n, t in payload_schema),
        ]
        self.frame = local_frame(spark, rows, T.StructType(fields))
        self.payload_names = [n for n, _ in payload_schema]

    def _bucket_sql(self, name: str) -> str:
        x = ref(name).text
        if len(self.grids) <= 1:  # the run is matched by the join; one grid needs no CASE
            return next(iter(self.grids.values())).sql(x) if self.grids else "0L"
        whens = " ".join(f"when {r}L then {g.sql(x)}" for r, g in self.grids.items())
        return f"case {ref(RUN).text} {whens} end"

    def join(
        self, df: DataFrame, x: str, how: str = "left", key: str | Column | None = None
    ) -> DataFrame:
        """`df` with the payload of every interval of its row's run containing column `x`
        (and, for a keyed lookup, whose key equals `key`); null payload if none."""
        # SQL text, not Column objects: each function, alias and comparison built in Python
        # is a py4j round trip, and the checks make dozens of these joins
        n = next(_join_ids)
        x_, b_, lo_, hi_, k_, r_ = f"_x{n}", f"_b{n}", f"_lo{n}", f"_hi{n}", f"_k{n}", f"_r{n}"
        left = df.selectExpr("*", f"{ref(x).text} as {x_}", f"{self._bucket_sql(x)} as {b_}l")
        right_cols = [
            f"_r as {r_}",
            f"_b as {b_}",
            f"_lo as {lo_}",
            f"_hi as {hi_}",
            *self.payload_names,
        ]
        # the last interval ends at MAX_TS and holds it: a ts of 2^63 - 1 is legal (an int64)
        cond = (
            f"{ref(RUN).text} = {r_} and {b_}l = {b_} and {x_} >= {lo_} "
            f"and ({x_} < {hi_} or {hi_} = {MAX_TS}L)"
        )
        if self.keyed:
            if key is None:
                raise ValueError("a keyed lookup needs its key column")
            if isinstance(key, str):
                left = left.selectExpr("*", f"{ref(key).text} as {k_}l")
            else:
                left = left.withColumn(k_ + "l", key)
            right_cols.append(f"_k as {k_}")
            cond = f"{k_}l = {k_} and {cond}"
        right = self.frame.selectExpr(*right_cols)
        joined = left.join(F.broadcast(right), F.expr(cond), how)
        return joined.drop(x_, b_ + "l", b_, lo_, hi_, k_, k_ + "l", r_)


def _int64(x: int) -> int:
    return min(max(x, MIN_TS), MAX_TS)


_join_ids = itertools.count()


@dataclass(frozen=True)
class TableAt:
    version: int
    name: str
    table: dict[str, Any]


class RunCatalog:
    """One run's catalog.jsonl in the driver: its versions indexed, and the rows and intervals
    of the frames and lookups CatalogIndex builds (each tagged with the run)."""

    def __init__(
        self,
        lines: Sequence[dict[str, Any]],
        rename_compatible: bool,
        clock: str = "hlc",
        run: int = 0,
    ) -> None:
        self.run = run
        # Problems of the catalog that leave part of it unjudged, not anomalies: the caller
        # folds them into results.json "errors".
        self.errors: list[str] = []
        # catalog.jsonl line of each version, as given (in file order), for those messages
        self.line_of = {int(d["catalog_version"]): n for n, d in enumerate(lines, 1)}
        # "hlc": every *_ts is comparable with activation_ts; "none": they are opaque, and a
        # clock-free check places an observation by the schema version it reported
        self.clock = clock
        self.lines = sorted(lines, key=lambda d: int(d["catalog_version"]))
        self.by_version = {int(d["catalog_version"]): d for d in self.lines}
        self.rename_compatible = rename_compatible
        self.steps = self.incompatible_step_rows()

    # -- floor lookup: cat(ts) --------------------------------------------------------------
    def floor_intervals(self) -> list[Interval]:
        # cat(ts) = the version with the greatest activation_ts <= ts (ties: the greatest
        # version), which is well defined even when activation order is broken.
        ordered = sorted(
            ((int(d["activation_ts"]), int(d["catalog_version"])) for d in self.lines),
        )
        intervals = []
        for i, (act, version) in enumerate(ordered):
            nxt = ordered[i + 1][0] if i + 1 < len(ordered) else MAX_TS
            intervals.append(Interval(act, nxt, (version, act), run=self.run))
        return intervals

    def timeline_intervals(self) -> tuple[list[Interval], list[Interval]]:
        """The table each name denotes, and the version each table id has, over the spans of
        timestamps in which cat(ts) is one catalog version (spans with the same answer merged)."""
        ordered = sorted(
            self.lines, key=lambda d: (int(d["activation_ts"]), int(d["catalog_version"]))
        )
        since: dict[tuple[int, int], int] = {}
        for d in self.lines:
            for t in d["tables"].values():
                since.setdefault((int(t["id"]), int(t["schema_version"])), int(d["activation_ts"]))
        # The number of a table's incompatible steps up to a version never falls as versions
        # grow, so a txn crossed one between cat(base_ts) and cat(commit_ts) exactly when that
        # number is greater at commit: two lookups instead of a range join.
        steps: dict[int, list[int]] = {}
        for tid, version, _ in sorted(self.steps):
            steps.setdefault(tid, []).append(version)
        by_name: dict[str, list[list[Any]]] = {}
        by_id: dict[int, list[list[Any]]] = {}

        def extend(spans: list[list[Any]], lo: int, hi: int, payload: tuple[Any, ...]) -> None:
            if spans and spans[-1][1] == lo and spans[-1][2] == payload:
                spans[-1][1] = hi
            else:
                spans.append([lo, hi, payload])

        for i, d in enumerate(ordered):
            lo = int(d["activation_ts"])
            hi = int(ordered[i + 1]["activation_ts"]) if i + 1 < len(ordered) else MAX_TS
            if hi <= lo:
                continue  # a tie: the greatest version of the same activation_ts answers
            for name, t in d["tables"].items():
                tid, sv = int(t["id"]), int(t["schema_version"])
                inc = bisect.bisect_right(steps.get(tid, []), int(d["catalog_version"]))
                payload = (sv, since[(tid, sv)], inc)
                extend(by_name.setdefault(name, []), lo, hi, (tid, *payload))
                extend(by_id.setdefault(tid, []), lo, hi, payload)
        names = [
            Interval(lo, hi, p, name, self.run)
            for name, spans in by_name.items()
            for lo, hi, p in spans
        ]
        ids = [
            Interval(lo, hi, p, tid, self.run)
            for tid, spans in by_id.items()
            for lo, hi, p in spans
        ]
        return names, ids

    # -- rows of the frames ---------------------------------------------------------------------
    def version_rows(self) -> list[tuple[Any, ...]]:
        return [
            (
                self.run,
                int(d["catalog_version"]),
                int(d["activation_ts"]),
                int(d["safe_ts"]),
                int(d["delay_ms"]),
                str(d["ddl"]),
            )
            for d in self.lines
        ]

    def table_rows(self) -> list[TableAt]:
        return [
            TableAt(int(d["catalog_version"]), name, t)
            for d in self.lines
            for name, t in d["tables"].items()
        ]

    def tables_rows(self) -> list[tuple[Any, ...]]:
        since: dict[tuple[int, int], int] = {}
        rows = []
        for ta in self.table_rows():
            key = (int(ta.table["id"]), int(ta.table["schema_version"]))
            act = int(self.by_version[ta.version]["activation_ts"])
            since.setdefault(key, act)
            rows.append(
                (
                    self.run,
                    ta.version,
                    ta.name,
                    key[0],
                    key[1],
                    since[key],
                    [str(c["name"]) for c in ta.table["columns"]],
                )
            )
        return rows

    def schemas_rows(self) -> list[tuple[Any, ...]]:
        """One row per (table id, schema version): its columns by name (-> column id), by id
        (-> name), and by id the first later version that would fill a NULL stored in it, for
        matching columns across renames without a join per cell.

        A read upgrades a stored row to its schema one schema version at a time, so a stored
        NULL meets every later version in turn (docs/anomalies.md, lost-write): the first
        later version where its column is NOT NULL with a default replaces it with that default,
        which it keeps through later default or nullability changes. So a NULL written at this
        version reads, at version f, as `fills[id].text` if `fills[id].at <= f`. Each entry names
        one version, so the frame grows with versions times columns, not with their square."""
        by_table: dict[int, list[tuple[int, list[dict[str, Any]]]]] = {}
        seen: set[tuple[int, int]] = set()
        for ta in self.table_rows():
            tid, sv = int(ta.table["id"]), int(ta.table["schema_version"])
            if (tid, sv) not in seen:
                seen.add((tid, sv))
                by_table.setdefault(tid, []).append((sv, list(ta.table["columns"])))
        rows = []
        for tid, versions in by_table.items():
            # walk back from the newest version, so each column's next fill is at hand
            upcoming: dict[int, tuple[int, str]] = {}
            for sv, cols in sorted(versions, reverse=True):
                fills = {
                    int(c["id"]): upcoming[int(c["id"])] for c in cols if int(c["id"]) in upcoming
                }
                rows.append(
                    (
                        self.run,
                        tid,
                        sv,
                        {str(c["name"]): int(c["id"]) for c in cols},
                        {int(c["id"]): str(c["name"]) for c in cols},
                        fills,
                    )
                )
                for c in cols:
                    text = _as_row_text(c.get("default"))
                    if not bool(c["nullable"]) and text is not None:
                        upcoming[int(c["id"])] = (sv, text)
        return rows

    def columns_rows(self) -> list[tuple[Any, ...]]:
        """One row per column of each (table id, schema version): a schema is the same in
        every catalog version that holds it, so it is listed once. A column of a type the
        checker does not know is named in `errors`."""
        rows = []
        seen: set[tuple[int, int]] = set()
        unknown: set[tuple[int, int, str]] = set()
        for ta in self.table_rows():
            key = (int(ta.table["id"]), int(ta.table["schema_version"]))
            if key in seen:
                continue
            seen.add(key)
            for c in ta.table["columns"]:
                st = column_type(str(c["type"]))
                base, length, prec, scale = None, None, None, None
                if st is not None:
                    base, length, prec, scale = st.base, st.length, st.precision, st.scale
                elif (key[0], int(c["id"]), str(c["type"])) not in unknown:
                    # base null: conformance judges its nulls but not its values
                    unknown.add((key[0], int(c["id"]), str(c["type"])))
                    self.errors.append(
                        f"catalog.jsonl line {self.line_of[ta.version]}: table {ta.name} column "
                        f"{c['name']} has type {str(c['type'])!r}, which the checker does not "
                        "know; its values are not judged"
                    )
                rows.append(
                    (
                        self.run,
                        *key,
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
        return rows

    def indexes_rows(self) -> list[tuple[Any, ...]]:
        return [
            (
                self.run,
                ta.version,
                ta.name,
                str(i["name"]),
                [str(c) for c in i["columns"]],
                str(i["state"]),
            )
            for ta in self.table_rows()
            for i in ta.table.get("indexes") or ()
        ]

    def incompatible_step_rows(self) -> list[tuple[int, int, str]]:
        """(table_id, version v, why) for every step v-1 -> v not forward compatible."""
        out = []
        for prev, cur in zip(self.lines, self.lines[1:], strict=False):
            new_by_id = {int(t["id"]): (n, t) for n, t in cur["tables"].items()}
            for name, old in prev["tables"].items():
                tid = int(old["id"])
                new = new_by_id.get(tid)
                new_name, new_table = (new[0], new[1]) if new else (None, None)
                if new_name == name and new_table == old:
                    continue  # untouched by this step (most tables, most steps)
                bad = first_incompatible(old, new_table, name, new_name, self.rename_compatible)
                if bad is not None:
                    out.append((tid, int(cur["catalog_version"]), bad.describe()))
        return out

    def incompatible_steps_rows(self) -> list[tuple[Any, ...]]:
        """One row per table id: its incompatible steps, ascending by version."""
        steps: dict[int, list[tuple[int, str]]] = {}
        for tid, version, why in self.steps:
            steps.setdefault(tid, []).append((version, why))
        return [(self.run, tid, sorted(s)) for tid, s in steps.items()]


class CatalogIndex:
    """The catalogs of a batch's runs (one RunCatalog each) as the frames the checks join with;
    every frame has the run's id in `run`, and every lookup matches it."""

    def __init__(
        self,
        spark: SparkSession,
        lines: Sequence[dict[str, Any]],
        rename_compatible: bool,
        clock: str = "hlc",
    ) -> None:
        """The catalog of one run (run 0)."""
        self._build(spark, [RunCatalog(lines, rename_compatible, clock)])

    @classmethod
    def of_runs(cls, spark: SparkSession, runs: Sequence[RunCatalog]) -> CatalogIndex:
        """The catalogs of a batch; its runs share one clock (the clock-free checks take other
        shapes, so such runs are judged in a batch of their own)."""
        if len({r.clock for r in runs}) > 1:
            raise ValueError("the runs of one batch must share their clock")
        cat = cls.__new__(cls)
        cat._build(spark, runs)
        return cat

    def _build(self, spark: SparkSession, runs: Sequence[RunCatalog]) -> None:
        self.spark = spark
        self.runs = {r.run: r for r in runs}
        self.clock = runs[0].clock if runs else "hlc"
        L = T.LongType()
        self._floor = IntervalLookup(
            spark,
            [i for r in runs for i in r.floor_intervals()],
            [("_cat_version", L), ("_cat_activation", L)],
        )
        names, ids = [], []
        for r in runs:
            n, i = r.timeline_intervals()
            names.extend(n)
            ids.extend(i)
        self._by_name = IntervalLookup(
            spark,
            names,
            [("_tl_id", L), ("_tl_sv", L), ("_tl_since", L), ("_tl_inc", L)],
            key_type=T.StringType(),
        )
        self._by_id = IntervalLookup(
            spark, ids, [("_il_sv", L), ("_il_since", L), ("_il_inc", L)], key_type=L
        )

        def frame(rows_of: Callable[[RunCatalog], list[tuple[Any, ...]]], schema: str) -> DataFrame:
            return local_frame(
                spark, [row for r in runs for row in rows_of(r)], "run long, " + schema
            )

        self.versions = frame(
            RunCatalog.version_rows,
            "catalog_version long, activation_ts long, safe_ts long, delay_ms long, ddl string",
        )
        self.tables = frame(
            RunCatalog.tables_rows,
            "catalog_version long, table string, table_id long, schema_version long, "
            "since_ts long, col_names array<string>",
        )
        self.columns = frame(
            RunCatalog.columns_rows,
            "table_id long, schema_version long, col_id long, col_name string, "
            "col_type string, base string, length long, prec long, scale long, "
            "nullable boolean, has_default boolean, default_text string",
        )
        self.schemas = frame(
            RunCatalog.schemas_rows,
            "table_id long, schema_version long, col_ids map<string, long>, "
            "col_names map<long, string>, fills map<long, struct<at: long, text: string>>",
        )
        self.indexes = frame(
            RunCatalog.indexes_rows,
            "catalog_version long, table string, index string, index_columns array<string>, "
            "state string",
        )
        self.incompatible_steps = frame(
            RunCatalog.incompatible_steps_rows,
            "table_id long, steps array<struct<step_version: long, why: string>>",
        )

    def only(self) -> RunCatalog:
        """The catalog of a one-run index."""
        if len(self.runs) != 1:
            raise ValueError(f"a batch of {len(self.runs)} runs has no one catalog")
        return next(iter(self.runs.values()))

    @property
    def lines(self) -> list[dict[str, Any]]:
        """A one-run index's catalog lines, ascending by version."""
        return self.only().lines

    @property
    def errors(self) -> list[str]:
        """A one-run index's catalog problems (see RunCatalog.errors)."""
        return self.only().errors

    def with_table_at(self, df: DataFrame, ts_col: str, name_col: str, prefix: str) -> DataFrame:
        """`df` plus `prefix`_id, `prefix`_sv, `prefix`_since and `prefix`_inc (incompatible
        steps of the table so far) of the table named `name_col` in cat(ts_col) (nulls when no
        table has that name then)."""
        joined = self._by_name.join(df, ts_col, key=name_col)
        return (
            joined.withColumnRenamed("_tl_id", prefix + "_id")
            .withColumnRenamed("_tl_sv", prefix + "_sv")
            .withColumnRenamed("_tl_since", prefix + "_since")
            .withColumnRenamed("_tl_inc", prefix + "_inc")
        )

    def with_table_id_at(self, df: DataFrame, ts_col: str, id_col: str, prefix: str) -> DataFrame:
        """`df` plus `prefix`_sv, `prefix`_since and `prefix`_inc of table id `id_col` in
        cat(ts_col) (nulls when that table does not exist then)."""
        joined = self._by_id.join(df, ts_col, key=id_col)
        return (
            joined.withColumnRenamed("_il_sv", prefix + "_sv")
            .withColumnRenamed("_il_since", prefix + "_since")
            .withColumnRenamed("_il_inc", prefix + "_inc")
        )

    def with_version(self, df: DataFrame, ts_col: str, out: str) -> DataFrame:
        """`df` plus `out` = cat(ts_col) and `out`_activation (null when ts is null)."""
        joined = self._floor.join(df, ts_col)
        return joined.withColumnRenamed("_cat_version", out).withColumnRenamed(
            "_cat_activation", out + "_activation"
        )

    def with_table(self, df: DataFrame, version_col: str, table_col: str, prefix: str) -> DataFrame:
        """`df` plus `prefix`_id, `prefix`_sv, `prefix`_since of the table in that version."""
        t = self.tables.selectExpr(
            "run as _tr",
            "catalog_version as _tv",
            "`table` as _tn",
            f"table_id as {prefix}_id",
            f"schema_version as {prefix}_sv",
            f"since_ts as {prefix}_since",
        )
        cond = (
            f"{ref(RUN).text} = _tr and {ref(version_col).text} = _tv "
            f"and {ref(table_col).text} = _tn"
        )
        return df.join(F.broadcast(t), F.expr(cond), "left").drop("_tr", "_tv", "_tn")

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
            F.col(RUN).alias("_rr"),
            F.col("table").alias("_rt"),
            F.col("schema_version").alias("_rsv"),
        ).agg(F.max("catalog_version").alias(out))
        cond = (
            (F.col(RUN) == F.col("_rr"))
            & (F.col(table_col) == F.col("_rt"))
            & (F.col(sv_col) == F.col("_rsv"))
        )
        return df.join(F.broadcast(holders), cond, "left").drop("_rr", "_rt", "_rsv")

    def with_enlisted_table(self, df: DataFrame, ts_col: str, prefix: str = "t") -> DataFrame:
        """`df` plus `prefix`_id/_sv/_since of the txn's table in cat(ts_col).

        A txn names a table by the name it enlisted it under (at `base_ts`); a later RENAME
        keeps the table (same id), so the table is found by its id at base_ts. Without a
        base_ts (or an unknown name there) the name is looked up in cat(ts_col)."""
        df = self._by_name.join(df, "base_ts", key="table")
        df = df.withColumnRenamed("_tl_id", "_bid").drop("_tl_sv", "_tl_since", "_tl_inc")
        df = self.with_table_at(df, ts_col, "table", "_n")
        df = self._by_id.join(df, ts_col, key="_bid")
        return df.selectExpr(
            "*",
            "case when _bid is not null then case when _il_sv is not null then _bid end "
            f"else _n_id end as {prefix}_id",
            f"case when _bid is not null then _il_sv else _n_sv end as {prefix}_sv",
            f"case when _bid is not null then _il_since else _n_since end as {prefix}_since",
        ).drop("_bid", "_il_sv", "_il_since", "_il_inc", "_n_id", "_n_sv", "_n_since", "_n_inc")


def catalog_json(line: dict[str, Any]) -> str:
    return json.dumps(line, separators=(",", ":"), sort_keys=True)


def _as_row_text(value: Any) -> str | None:
    """A default as a row read as map<string,string> shows it (a string bare, JSON else)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)
