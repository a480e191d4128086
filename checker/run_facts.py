"""The small facts of each run the driver needs, brought back by one Spark job.

Completeness, the verdict's preconditions, the DDL-ack step function and the statistics all
need a few small things in the driver: counts of invokes and completions, the nemesis events,
the final reads (without their rows), the DDL acks, the txns of unknown outcome and the tables
an ok txn wrote. Each used to be its own collect or count (a Spark job each, ~0.4 s apiece on
a small run); here they are one union of tagged rows, collected once for every run of a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import RUN
from checker.facts import Ack, LastWrite, RunFacts
from checker.frames import RunFrames
from checker.ingest import CLIENT_PROCESS

# every kind of row shares these columns; a kind leaves the ones it does not use null
_COLUMNS = (
    ("kind", "string"),
    (RUN, "bigint"),
    ("index", "bigint"),
    ("time", "bigint"),
    ("f", "string"),
    ("type", "string"),
    ("node", "string"),
    ("table", "string"),
    ("index_name", "string"),
    ("code", "string"),
    ("text", "string"),
    ("n1", "bigint"),
    ("n2", "bigint"),
    ("n3", "bigint"),
)


def _shape(df: DataFrame, kind: str, **cols: Column) -> DataFrame:
    """`df` as rows of the common facts schema: `cols` named, the rest null."""
    out = [F.lit(kind).alias("kind"), F.col(RUN)]
    for name, typ in _COLUMNS[2:]:
        out.append((cols[name] if name in cols else F.lit(None)).cast(typ).alias(name))
    return df.select(*out)


def facts_frame(frames: RunFrames, clock_free: bool) -> DataFrame:
    """The union of every fact as tagged rows (its plan runs as one job when collected)."""
    events, all_completions, ops = frames.events, frames.all_completions, frames.ops
    client = F.col("process").rlike(CLIENT_PROCESS)
    invoke = F.col("type") == "invoke"
    ev = events.groupBy(RUN).agg(
        F.count(F.when(client & invoke, 1)).alias("n1"),
        F.min(F.when(client & invoke, F.col("time"))).alias("n2"),
        F.max("time").alias("n3"),
    )
    paired = F.col("paired")
    co = all_completions.groupBy(RUN).agg(
        F.count(F.when(paired, 1)).alias("n1"),
        F.count(F.when(paired & (F.col("type") == "ok"), 1)).alias("n2"),
        F.count(F.when(~paired, 1)).alias("n3"),
        F.min(F.when(~paired, F.col("index"))).alias("index"),
        F.max(F.when(F.col("f") != "final-read", F.col("time"))).alias("time"),
    )
    reinvoked = (
        all_completions.where(F.col("after_info"))
        .groupBy(RUN)
        .agg(F.count(F.lit(1)).alias("n1"), F.min("invoke_index").alias("index"))
    )
    nemesis = events.where(F.col("process") == "nemesis")
    # A failed final read need not repeat its table: its invoke names it. An ok one is what
    # its own value says (the contract gives the final read's invoke no fields).
    reads = all_completions.where(F.col("f") == "final-read")
    failed = (F.col("type") != "ok") & F.col("paired")
    # per table name: the last commit and the last completion of its acknowledged writes, to
    # tell a final read taken before them (history.md: "after every acknowledged write")
    written = (
        ops.where((F.col("type") == "ok") & F.col("op").isin("w", "d"))
        .groupBy(RUN, "table")
        .agg(
            F.max("commit_ts").alias("n1"),
            F.max("index").alias("n2"),
            F.max_by("index", "commit_ts").alias("n3"),
        )
    )
    parts = [
        _shape(ev, "ev", n1=F.col("n1"), n2=F.col("n2"), n3=F.col("n3")),
        _shape(
            co,
            "co",
            n1=F.col("n1"),
            n2=F.col("n2"),
            n3=F.col("n3"),
            index=F.col("index"),
            time=F.col("time"),
        ),
        _shape(reinvoked, "reinvoked", n1=F.col("n1"), index=F.col("index")),
        _shape(
            nemesis,
            "nemesis",
            index=F.col("index"),
            time=F.col("time"),
            f=F.col("f"),
            text=F.col("value_json"),
        ),
        _shape(
            reads,
            "read",
            index=F.col("index"),
            type=F.col("type"),
            node=F.col("node"),
            table=F.coalesce("v_table", F.when(failed, F.col("invoke_table"))),
            index_name=F.coalesce("v_ix", F.when(failed, F.col("invoke_ix"))),
            code=F.col("error_code"),
            n1=F.col("v_ts"),
            n2=F.when(F.col("paired"), F.col("invoke_index")),
        ),
        _shape(
            frames.ddls,
            "ack",
            index=F.col("index"),
            time=F.col("time"),
            n1=F.col("catalog_version"),
            n2=F.col("activation_ts"),
            text=F.col("stmt"),
        ),
        _shape(frames.txns.where(F.col("type") == "info"), "info", index=F.col("invoke_index")),
        _shape(written, "wrote", table=F.col("table"), **{n: F.col(n) for n in ("n1", "n2", "n3")}),
    ]
    if not clock_free:  # participants are placed in the catalog only with a clock
        off = (
            frames.off_participants.where(F.col("type") == "ok")
            .select(RUN, "index", "table")
            .distinct()
            .groupBy(RUN)
            .agg(F.count(F.lit(1)).alias("n1"))
        )
        parts.append(_shape(off, "off", n1=F.col("n1")))
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p)
    return union


def parse_facts(rows: list[Any], runs: Sequence[int]) -> dict[int, RunFacts]:
    """The collected rows of `facts_frame` as each run's RunFacts."""
    by_run: dict[int, list[Any]] = {r: [] for r in runs}
    for r in rows:
        by_run[int(r[RUN])].append(r)
    return {run: _run_facts(rows) for run, rows in by_run.items()}


# what a run's aggregate row says when the run has no row to aggregate (no completion, say)
_NONE = {"n1": None, "n2": None, "n3": None, "index": None, "time": None}


def _run_facts(rows: list[Any]) -> RunFacts:
    """One run's collected rows as its RunFacts."""
    by_kind: dict[str, list[Any]] = {}
    for r in rows:
        by_kind.setdefault(str(r["kind"]), []).append(r)
    ev = by_kind.get("ev", [_NONE])[0]
    co = by_kind.get("co", [_NONE])[0]
    reinvoked = by_kind.get("reinvoked", [_NONE])[0]
    nemesis = sorted(by_kind.get("nemesis", []), key=lambda r: int(r["index"]))
    reads = sorted(by_kind.get("read", []), key=lambda r: int(r["index"]))
    acks = sorted(by_kind.get("ack", []), key=lambda r: int(r["index"]))
    return RunFacts(
        invokes=int(ev["n1"] or 0),
        closed=int(co["n1"] or 0),
        ok=int(co["n2"] or 0),
        unpaired=int(co["n3"] or 0),
        first_unpaired=None if co["index"] is None else int(co["index"]),
        reinvoked=int(reinvoked["n1"] or 0),
        first_reinvoked=None if reinvoked["index"] is None else int(reinvoked["index"]),
        end_time=int(ev["n3"] or 0),
        workload_start=None if ev["n2"] is None else int(ev["n2"]),
        workload_end=None if co["time"] is None else int(co["time"]),
        nemesis=tuple(
            {"index": int(r["index"]), "time": int(r["time"]), "f": r["f"], "value_json": r["text"]}
            for r in nemesis
        ),
        final_reads=tuple(
            {
                "index": int(r["index"]),
                "type": r["type"],
                "node": r["node"],
                "table": r["table"],
                "index_name": r["index_name"],
                "code": r["code"],
                "ts": None if r["n1"] is None else int(r["n1"]),
                "invoke_index": None if r["n2"] is None else int(r["n2"]),
            }
            for r in reads
        ),
        acks=tuple(
            Ack(
                int(r["index"]),
                int(r["time"]),
                int(r["n1"]),
                None if r["n2"] is None else int(r["n2"]),
                r["text"],
            )
            for r in acks
        ),
        info_txn_invokes=tuple(sorted(int(r["index"]) for r in by_kind.get("info", []))),
        last_writes=tuple(
            LastWrite(
                str(r["table"]),
                None if r["n1"] is None else int(r["n1"]),
                None if r["n3"] is None else int(r["n3"]),
                int(r["n2"]),
            )
            for r in sorted(by_kind.get("wrote", []), key=lambda r: str(r["table"]))
            if r["table"]
        ),
        off_ok=sum(int(r["n1"] or 0) for r in by_kind.get("off", [])),
    )


def with_facts(frames: RunFrames, clock_free: bool) -> RunFrames:
    """`frames` with their facts collected (the one job of this module)."""
    rows = facts_frame(frames, clock_free).collect()
    return replace(frames, facts=parse_facts(rows, frames.runs))
