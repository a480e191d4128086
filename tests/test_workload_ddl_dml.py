"""The ddl-dml and index workloads against the system's own catalog rules (no cluster).

The oracle is `schemasync.catalog` (the real validator every node runs): each DDL the generator
plans is applied to it, and its verdict is fed back as the cluster would. A valid stream means
zero DDL_INVALID; rows are checked against the oracle's schema with `schemasync.types`.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from schemasync.catalog import Catalog, next_catalog
from schemasync.ddl import DdlInvalid, IndexState, parse_ddl
from schemasync.types import parse_type, value_problem
from workloads import build_generator
from workloads.ddl_dml import DdlDmlWorkload
from workloads.generator import Op
from workloads.probes import MS
from workloads.schema_model import DDL_KINDS

NEXT_STATE = {"REGISTERED": "BUILDING", "BUILDING": "AVAILABLE", "STOPPING": "REMOVED"}


class CatalogOracle:
    """The catalog of one healthy cluster: DDL applied in order, index states driven along."""

    def __init__(self, seed: int) -> None:
        self.latest = Catalog.empty()
        self.safe_ts = 1_000_000 << 16
        self.rng = random.Random(seed)

    def _append(self, stmt: str) -> Catalog:
        self.safe_ts += 7 << 16
        self.latest = next_catalog(self.latest, parse_ddl(stmt), stmt, self.safe_ts, 500)
        return self.latest

    def ddl(self, stmt: str) -> dict:
        try:
            cat = self._append(stmt)
        except DdlInvalid as e:
            return {"type": "fail", "error": {"code": e.code, "message": e.message}}
        self._drive_indexes()
        return {
            "type": "ok",
            "value": {"catalog_version": cat.version, "activation_ts": cat.activation_ts},
        }

    def _drive_indexes(self) -> None:
        for table in list(self.latest.tables.values()):
            for index in table.indexes:
                state = NEXT_STATE.get(index.state)
                if state is not None and self.rng.random() < 0.5:
                    cmd = IndexState(index.name, state)
                    stmt = f"ALTER INDEX {index.name} " + (
                        "REMOVE" if state == "REMOVED" else f"SET STATE {state}"
                    )
                    self.safe_ts += 7 << 16
                    self.latest = next_catalog(self.latest, cmd, stmt, self.safe_ts, 500)

    def columns(self, table: str) -> list[dict] | None:
        t = self.latest.table(table)
        return None if t is None else [c.to_json() for c in t.columns]


def drive(
    gen: DdlDmlWorkload,
    oracle: CatalogOracle,
    requests: int,
    concurrency: int,
    info_share: float = 0.0,
) -> dict:
    """Run the generator against the oracle; returns what was issued and how it went."""
    rng = random.Random(5)
    seen: dict = {"ddl": Counter(), "ddl_fail": [], "txns": [], "probes": [], "implicit": 0}
    for i in range(requests):
        now = i * 0.002
        op = gen.next_op(i % concurrency, now)
        if not isinstance(op, Op):
            continue
        if op.f == "ddl":
            if info_share and rng.random() < info_share:
                if rng.random() < 0.5:  # unknown outcome: half of them did apply
                    oracle.ddl(op.value["stmt"])
                completion: dict[str, Any] = {
                    "type": "info",
                    "value": op.value,
                    "error": {"code": "TIMEOUT"},
                }
            else:
                completion = oracle.ddl(op.value["stmt"])
                if completion["type"] == "ok":
                    seen["ddl"][op.value["kind"]] += 1
                    completion["value"] = {**op.value, **completion["value"]}
                else:
                    seen["ddl_fail"].append((op.value["stmt"], completion["error"]["message"]))
            gen.observe(op, completion)
        elif op.f == "txn":
            seen["txns"].append((op, oracle.latest))
            seen["implicit"] += bool(op.value.get("implicit"))
            gen.observe(op, {"type": "ok", "value": op.value})
        elif op.f == "probe":
            seen["probes"].append(op)
            table = op.value["table"]
            value = {
                **op.value,
                "ts": op.value["ts"] or oracle.safe_ts,
                "catalog_version": oracle.latest.version,
                "columns": oracle.columns(table) if table else None,
            }
            gen.observe(op, {"type": "ok", "value": value})
    return seen


def test_ddl_stream_is_valid_and_covers_every_kind() -> None:
    concurrency = 8
    gen = build_generator("ddl-dml", 11, concurrency, {"ddl_interval_s": 0.02})
    assert isinstance(gen, DdlDmlWorkload)
    oracle = CatalogOracle(11)
    seen = drive(gen, oracle, 25_000, concurrency)
    assert seen["ddl_fail"] == []
    assert set(seen["ddl"]) == set(DDL_KINDS), f"missing {set(DDL_KINDS) - set(seen['ddl'])}"
    assert sum(seen["ddl"].values()) > 500
    # The model is the catalog: same tables, same column names and types.
    model = {t.name: [(c.name, c.type) for c in t.columns] for t in gen.model.tables.values()}
    truth = {n: [(c.name, c.type) for c in t.columns] for n, t in oracle.latest.tables.items()}
    assert model == truth


def test_rows_are_valid_for_the_schema_and_values_unique_per_write() -> None:
    concurrency = 6
    gen = build_generator("ddl-dml", 3, concurrency, {"ddl_interval_s": 0.05})
    assert isinstance(gen, DdlDmlWorkload)
    seen = drive(gen, CatalogOracle(3), 25_000, concurrency)
    ops_kinds: Counter[str] = Counter()
    multi_table = 0
    values_seen: dict[tuple[str, str], set] = {}
    for op, cat in seen["txns"]:
        tables = {m["table"] for m in op.value["ops"]}
        multi_table += len(tables) > 1
        for micro in op.value["ops"]:
            ops_kinds[micro["op"]] += 1
            table = cat.table(micro["table"])
            assert table is not None, micro
            assert isinstance(micro["key"], int)
            if micro["op"] == "w":
                assert set(micro["row"]) == {c.name for c in table.columns}
                for c in table.columns:
                    value = micro["row"][c.name]
                    assert value_problem(parse_type(c.type), value) is None, (c, value)
                    if value is not None and not c.type.startswith("BOOLEAN"):
                        key = (str(c.type), repr(value))
                        values_seen.setdefault(key, set()).add(id(micro))
            if micro["op"] == "ix":
                index = table.index(micro["index"])
                assert index is not None and len(index.columns) == 1
    assert set(ops_kinds) == {"r", "w", "d", "ix"}
    assert multi_table > 50 and seen["implicit"] > 50
    assert all(len(writes) == 1 for writes in values_seen.values()), "a value written twice"


def test_acknowledged_ddl_is_followed_by_probes_on_every_node_around_activation() -> None:
    concurrency = 8
    gen = build_generator("ddl-dml", 9, concurrency, {"ddl_interval_s": 0.5, "nodes": 5})
    assert isinstance(gen, DdlDmlWorkload)
    assert gen.roles == {"ddl": 1, "probe": 2, "dml": 5}
    oracle = CatalogOracle(9)
    ddl_op = None
    for i in range(100):
        op = gen.next_op(0, i * 0.01)
        if isinstance(op, Op):
            ddl_op = op
            break
    assert ddl_op is not None and ddl_op.value["kind"] == "create_table"
    completion = oracle.ddl(ddl_op.value["stmt"])
    completion["value"] = {**ddl_op.value, **completion["value"]}
    gen.observe(ddl_op, completion)
    activation = completion["value"]["activation_ts"]
    probes = [gen.next_op(1 + i % 2, 1.0) for i in range(30)]
    assert all(isinstance(p, Op) and p.f == "probe" for p in probes)
    now_probes = [p for p in probes[:5] if isinstance(p, Op)]
    assert [p.node_hint for p in now_probes] == [0, 1, 2, 3, 4]
    assert all(p.value == {"table": ddl_op.value["table"], "ts": None} for p in now_probes)
    explicit = {(p.value["ts"], p.node_hint) for p in probes[5:] if isinstance(p, Op)}
    expected_ts = {activation - MS, activation - 1, activation, activation + 1, activation + MS}
    assert explicit == {(ts, n) for ts in expected_ts for n in range(5)}


def test_unknown_ddl_outcomes_are_resynced_through_probes() -> None:
    concurrency = 8
    gen = build_generator("ddl-dml", 21, concurrency, {"ddl_interval_s": 0.01})
    assert isinstance(gen, DdlDmlWorkload)
    oracle = CatalogOracle(21)
    seen = drive(gen, oracle, 30_000, concurrency, info_share=0.2)
    # With a fifth of DDL outcomes unknown (half of them applied), the stream stays valid
    # except for the few DDL planned before a probe resynced the model.
    ok = sum(seen["ddl"].values())
    assert ok > 200
    assert len(seen["ddl_fail"]) <= ok * 0.1, seen["ddl_fail"][:5]
    resync_probes = [p for p in seen["probes"] if p.value["ts"] is None]
    assert resync_probes


def test_index_workload_only_changes_indexes_and_looks_them_up() -> None:
    concurrency = 6
    gen = build_generator("index", 4, concurrency, {})
    assert isinstance(gen, DdlDmlWorkload)
    seen = drive(gen, CatalogOracle(4), 30_000, concurrency)
    assert seen["ddl_fail"] == []
    assert set(seen["ddl"]) == {"create_table", "create_index", "drop_index"}
    assert seen["ddl"]["create_table"] == 1
    kinds = Counter(m["op"] for op, _ in seen["txns"] for m in op.value["ops"])
    assert kinds["ix"] > 500 and kinds["w"] > kinds["r"] and kinds["d"] > 500


def test_probes_at_now_only_when_no_offsets_are_wanted() -> None:
    concurrency = 6
    gen = build_generator("ddl-dml", 2, concurrency, {"probe_offsets": [], "ddl_interval_s": 0.05})
    assert isinstance(gen, DdlDmlWorkload)
    seen = drive(gen, CatalogOracle(2), 20_000, concurrency)
    assert seen["probes"] and all(p.value["ts"] is None for p in seen["probes"])
