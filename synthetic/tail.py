"""The scripted end of every synthetic run: one near-miss per anomaly class, and the one fault a
run may ask for injected where its near-miss is.

The tail never settles: its faults edit events and the catalog after they are emitted, so all of
them must still be buffered until the model's close()."""

from __future__ import annotations

import copy
from typing import Any

from synthetic.model import MS, ClusterModel


def scripted_tail(m: ClusterModel, t: int, fault: str | None) -> int:
    """Run the tail from controller time t on; returns the time after its last event."""
    t = max(t, m.last_ack_t + MS)
    m.flush()
    # Rows the tail reads: two keys of t2 in different partitions, and fresh keys of t3.
    k_a, k_b = 5001, next(k for k in range(5002, 5100) if m.partition(k) != m.partition(5001))
    setup = m.begin(t, "n1")
    tbl2 = m.latest()["tables"]["t2"]
    for k in (k_a, k_b):
        m.op(setup, t + MS, "w", "t2", k, m.row_for(tbl2))
    m.commit(setup, t + 2 * MS)
    t += 10 * MS
    t = _compatible_ddl(m, t, (k_a, k_b), fault)
    t, ack_b_event = _incompatible_ddl(m, t, k_a, fault)
    t = _mixed_commit(m, t, (k_a, k_b), fault)
    t = _lost_write(m, t, fault)
    if fault == "ddl-outcome":
        t = _refused_ddls(m, t)
    if fault == "lost-ddl":
        ack_b_event["value"]["activation_ts"] += 1
    t += 20 * MS
    t = m.final_reads(t, fault == "index-missing", fault == "index-orphan")
    if fault == "activation-order":
        last = copy.deepcopy(m.latest())
        last["catalog_version"] += 1
        last["activation_ts"] -= 1
        last["ddl"] = "ALTER INDEX i1 SET STATE AVAILABLE"
        m.catalog.append(last)
    return t


def _refused_ddls(m: ClusterModel, t: int) -> int:
    """ddl-outcome's near-miss and fault, only in a run that asks for it (every other run's
    history stays as it was): an ALTER of a table no version has, refused as not found, and
    one of t2, which every version since the last ack has, refused as not found."""
    m.refused_ddl(
        t, "ALTER TABLE t_gone ADD COLUMN z INT32", "t_gone", "add_column", "TABLE_NOT_FOUND"
    )
    m.refused_ddl(
        t + 2 * MS, "ALTER TABLE t2 ADD COLUMN z INT32", "t2", "add_column", "TABLE_NOT_FOUND", "n2"
    )
    return t + 10 * MS


def _compatible_ddl(m: ClusterModel, t: int, keys: tuple[int, int], fault: str | None) -> int:
    """A compatible DDL on t2 (add a nullable column) and what straddles its activation: the
    transborder, AP and read-your-DDL near-misses (and faults)."""
    k_a, k_b = keys
    tables = m.tables_copy()
    m.bump(tables, "t2")["columns"].append(m.column("tail_a", "INT32"))
    line_a, ack_a, _ = m.ddl(
        t, "ALTER TABLE t2 ADD COLUMN tail_a INT32", "t2", "add_column", tables, node="n2"
    )
    act_a = line_a["activation_ts"]
    t_act_a = m.time_of(act_a)
    # Transborder near-miss: enlisted before activation, its write after it fails.
    x = m.begin(t_act_a - 50 * MS, "n3")
    m.op(x, t_act_a - 40 * MS, "r", "t2", k_a)
    forced = fault == "transborder-op"
    if m.op(
        x,
        t_act_a + 10 * MS,
        "w",
        "t2",
        k_b,
        m.row_for(m.table_version(x.ids["t2"], x.tables["t2"]["base_ts"])),
        force=forced,
    ):
        m.commit(x, t_act_a + 20 * MS)
    # Probes just before and after the activation (the AP near-miss and its fault).
    old_v = line_a["catalog_version"] - 1
    m.probe(ack_a + 5 * MS, "n1", "t2", act_a - 1)
    answer = None
    if fault == "ap-violation":
        answer = {
            "catalog_version": old_v,
            "table_schema_version": m.version(old_v)["tables"]["t2"]["schema_version"],
        }
    m.probe(ack_a + 5 * MS, "n2", "t2", act_a + 1, answer)
    # Read-your-DDL: a probe with a null ts after the ack (stale if its node lags).
    stale = None
    if fault == "stale-schema-read":
        lag_ts = act_a - (1 << 16)
        stale = {
            "ts": lag_ts,
            "catalog_version": old_v,
            "table_schema_version": m.version(old_v)["tables"]["t2"]["schema_version"],
            "columns": m.version(old_v)["tables"]["t2"]["columns"],
        }
    m.probe(ack_a + 10 * MS, "n3", "t2", None, stale)
    y = m.begin(ack_a + 20 * MS, "n1")
    m.op(y, ack_a + 21 * MS, "r", "t2", k_a)
    m.commit(y, ack_a + 22 * MS)
    return ack_a + 30 * MS


def _incompatible_ddl(
    m: ClusterModel, t: int, k_a: int, fault: str | None
) -> tuple[int, dict[str, Any]]:
    """An incompatible DDL on t2 (a default change) and a txn committing across it; returns the
    time after and the DDL's ack (lost-ddl edits it last)."""
    tables = m.tables_copy()
    next(c for c in m.bump(tables, "t2")["columns"] if c["name"] == "c2")["default"] = "tail"
    line_b, ack_b, ack_b_event = m.ddl(
        t,
        "ALTER TABLE t2 ALTER COLUMN c2 SET DEFAULT 'tail'",
        "t2",
        "set_default",
        tables,
        node="n3",
    )
    t_act_b = m.time_of(line_b["activation_ts"])
    z = m.begin(t_act_b - 60 * MS, "n2")
    m.op(z, t_act_b - 50 * MS, "r", "t2", k_a)
    m.commit(z, t_act_b + 10 * MS, force=fault == "incompatible-commit")
    return ack_b + 10 * MS, ack_b_event


def _mixed_commit(m: ClusterModel, t: int, keys: tuple[int, int], fault: str | None) -> int:
    """A committed read of both partitions (mixed-schema-commit's near-miss and fault)."""
    k_a, k_b = keys
    mx = m.begin(t, "n1")
    m.op(mx, t + MS, "r", "t2", k_a)
    m.op(mx, t + 2 * MS, "r", "t2", k_b)
    m.commit(mx, t + 3 * MS)
    if fault == "mixed-schema-commit":
        final = m.last_event
        final["value"]["participants"][0]["commit_schema_version"] -= 1
    if fault == "schema-conformance":
        final = m.last_event
        final["value"]["ops"][0]["result"] = {
            **(final["value"]["ops"][0]["result"] or {}),
            "ghost": 7,
        }
    return t + 10 * MS


def _lost_write(m: ClusterModel, t: int, fault: str | None) -> int:
    """A fresh key of t3 written, overwritten, and one deleted (lost-write's near-misses)."""
    w1 = m.begin(t, "n2")
    tbl3 = m.latest()["tables"]["t3"]
    for k in (7001, 7002):
        m.op(w1, t + MS, "w", "t3", k, m.row_for(tbl3))
    m.commit(w1, t + 2 * MS)
    w2 = m.begin(t + 5 * MS, "n3")
    m.op(w2, t + 6 * MS, "w", "t3", 7001, m.row_for(tbl3))
    m.op(w2, t + 7 * MS, "d", "t3", 7002)
    m.commit(w2, t + 8 * MS)
    if fault == "lost-write":
        m.flush()
        m.store.pop((tbl3["id"], 7001))
    return t
