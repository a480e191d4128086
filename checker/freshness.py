"""stale-schema-read (read-your-DDL): after a DDL ack, no new probe or txn may see older schemas.

The acks are few, so they become a step function of controller time in the driver (the newest
acknowledged catalog version so far), joined to probes and txns by their invoke time.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checker.catalog_index import MAX_TS, CatalogIndex, Interval, IntervalLookup
from checker.explain import anomalies, secs, sentence, txt
from checker.frames import RunFrames
from checker.sql_expr import ref

ACK_PAYLOAD = [
    ("req_v", T.LongType()),
    ("ddl_index", T.LongType()),
    ("ddl_time", T.LongType()),
    ("ddl_stmt", T.StringType()),
]


def ack_lookup(frames: RunFrames, cat: CatalogIndex) -> IntervalLookup:
    """Intervals of invoke time (A, next A] -> the greatest acknowledged version before it,
    per run."""
    intervals = []
    for run in frames.runs:
        acks = sorted(frames.known(run).acks, key=lambda a: (a.time, a.index))
        best: tuple[int, int, int, str] | None = None
        for i, a in enumerate(acks):
            if best is None or a.catalog_version > best[0]:
                best = (a.catalog_version, a.index, a.time, str(a.stmt))
            nxt = acks[i + 1].time + 1 if i + 1 < len(acks) else MAX_TS
            intervals.append(Interval(a.time + 1, nxt, best, run=run))
    return IntervalLookup(cat.spark, intervals, ACK_PAYLOAD)


def stale_schema_read(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Probes with a null ts and txns invoked after a DDL ack that saw an older schema."""
    lookup = ack_lookup(frames, cat)
    probes = lookup.join(frames.probes.where(F.col("asked_ts").isNull()), "invoke_time", "inner")
    bad_probes = probes.where(F.col("catalog_version") < F.col("req_v"))
    ack = sentence(
        "after DDL '",
        txt("ddl_stmt"),
        "' was acknowledged at ",
        secs("ddl_time"),
        " s with catalog version ",
        txt("req_v"),
    )
    probe_text = sentence(
        "probe invoked at ",
        secs("invoke_time"),
        " s on ",
        txt("node"),
        " answered catalog version ",
        txt("catalog_version"),
        " ",
        ack,
    )
    a = anomalies(bad_probes, "stale-schema-read", ["ddl_index", "index"], ["node"], probe_text)

    txns = lookup.join(frames.txn_tables, "invoke_time", "inner")
    txns = cat.with_table(txns, "req_v", "table", "w")
    bad_txns = txns.where(F.col("txn_sv") < F.col("w_sv"))
    txn_text = sentence(
        "txn ",
        txt("txn_id"),
        " invoked at ",
        secs("invoke_time"),
        " s on ",
        txt("node"),
        " used schema version ",
        txt("txn_sv"),
        " of ",
        ref("table"),
        " ",
        ack,
        ", which gave ",
        ref("table"),
        " schema version ",
        txt("w_sv"),
    )
    b = anomalies(bad_txns, "stale-schema-read", ["ddl_index", "index"], ["node"], txn_text)
    return a.unionByName(b)
