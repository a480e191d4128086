"""A model of a correct cluster for synthetic histories, with one injectable fault per anomaly
class (the scripted run that drives it is synthetic.generate and synthetic.tail).

The model follows system.md: catalog versions activate DD after their Meta Storage time, a DDL is
acknowledged once the clock passed activation + CSmax, txns take I at enlist, fail an op whose
table version moved (option 3), and fail a commit across a change that is not forward compatible
by the model's own construction (`COMPATIBLE`: it knows what each DDL it makes is, so it borrows
neither the system's rules nor the checker's, which would make the test circular). A scripted
tail after the random workload sets up every class's near-miss (a txn begun before a DDL ack,
probes just before and after an activation, ...) and is where a requested fault is injected, so a
correct history must pass and a faulty one must fail.

A read returns what a snapshot read at its op_ts sees: the txn's own last write of the key, else
the latest write committed before op_ts among the txns simulated so far (txns are simulated whole,
in begin order: a txn begun later that commits before op_ts is not seen), upgraded by column id
to the txn's schema (which is the schema at op_ts: the op fails otherwise). Such a row always
conforms: upgrade() yields exactly the schema's columns (no dropped one; a missing one as its
default); types only widen (INT32 -> INT64) and values are small; a column a stored row lacks (added
later, or not in a row made just before a rename) is a nullable added one, and c2, the one NOT NULL
column, is in every write (it is never dropped or renamed). tests/test_synth_stream.py checks it.

Generation streams: events are emitted out of time order (a DDL's ack ahead of its invoke, a txn's
completion at its end), so the model buffers them in a heap and writes those below a floor that no
later event can precede (`ClusterModel.settle`), keeping memory flat at 10^7 events.
"""

from __future__ import annotations

import bisect
import copy
import heapq
import io
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from checker.anomaly_classes import ANOMALY_CLASSES

# every class but replica-divergence, which needs copies per node that the model does not keep
FAULTS = tuple(c for c in ANOMALY_CLASSES if c != "replica-divergence")
# A mixed commit reports a participant version that is not tsv, which is also an AP violation.
IMPLIED = {"mixed-schema-commit": {"ap-violation"}}

MS = 1_000_000  # ns
NODES = ("n1", "n2", "n3")
PARTITIONS = 4
DD_MS = 500
CSMAX_MS = 500
START_WALL_MS = 1_700_000_000_000
WRITE_CHUNK = 10_000  # history lines per file write
RENAME_COLUMN_COMPATIBLE = True  # run.json's config, and so the judgment of a rename below

# Forward compatibility (seed 001) of each kind of DDL the model makes, in the one form it makes
# it: a created table no txn enlisted before; index changes; an added column that is nullable;
# INT32 -> INT64; a renamed column (as run.json says); a dropped column; a new default.
COMPATIBLE = {
    "create_table": True,
    "create_index": True,
    "index_state": True,
    "add_column": True,
    "alter_type": True,
    "rename_column": RENAME_COLUMN_COMPATIBLE,
    "drop_column": False,
    "set_default": False,
}


def expected_classes(fault: str | None) -> set[str]:
    """The classes the checker must report for a history with `fault` injected."""
    if fault is None:
        return set()
    return {fault} | IMPLIED.get(fault, set())


@dataclass
class _Txn:
    process: int
    node: str
    t: int
    ops: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    writes: list[tuple[int, int, dict[int, Any] | None]] = field(default_factory=list)
    touched: set[tuple[str, int]] = field(default_factory=set)


Writes = list[tuple[int, int, dict[int, Any] | None]]
# A committed write of one key as (commit_ts, seq, values by column id or None for a delete).
Version = tuple[int, int, dict[int, Any] | None]


def _order(v: Version) -> tuple[int, int]:
    return v[0], v[1]


def _commit_ts(v: Version) -> int:
    return v[0]


class ClusterModel:
    """A correct cluster as a pure simulation; events are recorded with controller time.

    Events go to `history` in (time, emission order), catalog versions to `catalog`, as `settle`
    and `close` release them (both default to in-memory buffers, for tests of the model alone).
    """

    def __init__(
        self, seed: int, history: TextIO | None = None, catalog: TextIO | None = None
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.history_out = history if history is not None else io.StringIO()
        self.catalog_out = catalog if catalog is not None else io.StringIO()
        # Emitted, not yet written events as a heap of (time, seq, event): seq breaks time ties in
        # emission order, as the former sort of all events did.
        self.buffer: list[tuple[int, int, dict[str, Any]]] = []
        self.seq = 0  # events emitted
        self.written = 0  # events written; the next one's index
        self.lines: list[str] = []  # written events not yet passed to history_out
        self.floor = 0  # no event may be emitted before this time any more (emit checks)
        self.last_event: dict[str, Any] = {}
        # Catalog versions from evicted + 1 on; older ones are in catalog_out already. `acts`
        # (every version's activation) stays whole: it is small and indexed by version.
        self.evicted = 0
        self.catalog: list[dict[str, Any]] = [
            {
                "catalog_version": 1,
                "activation_ts": 0,
                "safe_ts": 0,
                "delay_ms": DD_MS,
                "ddl": "",
                "tables": {},
            }
        ]
        self.acts = [0]
        # table id -> versions of incompatible steps, ascending (searched by bisect in commit)
        self.incompat: dict[int, list[int]] = {}
        self.store: dict[tuple[int, int], dict[int, Any]] = {}
        self.next_process = 0
        self.next_table_id = 1
        self.next_column_id = 1
        self.txn_counter = 0
        self.last_ack_t = 0
        # Committed writes not yet in `store` (it changes only at flush()): a heap by
        # (commit_ts, seq), and `settled`, the net effect per key of those that can no longer be
        # preceded by a later commit, so memory stays bounded by the key space. `pending_keys`
        # indexes the pending heap by key, each key's versions in (commit_ts, seq) order, so a
        # read finds what it sees without a scan (`visible`).
        self.pending: list[tuple[int, int, Writes]] = []
        self.pending_keys: dict[tuple[int, int], list[Version]] = {}
        self.settled: dict[tuple[int, int], dict[int, Any] | None] = {}

    # -- clock and catalog ----------------------------------------------------------------------
    @staticmethod
    def ts(t_ns: int) -> int:
        wall_ns = START_WALL_MS * MS + t_ns
        return ((wall_ns // MS) << 16) | ((wall_ns % MS) * 65535 // MS)

    @staticmethod
    def time_of(ts: int) -> int:
        return ((ts >> 16) - START_WALL_MS) * MS + ((ts & 0xFFFF) * MS + 65534) // 65535

    def cat_at(self, ts: int) -> dict[str, Any]:
        return self.version(bisect.bisect_right(self.acts, ts))

    def version(self, v: int) -> dict[str, Any]:
        """Catalog version v; it must not have been evicted by settle()."""
        if v <= self.evicted:
            raise LookupError(f"catalog version {v} was evicted; only {self.evicted + 1}+ remain")
        return self.catalog[v - 1 - self.evicted]

    def latest(self) -> dict[str, Any]:
        return self.catalog[-1]

    def process(self) -> int:
        self.next_process += 1
        return self.next_process - 1

    def emit(self, t: int, event: dict[str, Any]) -> None:
        if t < self.floor:
            raise AssertionError(f"event at {t} below the written floor {self.floor}: {event}")
        heapq.heappush(self.buffer, (t, self.seq, event))
        self.seq += 1
        self.last_event = event

    def settle(self, floor: int) -> None:
        """Release what nothing emitted from `floor` on can change (the caller guarantees nothing
        is emitted earlier; emit checks): events before it are written in (time, seq) order,
        commits before it settle (a later commit_ts sorts after them), and catalog versions older
        than the one before the version active at `floor` are written and dropped (a probe may
        read at an activation - 1, in the version before)."""
        self.floor = max(self.floor, floor)
        self._write_events(self.floor)
        self._settle_commits(self.ts(self.floor))
        oldest_needed = bisect.bisect_right(self.acts, self.ts(self.floor)) - 1
        if oldest_needed - 1 > self.evicted:
            self._write_catalog(oldest_needed - 1 - self.evicted)

    def close(self) -> None:
        """Write every buffered event and catalog version; nothing may be emitted after it."""
        self._write_events(None)
        self.history_out.write("".join(self.lines))
        self.lines.clear()
        self._write_catalog(len(self.catalog))
        self.floor = 1 << 63  # a later event would be lost: make emit refuse it

    def _write_events(self, below: int | None) -> None:
        while self.buffer and (below is None or self.buffer[0][0] < below):
            t, _, ev = heapq.heappop(self.buffer)
            self.lines.append(
                json.dumps({"index": self.written, "time": t, **ev}, separators=(",", ":")) + "\n"
            )
            self.written += 1
            if len(self.lines) >= WRITE_CHUNK:
                self.history_out.write("".join(self.lines))
                self.lines.clear()

    def _write_catalog(self, n: int) -> None:
        for line in self.catalog[:n]:
            self.catalog_out.write(json.dumps(line, separators=(",", ":")) + "\n")
        del self.catalog[:n]
        self.evicted += n

    def add_version(
        self, t: int, ddl: str, tables: dict[str, Any], kind: str, table: str
    ) -> dict[str, Any]:
        """Append catalog version v+1 made at controller time t by a DDL of `kind` on `table`;
        activation = Tm + DD."""
        tm = self.ts(t)
        act = max(tm + (DD_MS << 16), self.acts[-1] + 1)
        prev = self.latest()
        line = {
            "catalog_version": prev["catalog_version"] + 1,
            "activation_ts": act,
            "safe_ts": tm,
            "delay_ms": DD_MS,
            "ddl": ddl,
            "tables": tables,
        }
        if not COMPATIBLE[kind]:
            tid = prev["tables"][table]["id"]
            self.incompat.setdefault(tid, []).append(line["catalog_version"])
        self.catalog.append(line)
        self.acts.append(act)
        return line

    def ddl(
        self, t: int, stmt: str, table: str, kind: str, tables: dict[str, Any], node: str = "n1"
    ) -> tuple[dict[str, Any], int, dict[str, Any]]:
        """Invoke at t, version made at t + 1 ms, ack once HLC > ceil(activation + CSmax).

        Returns the version, the ack's time and the ack event (a fault may still edit it)."""
        p = self.process()
        self.emit(
            t,
            {
                "type": "invoke",
                "process": p,
                "f": "ddl",
                "value": {"stmt": stmt, "table": table, "kind": kind},
            },
        )
        line = self.add_version(t + MS, stmt, tables, kind, table)
        ack_t = self.time_of(line["activation_ts"] + (CSMAX_MS << 16)) + 2 * MS
        event = {
            "type": "ok",
            "process": p,
            "f": "ddl",
            "node": node,
            "value": {
                "stmt": stmt,
                "table": table,
                "kind": kind,
                "catalog_version": line["catalog_version"],
                "activation_ts": line["activation_ts"],
            },
        }
        self.emit(ack_t, event)
        self.last_ack_t = max(self.last_ack_t, ack_t)
        return line, ack_t, event

    def refused_ddl(
        self, t: int, stmt: str, table: str, kind: str, code: str, node: str = "n1"
    ) -> None:
        """A DDL invoked at t and refused 1 ms later with `code` (it made no version)."""
        p = self.process()
        value = {"stmt": stmt, "table": table, "kind": kind}
        self.emit(t, {"type": "invoke", "process": p, "f": "ddl", "value": value})
        error = {"code": code, "message": f"{stmt}: refused", "retriable": False}
        self.emit(
            t + MS,
            {
                "type": "fail",
                "process": p,
                "f": "ddl",
                "node": node,
                "value": value,
                "error": error,
            },
        )

    def tables_copy(self) -> dict[str, Any]:
        return copy.deepcopy(self.latest()["tables"])

    def column(self, name: str, type_: str, nullable: bool = True, default: Any = None) -> dict:
        self.next_column_id += 1
        return {
            "id": self.next_column_id - 1,
            "name": name,
            "type": type_,
            "nullable": nullable,
            "default": default,
        }

    def bump(self, tables: dict[str, Any], name: str) -> dict[str, Any]:
        tables[name]["schema_version"] += 1
        return tables[name]

    # -- values ---------------------------------------------------------------------------------
    def value(self, type_: str) -> Any:
        r = self.rng
        if type_ in ("INT32", "INT64"):
            return r.randint(-1000, 1000)
        if type_.startswith("VARCHAR"):
            return "v" + str(r.randint(0, 99999))
        if type_.startswith("DECIMAL"):
            return f"{r.randint(0, 9999)}.{r.randint(0, 99):02d}"
        if type_ == "BOOLEAN":
            return r.random() < 0.5
        return r.randint(0, 10**12)

    def row_for(self, table: dict[str, Any]) -> dict[str, Any]:
        return {c["name"]: self.value(c["type"]) for c in table["columns"]}

    @staticmethod
    def upgrade(stored: dict[int, Any], table: dict[str, Any]) -> dict[str, Any]:
        return {c["name"]: stored.get(c["id"], c.get("default")) for c in table["columns"]}

    @staticmethod
    def partition(key: int) -> int:
        import zlib

        return zlib.crc32(key.to_bytes(8, "big", signed=True)) % PARTITIONS

    @staticmethod
    def primary(table_id: int, partition: int) -> str:
        return NODES[(table_id + partition) % len(NODES)]

    # -- transactions -----------------------------------------------------------------------------
    def begin(
        self, t: int, node: str, process: int | None = None, ops: Iterable[dict] = ()
    ) -> _Txn:
        p = self.process() if process is None else process
        self.txn_counter += 1
        txn = _Txn(p, node, t)
        self.emit(
            t,
            {"type": "invoke", "process": p, "f": "txn", "value": {"ops": [dict(o) for o in ops]}},
        )
        return txn

    def op(
        self,
        txn: _Txn,
        t: int,
        op: str,
        table: str,
        key: int,
        row: dict[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Run one micro-op at controller time t; False if it failed (the txn is then over)."""
        op_ts = self.ts(t)
        cat = self.cat_at(op_ts)
        if table not in txn.tables:
            tbl = cat["tables"].get(table)
            if tbl is None:
                self.finish(txn, t, "fail", error=("TABLE_NOT_FOUND", f"no table {table}"))
                return False
            txn.tables[table] = {"base_ts": op_ts, "schema_version": tbl["schema_version"]}
            txn.ids[table] = tbl["id"]
        now_tbl = cat["tables"].get(table)
        rec: dict[str, Any] = {
            "op": op,
            "table": table,
            "key": key,
            "op_ts": op_ts,
            "node": self.primary(txn.ids[table], self.partition(key)),
            "schema_version": None if now_tbl is None else now_tbl["schema_version"],
        }
        if row is not None:
            rec["row"] = row
        if now_tbl is None or now_tbl["id"] != txn.ids[table]:
            rec["result"] = None
            txn.ops.append(rec)
            self.finish(txn, t, "fail", error=("TABLE_DROPPED", f"{table} was dropped"))
            return False
        if now_tbl["schema_version"] != txn.tables[table]["schema_version"] and not force:
            rec["result"] = None
            txn.ops.append(rec)
            self.finish(txn, t, "fail", error=("INCOMPATIBLE_SCHEMA", f"{table} changed"))
            return False
        i_tbl = self.table_version(txn.ids[table], txn.tables[table]["base_ts"])
        if op == "r":
            stored = self.visible(txn, txn.ids[table], key, op_ts)
            rec["result"] = None if stored is None else self.upgrade(stored, i_tbl)
        elif op == "w":
            assert row is not None
            by_id = {c["id"]: row[c["name"]] for c in i_tbl["columns"] if c["name"] in row}
            txn.writes.append((txn.ids[table], key, by_id))
            rec["result"] = None
        elif op == "d":
            txn.writes.append((txn.ids[table], key, None))
            rec["result"] = None
        txn.touched.add((table, self.partition(key)))
        txn.ops.append(rec)
        return True

    def visible(self, txn: _Txn, table_id: int, key: int, op_ts: int) -> dict[int, Any] | None:
        """The stored row (by column id, None if absent) a read of `txn` at op_ts sees: its own
        last write of the key, else the last write committed before op_ts."""
        k = (table_id, key)
        for tid, wkey, by_id in reversed(txn.writes):
            if (tid, wkey) == k:
                return by_id
        # settled and store hold only commits before ts(floor): all visible at op_ts from there.
        if op_ts < self.ts(self.floor):
            raise AssertionError(f"read at {op_ts} below the settled floor {self.ts(self.floor)}")
        versions = self.pending_keys.get(k)
        if versions:
            i = bisect.bisect_left(versions, op_ts, key=_commit_ts)
            if i:
                return versions[i - 1][2]
        if k in self.settled:
            return self.settled[k]
        return self.store.get(k)

    def table_version(self, table_id: int, ts: int) -> dict[str, Any]:
        cat = self.cat_at(ts)
        return next(t for t in cat["tables"].values() if t["id"] == table_id)

    def commit(self, txn: _Txn, t: int, force: bool = False, outcome: str = "ok") -> bool:
        commit_ts = self.ts(t)
        cat = self.cat_at(commit_ts)
        ok = True
        for name, info in txn.tables.items():
            tid = txn.ids[name]
            if not any(x["id"] == tid for x in cat["tables"].values()):
                ok = False
            base_v = self.cat_at(info["base_ts"])["catalog_version"]
            # Is an incompatible step in (base_v, commit version]? A scan grew with the run.
            steps = self.incompat.get(tid, [])
            i = bisect.bisect_right(steps, base_v)
            if i < len(steps) and steps[i] <= cat["catalog_version"]:
                ok = False
        participants = []
        for name, part in sorted(txn.touched):
            tbl = cat["tables"].get(name)
            participants.append(
                {
                    "node": self.primary(txn.ids[name], part),
                    "table": name,
                    "partition": part,
                    "commit_schema_version": None if tbl is None else tbl["schema_version"],
                }
            )
        if not ok and not force:
            self.finish(
                txn,
                t,
                "fail",
                commit_ts=commit_ts,
                participants=participants,
                error=("INCOMPATIBLE_SCHEMA", "a change since base_ts is not forward compatible"),
            )
            return False
        if outcome == "ok" or self.rng.random() < 0.5:
            # Applied in commit order by flush(): txns are simulated in start order.
            heapq.heappush(self.pending, (commit_ts, self.seq, txn.writes))
            net = {(tid, key): by_id for tid, key, by_id in txn.writes}
            for k, by_id in net.items():
                versions = self.pending_keys.setdefault(k, [])
                bisect.insort(versions, (commit_ts, self.seq, by_id), key=_order)
        err = None if outcome == "ok" else ("TIMEOUT", "commit reply lost")
        self.finish(txn, t, outcome, commit_ts=commit_ts, participants=participants, error=err)
        return True

    def finish(
        self,
        txn: _Txn,
        t: int,
        typ: str,
        commit_ts: int | None = None,
        participants: list | None = None,
        error: tuple[str, str] | None = None,
    ) -> None:
        value = {
            "txn_id": f"{self.seed:x}-{self.txn_counter:x}",
            "begin_ts": self.ts(txn.t),
            "commit_ts": commit_ts,
            "ops": txn.ops,
            "tables": txn.tables,
            "participants": participants or [],
        }
        ev: dict[str, Any] = {
            "type": typ,
            "process": txn.process,
            "f": "txn",
            "node": txn.node,
            "value": value,
        }
        if error is not None:
            ev["error"] = {
                "code": error[0],
                "message": error[1],
                "retriable": error[0] != "TABLE_DROPPED",
            }
        self.emit(t, ev)
        txn.t = -1

    def probe(
        self,
        t: int,
        node: str,
        table: str | None,
        ts: int | None = None,
        answer: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        p = self.process()
        self.emit(
            t, {"type": "invoke", "process": p, "f": "probe", "value": {"table": table, "ts": ts}}
        )
        at = ts if ts is not None else self.ts(t + MS)
        cat = self.cat_at(at)
        tbl = cat["tables"].get(table) if table else None
        value = {
            "ts": at,
            "catalog_version": cat["catalog_version"],
            "table_schema_version": None if tbl is None else tbl["schema_version"],
            "columns": None if tbl is None else tbl["columns"],
        }
        if answer:
            value.update(answer)
        self.emit(
            t + 2 * MS, {"type": "ok", "process": p, "f": "probe", "node": node, "value": value}
        )
        return value

    def flush(self) -> None:
        """Apply committed writes to the store in commit_ts order."""
        self._settle_commits(None)
        # Each write replaces or deletes its whole key, so the net effect per key is the same as
        # replaying them (and nothing depends on the store's iteration order).
        for k, by_id in self.settled.items():
            if by_id is None:
                self.store.pop(k, None)
            else:
                self.store[k] = dict(by_id)
        self.settled.clear()

    def _settle_commits(self, below_ts: int | None) -> None:
        """Fold pending commits with commit_ts < below_ts (all if None), in order, into settled."""
        while self.pending and (below_ts is None or self.pending[0][0] < below_ts):
            commit_ts, seq, writes = heapq.heappop(self.pending)
            for tid, key, by_id in writes:
                self.settled[(tid, key)] = by_id
            # The heap pops in (commit_ts, seq) order, so this commit is first of each of its keys.
            for k in {(tid, key) for tid, key, _ in writes}:
                versions = self.pending_keys[k]
                if _order(versions[0]) != (commit_ts, seq):
                    raise AssertionError(f"pending versions of {k} out of order: {versions[0]}")
                if len(versions) == 1:
                    del self.pending_keys[k]
                else:
                    del versions[0]

    # -- output -----------------------------------------------------------------------------------
    def final_reads(self, t: int, drop_entry: bool = False, orphan_entry: bool = False) -> int:
        self.flush()
        ts = self.ts(t)
        cat = self.cat_at(ts)
        for name, tbl in sorted(cat["tables"].items()):
            rows = sorted(
                (k, self.upgrade(v, tbl)) for (tid, k), v in self.store.items() if tid == tbl["id"]
            )
            p = self.process()
            self.emit(
                t, {"type": "invoke", "process": p, "f": "final-read", "value": {"table": name}}
            )
            self.emit(
                t + MS,
                {
                    "type": "ok",
                    "process": p,
                    "f": "final-read",
                    "node": "n1",
                    "value": {
                        "table": name,
                        "ts": ts,
                        "schema_version": tbl["schema_version"],
                        "rows": [{"key": k, "row": r} for k, r in rows],
                    },
                },
            )
            t += 2 * MS
            for idx in tbl.get("indexes", []):
                if idx["state"] != "AVAILABLE":
                    continue
                entries = [
                    {"key": k, "values": {c: r.get(c) for c in idx["columns"]}} for k, r in rows
                ]
                if drop_entry and entries:
                    entries = entries[1:]
                if orphan_entry:
                    entries.append({"key": 999_999_999, "values": {c: 1 for c in idx["columns"]}})
                p = self.process()
                self.emit(
                    t,
                    {
                        "type": "invoke",
                        "process": p,
                        "f": "final-read",
                        "value": {"table": name, "index": idx["name"]},
                    },
                )
                self.emit(
                    t + MS,
                    {
                        "type": "ok",
                        "process": p,
                        "f": "final-read",
                        "node": "n2",
                        "value": {
                            "table": name,
                            "index": idx["name"],
                            "ts": ts,
                            "entries": entries,
                        },
                    },
                )
                t += 2 * MS
        return t
