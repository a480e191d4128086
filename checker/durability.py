"""What was acknowledged must last: lost-write, lost-ddl, and activation-order of the catalog.

Written columns are compared with the final read by column id (a later rename or widening does
not hide a write; a later drop removes the column from the comparison).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checker.catalog_index import CatalogIndex
from checker.conformance import KEY_COLUMN
from checker.explain import anomalies, as_column, case, sentence, ts, txt
from checker.frames import RunFrames, bounded_broadcast
from checker.ingest import CLIENT_PROCESS
from checker.sql_expr import ref

INTEGER_TEXT = r"^-?[0-9]+$"


def same_value(a: Column, b: Column) -> Column:
    """JSON texts equal exactly when both are integers (INT64 beyond 2^53 included), as
    numbers when both are numbers (1 and 1.0), else as text (null-safe)."""
    da, db = a.try_cast("double"), b.try_cast("double")
    return (
        F.when(a.rlike(INTEGER_TEXT) & b.rlike(INTEGER_TEXT), a == b)
        .when(da.isNotNull() & db.isNotNull(), da == db)
        .otherwise(a.eqNullSafe(b))
    )


def lost_write(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """The last committed write of each key whose effect the final read does not show.

    With comparable timestamps the last write is the one with the greatest commit_ts. On a
    clock-free run it is decided by real time, as Jepsen does: any acknowledged write that no
    other write of the key was invoked after could be the last, and the key is lost only if
    the final read matches none of them."""
    writes = frames.ops.where((F.col("type") == "ok") & F.col("op").isin("w", "d"))
    if cat.clock_free:  # the real-time rule needs each write's invoke time
        invoked = frames.txns.select(
            F.col("run").alias("_tr"), F.col("index").alias("_ti"), "invoke_time"
        )
        on = (F.col("_tr") == F.col("run")) & (F.col("_ti") == F.col("index"))
        writes = writes.join(invoked, on).drop("_tr", "_ti")
    writes = cat.with_schema_version_of(writes, "op_ts", "table", "txn_sv", "wv")
    writes = cat.with_table(writes, "wv", "table", "w").where(F.col("w_id").isNotNull())
    # only what the verdict and its sentence use: the last-write aggregate carries every column
    kept = ["run", "index", "pos", "txn_id", "commit_ts", "time", "op", "table", "key", "row"]
    kept += ["op_node", "w_id", "w_sv"] + (["invoke_time"] if cat.clock_free else [])
    last = _last_writes(writes.select(*kept), cat.clock_free).withColumn("_maybe", F.lit(False))

    # A write of a txn whose outcome is unknown may have overwritten the key, at any time: a
    # final read that shows it leaves the key undecided, one that shows neither it nor the
    # last acknowledged write proves that write lost. Such a write is a candidate that may
    # explain the final read, never a witness.
    maybe = _unknown_outcome_writes(frames, cat)
    last = last.unionByName(maybe, allowMissingColumns=True)

    reads = cat.with_schema_version_of(frames.table_reads, "ts", "table", "read_sv", "fv")
    reads = cat.with_table(reads, "fv", "table", "f")
    latest = Window.partitionBy("run", "f_id").orderBy(F.col("index").desc())
    reads = (
        reads.where(F.col("f_id").isNotNull())
        .withColumn("_rn", F.row_number().over(latest))
        .where(F.col("_rn") == 1)
    )
    read_tables = reads.select(
        F.col("run").alias("_fr"),
        F.col("f_id"),
        F.col("f_sv"),
        F.col("fv"),
        F.col("index").alias("read_index"),
        F.col("invoke_index").alias("read_invoke"),
        F.col("node").alias("read_node"),
        F.col("ts").alias("read_ts"),
        F.col("table").alias("read_table"),
    )
    read_rows = reads.select(
        F.col("run").alias("_rr"), F.col("f_id").alias("_rf"), F.explode("rows").alias("r")
    ).select("_rr", "_rf", F.col("r.key").alias("_rk"), F.col("r.row").alias("final_row"))

    after = (
        F.col("index") < F.col("read_invoke")
        if cat.clock_free
        else F.col("commit_ts") < F.col("read_ts")
    )
    cand = (
        last.join(
            F.broadcast(read_tables),
            (F.col("_fr") == F.col("run")) & (F.col("w_id") == F.col("f_id")),
        )
        .where(after | F.col("_maybe"))
        # the version a write of unknown outcome was made in is not known: its columns are
        # matched by name in the final read's version (a rename since hides it, leniently)
        .withColumn("w_sv", F.when(F.col("_maybe"), F.col("f_sv")).otherwise(F.col("w_sv")))
    )
    on_row = (
        (F.col("_rr") == F.col("run"))
        & (F.col("_rf") == F.col("f_id"))
        & (F.col("_rk") == F.col("key"))
    )
    cand = cand.join(read_rows, on_row, "left")
    schemas = cat.schemas
    written_in = schemas.select(
        F.col("run").alias("_ws_r"),
        F.col("table_id").alias("_ws_id"),
        F.col("schema_version").alias("_ws_sv"),
        F.struct("col_ids", "fills").alias("_w_schema"),
    )
    read_in = schemas.select(
        F.col("run").alias("_fs_r"),
        F.col("table_id").alias("_fs_id"),
        F.col("schema_version").alias("_fs_sv"),
        F.struct("col_names").alias("_f_schema"),
    )
    cand = (
        cand.join(
            F.broadcast(written_in),
            (F.col("_ws_r") == F.col("run"))
            & (F.col("_ws_id") == F.col("w_id"))
            & (F.col("_ws_sv") == F.col("w_sv")),
            "left",
        )
        .join(
            F.broadcast(read_in),
            (F.col("_fs_r") == F.col("run"))
            & (F.col("_fs_id") == F.col("f_id"))
            & (F.col("_fs_sv") == F.col("f_sv")),
            "left",
        )
        .withColumn("diff", _first_difference())
    )
    missed = ((F.col("op") == "d") & F.col("final_row").isNotNull()) | (
        (F.col("op") == "w") & (F.col("final_row").isNull() | F.col("diff").isNotNull())
    )
    # A key is lost when no copy of it in the final read shows any of its possibly-last writes
    # (with a clock there is one acknowledged) nor a write of unknown outcome; the witness is
    # the acknowledged write that completed last.
    per_key = Window.partitionBy("run", "w_id", "key")
    witness_first = per_key.orderBy(
        F.col("_maybe"), F.col("index").desc(), F.col("pos").desc(), F.col("diff")
    )
    lost = (
        cand.withColumn("_missed", missed)
        .withColumn("_shown", F.max((~F.col("_missed")).cast("int")).over(per_key))
        .withColumn("_rn", F.row_number().over(witness_first))
        .where(F.col("_missed") & (F.col("_shown") == 0) & (F.col("_rn") == 1) & ~F.col("_maybe"))
    )
    effect = case(
        ("`op` = 'd'", sentence("but the final read still has the row ", txt("final_row"))),
        ("`final_row` is null", "but the final read has no such row"),
        otherwise=sentence("but ", ref("diff")),
    )
    text = sentence(
        "txn ",
        txt("txn_id"),
        case(("`op` = 'd'", " deleted "), otherwise=" wrote "),
        ref("table"),
        " key ",
        txt("key"),
        case(("`op` = 'w'", sentence(" = ", txt("row"))), otherwise=""),
        " and committed at ",
        ts("commit_ts"),
        " (acknowledged, and no write of that key was invoked after it completed); final read #"
        if cat.clock_free
        else " (acknowledged, and no later write of that key committed); final read #",
        txt("read_index"),
        " of ",
        ref("read_table"),
        " at ",
        ts("read_ts"),
        " on ",
        txt("read_node"),
        ", ",
        effect,
    )
    return anomalies(lost, "lost-write", ["index", "read_index"], ["op_node", "read_node"], text)


def _first_difference() -> Column:
    """For a write with the final row beside it: the first written column (by name) whose
    value the final row does not show, as 'c = v but the final read has w', or null.

    Columns are matched by id: a later rename or widening does not hide a write, and a later
    drop takes the column out of the comparison. A NULL written into a column that a later
    version made NOT NULL with a default reads as that default (rows are upgraded one version
    at a time, see CatalogIndex.schemas): not a difference either."""
    written = F.from_json("row", "map<string,string>")
    final = F.from_json("final_row", "map<string,string>")
    w_ids = F.col("_w_schema.col_ids")
    w_fills = F.col("_w_schema.fills")
    f_names = F.col("_f_schema.col_names")

    def final_value(name: Column) -> Column:
        # the primary key travels beside the row (history.md): a catalog that lists it as
        # column `key` is answered by the row's key where the final row does not repeat it
        implicit = (name == KEY_COLUMN) & ~F.map_contains_key(final, KEY_COLUMN)
        return F.when(implicit, F.col("key").cast("string")).otherwise(final[name])

    def differs(e: Column) -> Column:
        name = f_names[w_ids[e.key]]
        shown = final_value(name)
        fill = w_fills[w_ids[e.key]]
        filled = F.when(fill.getField("at") <= F.col("f_sv"), fill.getField("text"))
        return (
            name.isNotNull()
            & ~same_value(e.value, shown)
            # a null may read as a later default; a write of unknown outcome, whose version
            # is not known, is given the benefit of the doubt (it only ever explains a read)
            & ~(e.value.isNull() & (F.col("_maybe") | same_value(shown, filled)))
        )

    def render(e: Column) -> Column:
        shown = final_value(f_names[w_ids[e.key]])
        return F.concat(
            e.key, F.lit(" = "), txt(e.value), F.lit(" but the final read has "), txt(shown)
        )

    diffs = F.filter(F.map_entries(written), differs)
    return F.when(F.col("op") == "w", F.array_min(F.transform(diffs, render)))


def _unknown_outcome_writes(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Every write a txn that ended in `info` meant to make (its invoke's ops: the completion
    of an unknown outcome may not list them) as (run, w_id, key, op, table, row, _maybe). Such a
    write has no ts to place its table name at, so the name stands for every table that ever
    had it: a write to t6 after `RENAME t5 TO t6` may have overwritten what was written to t5."""
    info = frames.txns.where(F.col("type") == "info").select(
        F.col("run").alias("_ir"), F.col("invoke_index").alias("_ii")
    )
    invokes = frames.events.where(
        (F.col("type") == "invoke") & (F.col("f") == "txn") & F.col("process").rlike(CLIENT_PROCESS)
    )
    # Unknown outcomes are rare (a timeout, a lost reply): their invokes are picked out by a
    # broadcast, unless a batch has so many that a shuffle is the safer way.
    info_rows = sum(len(f.info_txn_invokes) for f in frames.all_facts())
    info = bounded_broadcast(info, info_rows)
    on = (F.col("run") == F.col("_ir")) & (F.col("index") == F.col("_ii"))
    picked = invokes.join(info, on, "left_semi")
    names = cat.tables.select("run", F.col("table").alias("_name"), F.col("table_id").alias("w_id"))
    return (
        picked.select("run", F.explode("value.ops").alias("o"))
        .where(F.col("o.op").isin("w", "d"))
        .select(
            "run",
            F.col("o.table").alias("_name"),
            F.col("o.key").alias("key"),
            F.col("o.op").alias("op"),
            F.col("o.row").alias("row"),
        )
        .distinct()
        .join(F.broadcast(names.distinct()), ["run", "_name"])
        .select(
            "run",
            "w_id",
            "key",
            "op",
            F.col("_name").alias("table"),
            "row",
            F.lit(True).alias("_maybe"),
        )
    )


def _last_writes(writes: DataFrame, clock_free: bool) -> DataFrame:
    """The writes of each (table id, key) that may hold the final effect: the one with the
    greatest commit_ts, or (clock-free) every txn's last write of the key that completed after
    the last invoke of any write of it (no write began after it ended)."""
    if not clock_free:
        # one aggregate per key instead of a window: no sort of every write by key
        order = ["commit_ts", "index", "pos"]
        group = ["run", "w_id", "key"]
        rest = [c for c in writes.columns if c not in order and c not in group]
        best = F.max(F.struct(*order, *rest)).alias("_w")
        return writes.groupBy(*group).agg(best).select(*group, "_w.*")
    in_txn = Window.partitionBy("run", "w_id", "key", "index").orderBy(F.col("pos").desc())
    per_key = Window.partitionBy("run", "w_id", "key")
    return (
        writes.withColumn("_rn", F.row_number().over(in_txn))
        .where(F.col("_rn") == 1)
        .withColumn("_last_invoke", F.max("invoke_time").over(per_key))
        .where(F.col("time") >= F.col("_last_invoke"))
        .drop("_last_invoke")
    )


def _norm(c: Column) -> Column:
    """A statement as lost-ddl compares it: as text, leading and trailing whitespace ignored
    (anomalies.md); case and inner spacing count (F.trim alone strips spaces only)."""
    return F.regexp_replace(c, r"^\s+|\s+$", "")


def lost_ddl(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Acknowledged DDLs missing from catalog.jsonl or disagreeing with its version/activation."""
    versions = cat.versions.select(
        F.col("run").alias("_vr"),
        F.col("catalog_version").alias("_v"),
        F.col("activation_ts").alias("cat_activation"),
        F.col("ddl").alias("cat_ddl"),
    )
    on = (F.col("_vr") == F.col("run")) & (F.col("_v") == F.col("catalog_version"))
    j = frames.ddls.join(F.broadcast(versions), on, "left")
    missing = j.where(F.col("_v").isNull())
    # without a clock an activation_ts is opaque: lost-ddl compares the version and the
    # statement only (history.md, `"clock": "none"`)
    same_activation = (
        F.lit(True) if cat.clock_free else F.col("cat_activation") == F.col("activation_ts")
    )
    moved = j.where(F.col("_v").isNotNull() & ~same_activation)
    # every ack's statement, not only where two acks share a version: a catalog that holds
    # another DDL at the acknowledged version lost the acknowledged one
    other = j.where(
        F.col("_v").isNotNull()
        & same_activation
        & ~_norm(F.col("stmt")).eqNullSafe(_norm(F.col("cat_ddl")))
    )
    head = sentence(
        "DDL '",
        txt("stmt"),
        "' was acknowledged on ",
        txt("node"),
        " with catalog version ",
        txt("catalog_version"),
        " activating at ",
        ts("activation_ts"),
        ", but ",
    )
    a = anomalies(
        missing,
        "lost-ddl",
        ["index"],
        ["node"],
        sentence(head, "catalog.jsonl has no version ", txt("catalog_version")),
    )
    b = anomalies(
        moved,
        "lost-ddl",
        ["index"],
        ["node"],
        sentence(
            head,
            "catalog.jsonl activates version ",
            txt("catalog_version"),
            " at ",
            ts("cat_activation"),
        ),
    )
    c = anomalies(
        other,
        "lost-ddl",
        ["index"],
        ["node"],
        sentence(
            head,
            "catalog.jsonl holds another DDL at that version: '",
            txt("cat_ddl"),
            "'",
        ),
    )
    return a.unionByName(b).unionByName(c)


def activation_order(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
    """Catalog versions whose activation_ts does not exceed the previous version's."""
    w = Window.partitionBy("run").orderBy("catalog_version")
    v = cat.versions.select(
        "run",
        "catalog_version",
        "activation_ts",
        "ddl",
        F.lag("catalog_version").over(w).alias("prev_version"),
        F.lag("activation_ts").over(w).alias("prev_activation"),
    ).where(F.col("activation_ts") <= F.col("prev_activation"))
    acks = frames.ddls.select(
        F.col("run").alias("_ar"),
        F.col("catalog_version").alias("_av"),
        F.col("index").alias("_ai"),
        F.col("node").alias("_an"),
    )
    j = v.join(
        F.broadcast(acks),
        (F.col("_ar") == F.col("run"))
        & F.col("_av").isin(F.col("catalog_version"), F.col("prev_version")),
        "left",
    )
    grouped = j.groupBy(
        "run", "catalog_version", "activation_ts", "ddl", "prev_version", "prev_activation"
    ).agg(
        F.array_sort(F.collect_set(F.col("_ai").cast("bigint"))).alias("events"),
        F.array_sort(F.collect_set("_an")).alias("nodes"),
    )
    text = sentence(
        "catalog version ",
        txt("catalog_version"),
        " ('",
        txt("ddl"),
        "') activates at ",
        ts("activation_ts"),
        ", not after version ",
        txt("prev_version"),
        " which activates at ",
        ts("prev_activation"),
    )
    return grouped.select(
        "run",
        F.lit("activation-order").alias("class"),
        "events",
        "nodes",
        as_column(text).alias("explanation"),
    )
