"""The transaction coordinator: the node a client talks to runs its transactions.

begin_ts = hlc.now(); a table is enlisted at its first touch (base_ts = enlist ts, or begin_ts
with ``base_ts = "begin"``) and its version I there is cached per (txn, table); every op must
carry I as client_schema_version (else SCHEMA_VERSION_MISMATCH with the expected version) and is
sent to the primary of its key's partition. Commit takes commit_ts > every op_ts, waits for
metadata completeness, validates existence and step-by-step forward compatibility I -> C, and
runs two-phase commit, recording the decision durably before any participant hears it, so
participants in doubt after a crash can always ask (presumed abort).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemasync import errors
from schemasync.compat import first_incompatible
from schemasync.disk import LOCAL_DISK, Disk
from schemasync.errors import SchemaSyncError
from schemasync.partitioning import partition_of, primary_of
from schemasync.runtime import monotonic
from schemasync.storage import WriteAheadLog
from schemasync.toggles import NO_COMMIT_VALIDATION
from schemasync.txn_primary import completed_catalog, fail

if TYPE_CHECKING:
    from schemasync.context import NodeContext

log = logging.getLogger(__name__)

PEER_TIMEOUT_S = 5.0
DECIDE_TIMEOUT_S = 2.0
IDLE_TXN_TIMEOUT_S = 30.0
IMPLICIT_ATTEMPTS = 5

PeerCall = Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Enlistment:
    """A table as one txn sees it: resolved once, at base_ts, to an id and a version I."""

    name: str
    table_id: int
    base_ts: int
    version: int


@dataclass
class CoordTxn:
    txn_id: str
    begin_ts: int
    coordinator: str
    tables: dict[str, Enlistment] = field(default_factory=dict)
    parts: dict[tuple[int, int], str] = field(default_factory=dict)  # (table_id, p) -> primary
    part_tables: dict[tuple[int, int], str] = field(default_factory=dict)  # -> table name
    node_epochs: dict[str, str] = field(default_factory=dict)  # primary -> its incarnation
    ops: list[dict[str, Any]] = field(default_factory=list)
    max_op_ts: int = 0
    state: str = "active"  # active | committing | committed | aborted
    commit_ts: int | None = None
    participants: list[dict[str, Any]] = field(default_factory=list)
    last_active: float = field(default_factory=monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def value(self) -> dict[str, Any]:
        """The txn completion value of history.md (partial while not committed)."""
        return {
            "coordinator": self.coordinator,
            "txn_id": self.txn_id,
            "begin_ts": self.begin_ts,
            "commit_ts": self.commit_ts,
            "ops": list(self.ops),
            "tables": {
                name: {"base_ts": e.base_ts, "schema_version": e.version}
                for name, e in self.tables.items()
            },
            "participants": list(self.participants),
        }


class DecisionLog:
    """Durable commit/abort decisions of the txns this node coordinated (fsync'd)."""

    def __init__(self, directory: Path, disk: Disk = LOCAL_DISK) -> None:
        disk.mkdir(directory)
        path = directory / "decisions.wal"
        records, _ = WriteAheadLog.cut_torn_tail(path, disk)
        self.decisions: dict[str, int | None] = {}
        for r in records:
            self.decisions[r["txn"]] = r.get("cts")
        self._wal = WriteAheadLog(path, disk)

    async def record(self, txn_id: str, commit_ts: int | None) -> None:
        self._wal.append({"txn": txn_id, "cts": commit_ts})
        await self._wal.sync()
        self.decisions[txn_id] = commit_ts

    def close(self) -> None:
        self._wal.close()


class TxnCoordinator:
    """Client-facing transaction handlers of one node."""

    def __init__(self, ctx: NodeContext, call: PeerCall) -> None:
        self.ctx = ctx
        self.call = call
        self.nodes = sorted(ctx.config.nodes)
        self.partitions = ctx.config.partitions
        self.decisions = DecisionLog(ctx.data_dir / "txn", ctx.runtime.disk)
        self._txns: dict[str, CoordTxn] = {}
        self._boot = ctx.hlc.wall_ms()
        self._seq = itertools.count(1)
        self.counters: dict[str, int] = {}

    # -- helpers -------------------------------------------------------------------------
    def _count(self, what: str) -> None:
        self.counters[what] = self.counters.get(what, 0) + 1

    def primary(self, table_id: int, partition: int) -> str:
        recorded = self.ctx.metastore.get_local(f"primary/{table_id}/{partition}")
        return (
            recorded if isinstance(recorded, str) else primary_of(table_id, partition, self.nodes)
        )

    def _txn(self, body: dict[str, Any]) -> CoordTxn:
        txn_id = body.get("txn_id")
        txn = self._txns.get(str(txn_id))
        if txn is None:
            raise fail(errors.TXN_ABORTED, f"txn {txn_id} is not active on {self.ctx.name}")
        if txn.state != "active":
            raise fail(errors.TXN_ABORTED, f"txn {txn_id} is {txn.state}")
        txn.last_active = monotonic()
        return txn

    def new_txn(self) -> CoordTxn:
        txn_id = f"{self.ctx.name}-{self._boot}-{next(self._seq)}"
        txn = CoordTxn(txn_id, self.ctx.hlc.now(), self.ctx.name)
        self._txns[txn_id] = txn
        return txn

    def oldest_active_begin_ts(self) -> int | None:
        begins = [t.begin_ts for t in self._txns.values() if t.state in ("active", "committing")]
        return min(begins) if begins else None

    # -- begin / op ----------------------------------------------------------------------
    async def handle_begin(self, body: dict[str, Any]) -> dict[str, Any]:
        txn = self.new_txn()
        return {"txn_id": txn.txn_id, "begin_ts": txn.begin_ts, "node": self.ctx.name}

    async def _enlist(self, txn: CoordTxn, name: str) -> Enlistment:
        known = txn.tables.get(name)
        if known is not None:
            return known
        catalogs = self.ctx.catalogs
        if self.ctx.config.base_ts == "begin":
            # Ignite's simplification: base_ts = max(begin_ts, table creation).
            base_ts = txn.begin_ts
            cat = await completed_catalog(self.ctx, base_ts, "enlist")
            table = cat.table(name)
            if table is None:
                now = self.ctx.hlc.now()
                later = await completed_catalog(self.ctx, now, "enlist")
                table = later.table(name)
                if table is None:
                    raise fail(errors.TABLE_NOT_FOUND, f"no table {name}", False)
                for v in range(cat.version + 1, later.version + 1):
                    created = catalogs.at_version(v)
                    if created.table_by_id(table.id) is not None:
                        base_ts = created.activation_ts
                        table = created.table_by_id(table.id)
                        break
                assert table is not None
        else:
            base_ts = self.ctx.hlc.now()
            cat = await completed_catalog(self.ctx, base_ts, "enlist")
            table = cat.table(name)
            if table is None:
                raise fail(errors.TABLE_NOT_FOUND, f"no table {name} at {base_ts}", False)
        enlistment = Enlistment(name, table.id, base_ts, table.schema_version)
        txn.tables[name] = enlistment
        return enlistment

    async def handle_op(self, body: dict[str, Any]) -> dict[str, Any]:
        txn = self._txn(body)
        async with txn.lock:
            if txn.state != "active":
                raise fail(errors.TXN_ABORTED, f"txn {txn.txn_id} is {txn.state}")
            return await self._op(txn, body.get("op"), body.get("client_schema_version"))

    async def _op(self, txn: CoordTxn, op: Any, client_version: Any) -> dict[str, Any]:
        if not isinstance(op, dict) or not isinstance(op.get("table"), str):
            raise errors.invalid_request("op needs {op, table, key, ...}")
        entry: dict[str, Any] = {
            k: op[k] for k in ("op", "table", "key", "row", "index", "lookup") if k in op
        }
        try:
            enlisted = await self._enlist(txn, op["table"])
        except SchemaSyncError as e:
            await self._abort(txn, e, entry)
            raise
        if client_version != enlisted.version:
            self._count("schema_version_mismatch")
            raise fail(
                errors.SCHEMA_VERSION_MISMATCH,
                f"table {enlisted.name}: client schema version {client_version},"
                f" the txn uses {enlisted.version}",
                True,
                expected_version=enlisted.version,
                table=enlisted.name,
            )
        try:
            if op.get("op") == "ix":
                partitions = list(range(self.partitions))
            else:
                key = op.get("key")
                if not isinstance(key, int) or isinstance(key, bool):
                    raise errors.invalid_request(f"key must be an integer, got {key!r}")
                partitions = [partition_of(key, self.partitions)]
            replies = []
            for p in partitions:
                part = (enlisted.table_id, p)
                node = self.primary(*part)
                txn.parts[part] = node
                txn.part_tables[part] = enlisted.name
                reply = await self.call(
                    node,
                    "txnp.op",
                    {
                        "txn_id": txn.txn_id,
                        "coordinator": self.ctx.name,
                        "begin_ts": txn.begin_ts,
                        "table": enlisted.name,
                        "table_id": enlisted.table_id,
                        "partition": p,
                        "version": enlisted.version,
                        "base_ts": enlisted.base_ts,
                        "op": op,
                    },
                    PEER_TIMEOUT_S,
                )
                epoch = str(reply.get("epoch"))
                if txn.node_epochs.setdefault(node, epoch) != epoch:
                    raise fail(
                        errors.TXN_ABORTED,
                        f"primary {node} restarted during the txn: its earlier ops are lost",
                        True,
                    )
                replies.append(reply)
        except SchemaSyncError as e:
            for k in ("op_ts", "node", "schema_version"):
                if k in e.data:
                    entry[k] = e.data[k]
            await self._abort(txn, e, entry)
            e.data["definite"] = True  # nothing was prepared: the txn is aborted everywhere
            raise
        last = max(replies, key=lambda r: int(r["op_ts"]))
        result: Any = last["result"]
        if op.get("op") == "ix":
            result = sorted({k for r in replies for k in r["result"]})
        entry.update(
            op_ts=int(last["op_ts"]),
            node=last["node"],
            schema_version=last["schema_version"],
            result=result,
        )
        txn.max_op_ts = max(txn.max_op_ts, *(int(r["op_ts"]) for r in replies))
        txn.ops.append(entry)
        return {
            "op_ts": entry["op_ts"],
            "node": entry["node"],
            "schema_version": entry["schema_version"],
            "result": result,
            "table": {"base_ts": enlisted.base_ts, "schema_version": enlisted.version},
        }

    async def _abort(
        self, txn: CoordTxn, cause: SchemaSyncError, failed_op: dict[str, Any] | None = None
    ) -> None:
        """End the txn aborted everywhere (best effort; primaries also ask on their own)."""
        if failed_op is not None:
            txn.ops.append({**failed_op, "error": cause.code})
        if txn.state in ("committed", "aborted"):
            return
        txn.state = "aborted"
        self._count(f"abort:{cause.code}")
        await self._tell_all(txn, {"txn_id": txn.txn_id, "commit": False})
        self._txns.pop(txn.txn_id, None)
        cause.data["value"] = txn.value()

    async def _tell_all(self, txn: CoordTxn, body: dict[str, Any]) -> None:
        nodes = sorted(set(txn.parts.values()))

        async def tell(node: str) -> None:
            try:
                await self.call(node, "txnp.decide", body, DECIDE_TIMEOUT_S)
            except SchemaSyncError as e:
                log.info("txn %s: %s did not hear the decision: %s", txn.txn_id, node, e.message)

        async with asyncio.TaskGroup() as tg:
            for node in nodes:
                tg.create_task(tell(node))

    # -- commit / rollback ---------------------------------------------------------------
    async def handle_commit(self, body: dict[str, Any]) -> dict[str, Any]:
        txn = self._txn(body)
        async with txn.lock:
            if txn.state != "active":
                raise fail(errors.TXN_ABORTED, f"txn {txn.txn_id} is {txn.state}")
            return await self._commit(txn)

    async def handle_rollback(self, body: dict[str, Any]) -> dict[str, Any]:
        txn = self._txns.get(str(body.get("txn_id")))
        if txn is None:
            return {}
        async with txn.lock:
            if txn.state == "active":
                await self._abort(txn, fail(errors.TXN_ABORTED, "rolled back by the client"))
        return {}

    async def _commit(self, txn: CoordTxn) -> dict[str, Any]:
        txn.state = "committing"
        single_phase = len(txn.parts) == 1
        try:
            self.ctx.hlc.update(txn.max_op_ts)
            commit_ts = self.ctx.hlc.now()
            txn.commit_ts = commit_ts
            cat_c = await completed_catalog(self.ctx, commit_ts, "commit")
            if NO_COMMIT_VALIDATION not in self.ctx.toggles:
                for enlisted in txn.tables.values():
                    self._validate(enlisted, cat_c.version, commit_ts)
            by_node: dict[str, list[dict[str, Any]]] = {}
            for (table_id, p), node in sorted(txn.parts.items()):
                enlisted = txn.tables[txn.part_tables[(table_id, p)]]
                by_node.setdefault(node, []).append(
                    {
                        "table_id": table_id,
                        "partition": p,
                        "version": enlisted.version,
                        "base_ts": enlisted.base_ts,
                        "epoch": txn.node_epochs.get(node),
                    }
                )
            single = len(txn.parts) == 1
            replies = await self._prepare_all(txn, commit_ts, by_node, single)
        except SchemaSyncError as e:
            txn.state = "active"  # so that _abort runs fully
            txn.commit_ts = None
            await self._abort(txn, e)
            # Presumed abort makes every failure before the decision definite, except a lost
            # reply of the one-phase commit: that participant may have committed.
            e.data["definite"] = not (
                single_phase and e.code in (errors.TIMEOUT, errors.UNAVAILABLE)
            )
            raise
        if not single and txn.parts:
            # The decision is durable before any participant hears it.
            await self.decisions.record(txn.txn_id, commit_ts)
            await self._tell_all(
                txn, {"txn_id": txn.txn_id, "commit": True, "commit_ts": commit_ts}
            )
        txn.state = "committed"
        self._count("committed")
        for node, reply in replies.items():
            for part in reply["parts"]:
                key = (int(part["table_id"]), int(part["partition"]))
                txn.participants.append(
                    {
                        "node": node,
                        "table": txn.part_tables[key],
                        "partition": key[1],
                        "commit_schema_version": part["commit_schema_version"],
                    }
                )
        txn.participants.sort(key=lambda x: (x["table"], x["partition"]))
        self._txns.pop(txn.txn_id, None)
        return txn.value()

    def _validate(self, enlisted: Enlistment, version_c: int, commit_ts: int) -> None:
        catalogs = self.ctx.catalogs
        cat_c = catalogs.at_version(version_c)
        if cat_c.table_by_id(enlisted.table_id) is None:
            raise fail(
                errors.INCOMPATIBLE_SCHEMA,
                f"table {enlisted.name} does not exist at commit_ts {commit_ts}",
                True,
            )
        start = catalogs.active(enlisted.base_ts).version
        versions = [catalogs.at_version(v) for v in range(start, version_c + 1)]
        bad = first_incompatible(
            versions, enlisted.table_id, self.ctx.config.rename_column_compatible, self.ctx.toggles
        )
        if bad is not None:
            version, change = bad
            raise fail(
                errors.INCOMPATIBLE_SCHEMA,
                f"table {enlisted.name}: catalog version {version} is not forward compatible"
                f" with the txn's version {enlisted.version}: {change.describe()}",
                True,
            )

    async def _prepare_all(
        self,
        txn: CoordTxn,
        commit_ts: int,
        by_node: dict[str, list[dict[str, Any]]],
        single: bool,
    ) -> dict[str, dict[str, Any]]:
        replies: dict[str, dict[str, Any]] = {}
        failures: list[SchemaSyncError] = []

        async def prepare(node: str, parts: list[dict[str, Any]]) -> None:
            try:
                replies[node] = await self.call(
                    node,
                    "txnp.prepare",
                    {
                        "txn_id": txn.txn_id,
                        "commit_ts": commit_ts,
                        "parts": parts,
                        "single": single,
                    },
                    PEER_TIMEOUT_S,
                )
            except SchemaSyncError as e:
                failures.append(e)

        async with asyncio.TaskGroup() as tg:
            for node, parts in by_node.items():
                tg.create_task(prepare(node, parts))
        if failures:
            order = [errors.INCOMPATIBLE_SCHEMA, errors.TABLE_DROPPED]
            failures.sort(key=lambda e: order.index(e.code) if e.code in order else len(order))
            raise failures[0]
        return replies

    # -- implicit ------------------------------------------------------------------------
    async def handle_implicit(self, body: dict[str, Any]) -> dict[str, Any]:
        """A single-op txn on this node, retried internally on a retriable schema error."""
        last: SchemaSyncError | None = None
        for attempt in range(1, IMPLICIT_ATTEMPTS + 1):
            txn = self.new_txn()
            try:
                async with txn.lock:
                    await self._op(txn, body.get("op"), body.get("client_schema_version"))
                    value = await self._commit(txn)
                value["attempts"] = attempt
                return value
            except SchemaSyncError as e:
                if txn.state == "active":
                    await self._abort(txn, e)
                if e.code != errors.INCOMPATIBLE_SCHEMA:
                    e.data.setdefault("value", txn.value())
                    e.data["attempts"] = attempt
                    raise
                last = e
                self._count("implicit_retry")
        assert last is not None
        raise last

    # -- peer side -----------------------------------------------------------------------
    async def handle_outcome(self, body: dict[str, Any]) -> dict[str, Any]:
        """How a txn ended, for a participant in doubt (no record and not running = aborted)."""
        txn_id = str(body["txn_id"])
        if txn_id in self.decisions.decisions:
            cts = self.decisions.decisions[txn_id]
            if cts is None:
                return {"state": "aborted"}
            return {"state": "committed", "commit_ts": cts}
        txn = self._txns.get(txn_id)
        if txn is not None and txn.state in ("active", "committing"):
            return {"state": "pending"}
        return {"state": "aborted"}

    async def handle_oldest(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"begin_ts": self.oldest_active_begin_ts(), "node": self.ctx.name}

    async def expire_idle(self) -> None:
        """Abort explicit txns a client left open too long (their locks block others)."""
        now = monotonic()
        for txn in list(self._txns.values()):
            if txn.state == "active" and now - txn.last_active > IDLE_TXN_TIMEOUT_S:
                async with txn.lock:
                    if txn.state == "active":
                        await self._abort(txn, fail(errors.TIMEOUT, "txn idle too long", True))
