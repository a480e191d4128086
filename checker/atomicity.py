"""Checks of the Atomicity Property and option 3 (seeds 000 and 001): what a node said was
active at a timestamp against `cat(ts)` of the authoritative catalog.

ap-violation: a probe, an op or a participant named a version other than the authoritative one.
mixed-schema-commit: the participants of one committed txn disagree (or one is not tsv).
transborder-op: an op succeeded although the table's version at op_ts is not the txn's I.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.explain import Text, anomalies, as_column, case, no_anomalies, sentence, ts, txt
from checker.frames import RunFrames, bounded_broadcast
from checker.sql_expr import Sql, ref


def _verb() -> Sql:
    return Sql(
        "case op when 'r' then 'read' when 'w' then 'wrote' when 'd' then 'deleted' "
        "when 'ix' then 'looked up' else op end"
    )


def _target() -> Sql:
    """'t1 key 5', or for a lookup through an index 't1 through index i1 for 7' (an `ix` op
    names the value it looked up, not a key)."""
    return case(
        (
            "`op` = 'ix'",
            sentence(
                " ", ref("table"), " through index ", txt("index_name"), " for ", txt("lookup")
            ),
        ),
        otherwise=sentence(" ", ref("table"), " key ", txt("key")),
    )


def _truth(sv: str, since: str) -> Sql:
    """'version 6 was active from 1893:0' or 'the table did not exist then'."""
    return case(
        (f"{ref(sv).text} is null", "the table did not exist at that timestamp"),
        otherwise=sentence("version ", txt(sv), " was active from ", ts(since)),
    )


def ap_violation(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Probes, op versions and participant commit versions that differ from cat(ts)."""
    probes = cat.with_table(cat.with_version(frames.probes, "ts", "cv"), "cv", "table", "t")
    bad_probes = probes.where(
        (F.col("catalog_version") != F.col("cv"))
        | (F.col("table").isNotNull() & ~F.col("table_sv").eqNullSafe(F.col("t_sv")))
    )
    probe_text = sentence(
        "probe on ",
        txt("node"),
        " at ",
        ts("ts"),
        " answered catalog version ",
        txt("catalog_version"),
        case(
            (
                "`table` is not null",
                sentence(" with ", ref("table"), " at schema version ", txt("table_sv")),
            ),
            otherwise="",
        ),
        ", but catalog version ",
        txt("cv"),
        case(
            (
                "`table` is not null",
                sentence(" (", ref("table"), " at schema version ", txt("t_sv"), ")"),
            ),
            otherwise="",
        ),
        " was active from ",
        ts("cv_activation"),
    )
    a = anomalies(bad_probes, "ap-violation", ["index"], ["node"], probe_text)

    # ops and participants come placed in the catalog (t_sv: the enlisted table at their ts)
    ops = frames.ops.where(F.col("op_sv").isNotNull())
    bad_ops = ops.where(~F.col("op_sv").eqNullSafe(F.col("t_sv")))
    op_text = sentence(
        "txn ",
        txt("txn_id"),
        " ",
        _verb(),
        _target(),
        " on ",
        txt("op_node"),
        " at ",
        ts("op_ts"),
        " with schema version ",
        txt("op_sv"),
        ", but ",
        _truth("t_sv", "t_since"),
    )
    b = anomalies(bad_ops, "ap-violation", ["index"], ["op_node"], op_text)

    bad_parts = frames.off_participants.where(F.col("commit_sv").isNotNull())
    part_text = sentence(
        "participant ",
        txt("p_node"),
        " (partition ",
        txt("partition"),
        ") of txn ",
        txt("txn_id"),
        " validated ",
        ref("table"),
        " at commit ",
        ts("commit_ts"),
        " against schema version ",
        txt("commit_sv"),
        ", but ",
        _truth("t_sv", "t_since"),
    )
    c = anomalies(bad_parts, "ap-violation", ["index"], ["p_node"], part_text)
    return a.unionByName(b).unionByName(c)


def mixed_schema_commit(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Committed txns whose participants report different versions of one table, or not tsv.

    Participants that disagree among themselves cannot all equal tsv, so the txns to report
    are those with one participant off tsv; only theirs are grouped (no shuffle of the rest),
    and with none off (a correct run) no participant is read again. Without comparable
    timestamps there is no tsv, but participants that disagree are still judged."""
    if cat.clock_free:
        return _disagreeing_participants(frames)
    bad_keys = (
        frames.off_participants.where(F.col("type") == "ok")
        .select(F.col("run").alias("_br"), F.col("index").alias("_bi"), F.col("table").alias("_bt"))
        .distinct()
    )
    n_bad = sum(f.off_ok for f in frames.all_facts())
    bad_keys = bounded_broadcast(bad_keys, n_bad)
    if n_bad == 0:
        return no_anomalies(frames.events.sparkSession)
    parts = frames.participants.where(F.col("type") == "ok").join(
        bad_keys,
        (F.col("run") == F.col("_br"))
        & (F.col("index") == F.col("_bi"))
        & (F.col("table") == F.col("_bt")),
        "left_semi",
    )
    off = F.count(F.when(~F.col("commit_sv").eqNullSafe(F.col("t_sv")), 1)).alias("off")
    grouped = _per_txn_table(parts, ["t_sv", "t_since"], off)
    bad = grouped.where((F.size("versions") > 1) | (F.col("off") > 0))
    text = sentence(
        "txn ",
        txt("txn_id"),
        " committed at ",
        ts("commit_ts"),
        " with participants ",
        *_reporting("schema versions"),
        ", but ",
        _truth("t_sv", "t_since"),
    )
    return _as_mixed(bad, text)


def _disagreeing_participants(frames: RunFrames) -> DataFrame:
    """Committed txns whose participants report different versions of one table (the part of
    mixed-schema-commit that needs no timestamp: a run with `"clock": "none"`)."""
    grouped = _per_txn_table(frames.participants.where(F.col("type") == "ok"), [])
    text = sentence(
        "txn ",
        txt("txn_id"),
        " committed with participants ",
        *_reporting("different schema versions"),
    )
    return _as_mixed(grouped.where(F.size("versions") > 1), text)


def _per_txn_table(parts: DataFrame, keys: list[str], *extra: Column) -> DataFrame:
    """Participants grouped per (txn, table): the versions they reported and their nodes."""
    return parts.groupBy("run", "index", "txn_id", "table", "commit_ts", *keys).agg(
        F.array_sort(F.collect_set("commit_sv")).alias("versions"),
        F.array_sort(F.collect_set("p_node")).alias("p_nodes"),
        *extra,
    )


def _reporting(what: str) -> tuple[str | Sql, ...]:
    """'n1, n2 reporting <what> [3, 4] of t1' as parts of a sentence."""
    return (
        Sql("array_join(`p_nodes`, ', ')"),
        f" reporting {what} [",
        Sql("array_join(transform(`versions`, x -> cast(x as string)), ', ')"),
        "] of ",
        ref("table"),
    )


def _as_mixed(bad: DataFrame, text: Text) -> DataFrame:
    return bad.select(
        "run",
        F.lit("mixed-schema-commit").alias("class"),
        F.array(F.col("index").cast("bigint")).alias("events"),
        F.col("p_nodes").alias("nodes"),
        as_column(text).alias("explanation"),
    )


def transborder_op(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Ops that succeeded although tsv(t, op_ts) differs from the txn's I for t."""
    ops = frames.ops.where(F.col("succeeded") & F.col("txn_sv").isNotNull())
    bad = ops.where(~F.col("txn_sv").eqNullSafe(F.col("t_sv")))
    text = sentence(
        "txn ",
        txt("txn_id"),
        " ",
        _verb(),
        _target(),
        " on ",
        txt("op_node"),
        " at ",
        ts("op_ts"),
        " and the op succeeded, although the txn's initial schema version of ",
        ref("table"),
        " was ",
        txt("txn_sv"),
        " and ",
        _truth("t_sv", "t_since"),
        " (option 3 forbids an op after a DDL on an enlisted table)",
    )
    return anomalies(bad, "transborder-op", ["index"], ["op_node"], text)
