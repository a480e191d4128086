"""ddl-outcome: a DDL whose own result no catalog state it could have run against explains
(anomalies.md). The states are catalog versions, from the newest one whose DDL was acknowledged
before the DDL's invoke (else the setup's: the newest one older than every acknowledged version)
up to the newest one that existed at its completion (none whose DDL was invoked after it).

A success is an anomaly when none of those states allows the statement; a `fail` when every one
of them rules its error out: TABLE_NOT_FOUND where the table exists in each, DDL_INVALID where
the statement is valid against each. Only conditions the catalog decides are judged: a type,
a NOT NULL over existing rows or a data change can make a statement invalid whatever the
catalog says, so such statements are never called valid. `info` completions and errors that
name no schema cause are never judged. DDLs are few: they are judged in the driver.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checker.catalog_index import RUN, CatalogIndex
from checker.ddl_statement import DdlStatement, read_statement, same_name
from checker.frames import RunFrames, ddl_statement

TABLE_NOT_FOUND = "TABLE_NOT_FOUND"
DDL_INVALID = "DDL_INVALID"
Tables = Mapping[str, Any]
Verdict = tuple[bool, str]  # (holds, why it does not)


@dataclass(frozen=True)
class DdlCompletion:
    """One judged DDL: its completion's index, its invoke's, and what the history says of it."""

    index: int
    invoke_index: int
    type: str  # ok or fail
    time: int
    invoke_time: int
    node: str | None
    stmt: str
    table: str
    kind: str
    error_code: str | None
    catalog_version: int | None


@dataclass(frozen=True)
class State:
    """A catalog version (None: the empty catalog before the first version) and its tables."""

    version: int | None
    tables: Tables


# -- the states a DDL could have run against ------------------------------------------------


class Window:
    """One run's DDLs and catalog, indexed once, so each DDL's window is a few bisections
    (a soak's thousands of DDLs and versions stay linear-logarithmic).

    `ddls` are every completed DDL of the run, `info` ones included: a version no ack names
    is placed by the first invoke of its statement by a DDL that may have taken effect."""

    def __init__(self, ddls: Sequence[DdlCompletion], catalog: Sequence[Mapping[str, Any]]):
        self.lines = sorted(catalog, key=lambda d: int(d["catalog_version"]))
        self.versions = [int(d["catalog_version"]) for d in self.lines]
        acks = sorted(
            (d.time, d.catalog_version, d.invoke_time)
            for d in ddls
            if d.type == "ok" and d.catalog_version is not None
        )
        self.ack_times = [t for t, _, _ in acks]
        self.newest_acked = list(itertools.accumulate((v for _, v, _ in acks), max))
        acked = {v for _, v, _ in acks}
        first_invoke: dict[str, int] = {}
        for d in ddls:
            if d.type == "fail":  # it certainly did not take effect: it made no version
                continue
            key = d.stmt.strip()
            first_invoke[key] = min(first_invoke.get(key, d.invoke_time), d.invoke_time)
        # when each version's DDL was invoked, where the history says: by its ack, else by
        # the first invoke of its statement (a version made by the setup has none)
        first_ack_invoke: dict[int, int] = {}
        for _, v, t in acks:  # a version acknowledged twice was made by its first DDL
            first_ack_invoke[v] = min(first_ack_invoke.get(v, t), t)
        made: list[tuple[int, int]] = [(t, v) for v, t in first_ack_invoke.items()]
        made += [
            (first_invoke[key], v)
            for v, line in zip(self.versions, self.lines, strict=True)
            if v not in acked and (key := str(line.get("ddl") or "").strip()) in first_invoke
        ]
        made.sort()
        self.made_times = [t for t, _ in made]
        self.oldest_made_after = list(
            reversed(list(itertools.accumulate((v for _, v in reversed(made)), min)))
        )
        self.setup = self._setup_version(acked, {v for _, v in made})

    def _setup_version(self, acked: set[int], by_history: set[int]) -> int | None:
        """The setup's version: the newest older than every acknowledged one that no DDL of
        the history made (an `info` DDL's version is placed by its invoke, not taken for the
        setup's; None: the empty catalog)."""
        oldest_ack = min(acked) if acked else None
        older = [
            v
            for v in self.versions
            if (oldest_ack is None or v < oldest_ack) and v not in by_history
        ]
        return max(older) if older else None

    def states(self, ddl: DdlCompletion) -> list[State]:
        """The catalog states of anomalies.md's window for `ddl`, oldest first."""
        if not self.versions:
            return []
        acked_before = bisect.bisect_left(self.ack_times, ddl.invoke_time)
        low = self.newest_acked[acked_before - 1] if acked_before else self.setup
        invoked_after = bisect.bisect_right(self.made_times, ddl.time)
        later = self.oldest_made_after[invoked_after : invoked_after + 1]
        high = later[0] - 1 if later else self.versions[-1]
        first = 0 if low is None else bisect.bisect_left(self.versions, low)
        last = bisect.bisect_right(self.versions, high)
        states = [
            State(v, line.get("tables") or {})
            for v, line in zip(self.versions[first:last], self.lines[first:last], strict=True)
        ]
        if low is None:  # no version precedes the history's first: the setup's catalog was empty
            states.insert(0, State(None, {}))
        return states


def candidate_states(
    ddl: DdlCompletion, ddls: Sequence[DdlCompletion], catalog: Sequence[Mapping[str, Any]]
) -> list[State]:
    """The window of `ddl` among `ddls` (a run's, every outcome) over `catalog`."""
    return Window(ddls, catalog).states(ddl)


# -- what one state says of a statement ------------------------------------------------------


def _table(tables: Tables, name: str) -> Mapping[str, Any] | None:
    t = tables.get(name)
    return t if isinstance(t, Mapping) else None


def _has_column(table: Mapping[str, Any], name: str) -> bool:
    return any(same_name(name, str(c.get("name"))) for c in table.get("columns") or [])


def _has_index(table: Mapping[str, Any], name: str) -> bool:
    return any(same_name(name, str(i.get("name"))) for i in table.get("indexes") or [])


def _has_table(tables: Tables, name: str) -> bool:
    return any(same_name(name, str(t)) for t in tables)


def allows(s: DdlStatement, table: str, tables: Tables) -> Verdict:
    """Whether the state may let the statement succeed (True where the catalog cannot tell)."""
    t = _table(tables, table)
    if s.kind == "create_table":
        return (s.guarded or t is None), f"table {table} exists"
    if s.kind == "drop_table" and s.guarded:
        return True, ""
    if s.kind == "drop_index" and s.guarded:
        return True, ""
    if t is None:
        return False, f"table {table} does not exist"
    if s.kind == "rename_table" and s.new_name and _has_table(tables, s.new_name):
        return False, f"table {s.new_name} exists"
    if s.kind in ("create_index", "drop_index") and s.index and not s.guarded:
        exists = _has_index(t, s.index)
        if exists == (s.kind == "create_index"):
            return False, f"index {s.index} {'exists' if exists else 'does not exist'} on {table}"
    if s.kind == "create_index" and s.index_columns:
        missing = [c for c in s.index_columns if not _has_column(t, c)]
        if missing:
            return False, f"column {missing[0]} does not exist in {table}"
    if s.column is None or s.guarded or s.kind in ("create_index", "drop_index"):
        return True, ""
    exists = _has_column(t, s.column)
    if s.kind == "add_column" and exists:
        return False, f"column {s.column} exists in {table}"
    if s.kind != "add_column" and not exists:
        return False, f"column {s.column} does not exist in {table}"
    if s.kind == "rename_column" and s.new_name and _has_column(t, s.new_name):
        return False, f"column {s.new_name} exists in {table}"
    return True, ""


def valid_in(s: DdlStatement, table: str, tables: Tables) -> bool:
    """Whether no cause but the catalog's could refuse the statement, and the state allows it:
    only then does the state rule DDL_INVALID out."""
    if s.kind == "drop_table" or (s.kind == "drop_index" and s.guarded):
        return allows(s, table, tables)[0]
    t = _table(tables, table)
    if t is None or not allows(s, table, tables)[0]:
        return False
    if s.kind == "rename_table":
        return s.new_name is not None
    if s.kind == "rename_column":
        return s.column is not None and s.new_name is not None
    if s.kind == "add_column":
        return s.column is not None and s.plain_column
    if s.kind == "drop_column":
        indexed = any(
            same_name(s.column or "", str(c))
            for i in t.get("indexes") or []
            for c in i.get("columns") or []
        )
        return s.column is not None and not indexed and len(t.get("columns") or []) > 1
    if s.kind == "create_index":
        elsewhere = any(_has_index(o, s.index or "") for o in tables.values())
        return bool(s.index and s.index_columns) and not s.guarded and not elsewhere
    if s.kind == "drop_index":
        return s.index is not None
    return False  # create_table, type and constraint changes: a cause beyond the catalog


# -- one DDL judged --------------------------------------------------------------------------


def judge(
    ddl: DdlCompletion,
    ddls: Sequence[DdlCompletion],
    catalog: Sequence[Mapping[str, Any]],
    window: Window | None = None,
) -> str | None:
    """The anomaly's sentence for `ddl`, or None when some state explains its result (an
    `info` DDL never is judged). `window`: the run's, when judging many of its DDLs."""
    if ddl.type not in ("ok", "fail"):
        return None
    statement = read_statement(ddl.kind, ddl.stmt)
    if statement is None or not ddl.table:
        return None
    if ddl.type == "fail" and ddl.error_code not in (TABLE_NOT_FOUND, DDL_INVALID):
        return None
    states = (window or Window(ddls, catalog)).states(ddl)
    if not states:
        return None
    span = _span(states)
    head = f"DDL '{ddl.stmt}' {'succeeded' if ddl.type == 'ok' else 'failed'}"
    head += f" on {ddl.node}" if ddl.node else ""
    if ddl.type == "ok":
        verdicts = [allows(statement, ddl.table, s.tables) for s in states]
        if any(ok for ok, _ in verdicts):
            return None
        return (
            f"{head}, but no catalog state it could have run against ({span}) allows it:"
            f" {verdicts[-1][1]}"
        )
    if ddl.error_code == TABLE_NOT_FOUND:
        if all(_table(s.tables, ddl.table) is not None for s in states):
            return (
                f"{head} with {TABLE_NOT_FOUND}, but table {ddl.table} exists in every catalog"
                f" state it could have run against ({span})"
            )
        return None
    if all(valid_in(statement, ddl.table, s.tables) for s in states):
        return (
            f"{head} with {DDL_INVALID}, but the statement is valid against every catalog state"
            f" it could have run against ({span})"
        )
    return None


def _span(states: Sequence[State]) -> str:
    names = ["the empty catalog" if s.version is None else str(s.version) for s in states]
    if len(names) == 1:
        return f"version {names[0]}"
    return f"versions {names[0]} to {names[-1]}"


# -- the check over a batch ------------------------------------------------------------------

_ANOMALY = T.StructType(
    [
        T.StructField(RUN, T.LongType()),
        T.StructField("class", T.StringType()),
        T.StructField("events", T.ArrayType(T.LongType())),
        T.StructField("nodes", T.ArrayType(T.StringType())),
        T.StructField("explanation", T.StringType()),
    ]
)


def ddl_outcome(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Every DDL of the batch whose success or schema error no candidate state explains."""
    rows = (
        frames.completions.where(
            (F.col("f") == "ddl")
            & F.col("type").isin("ok", "fail", "info")
            & F.col("invoke_index").isNotNull()
        )
        .select(
            RUN,
            "index",
            "invoke_index",
            "type",
            "time",
            "invoke_time",
            "node",
            *ddl_statement(),
            "error_code",
            "catalog_version",
        )
        .collect()
    )
    by_run: dict[int, list[DdlCompletion]] = {}
    for r in rows:
        if r["stmt"] is None or r["kind"] is None:
            continue
        by_run.setdefault(int(r[RUN]), []).append(
            DdlCompletion(
                index=int(r["index"]),
                invoke_index=int(r["invoke_index"]),
                type=str(r["type"]),
                time=int(r["time"]),
                invoke_time=int(r["invoke_time"]),
                node=r["node"],
                stmt=str(r["stmt"]),
                table=str(r["table"] or ""),
                kind=str(r["kind"]),
                error_code=r["error_code"],
                catalog_version=None if r["catalog_version"] is None else int(r["catalog_version"]),
            )
        )
    found = []
    for run, ddls in sorted(by_run.items()):
        lines = cat.runs[run].lines if run in cat.runs else []
        window = Window(ddls, lines)
        for d in sorted(ddls, key=lambda d: d.index):
            why = judge(d, ddls, lines, window)
            if why is not None:
                nodes = [d.node] if d.node else []
                found.append((run, "ddl-outcome", [d.invoke_index, d.index], nodes, why))
    return cat.spark.createDataFrame(found, _ANOMALY)
