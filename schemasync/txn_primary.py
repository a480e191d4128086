"""The primary side of transactions: each op validated at the primary's own op_ts, key locks,
prepare/commit validated against the catalog at commit_ts, index maintenance and backfill.

Option 3 of seed 001: an op on table t fails (and aborts its txn) when the table schema version
active at op_ts differs from the txn's initial version I; a participant commits only if every
step from I to the version at commit_ts is forward compatible. Writers maintain the indexes of
the catalog at their begin_ts (seed 004), so index states must be driven with care.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from schemasync import errors
from schemasync.catalog import Catalog, CatalogHistory, Index, Table
from schemasync.compat import first_incompatible
from schemasync.deadline import within
from schemasync.errors import SchemaSyncError
from schemasync.index_states import maintained, readable
from schemasync.locks import LockConflict, LockMode, LockOwner, LockTable
from schemasync.partitioning import primary_of
from schemasync.rows import RowInvalid, complete_row, to_ids, to_names, upgrade_between
from schemasync.runtime import monotonic
from schemasync.storage import (
    IndexWrite,
    KeyWrite,
    PartitionStore,
    PreparedTxn,
    RowVersion,
    Storage,
)
from schemasync.toggles import (
    LOCAL_SCHEMA_AT_COMMIT,
    NO_COMMIT_VALIDATION,
    NO_OP_VALIDATION,
    OLD_WRITER_NO_DEFAULT,
)
from schemasync.types import TypeInvalid, normalize_value, parse_type

if TYPE_CHECKING:
    from schemasync.context import NodeContext

log = logging.getLogger(__name__)

LOCK_WAIT_S = 1.0
SCHEMA_WAIT_S = 10.0
PREPARED_WAIT_S = 10.0
IN_DOUBT_AFTER_S = 1.0
IDLE_ASK_AFTER_S = 5.0
ENDED_MEMORY = 100_000

PartKey = tuple[int, int]  # (table_id, partition)


def fail(code: str, message: str, retriable: bool | None = None, **data: Any) -> SchemaSyncError:
    return SchemaSyncError(code, message, retriable, data)


async def completed_catalog(ctx: NodeContext, ts: int, what: str) -> Catalog:
    """The catalog active at ts after the completeness wait; UNAVAILABLE if it takes too long."""
    try:
        async with within(SCHEMA_WAIT_S):
            return await ctx.schema_sync.active_catalog(ts)
    except TimeoutError:
        raise fail(
            errors.UNAVAILABLE,
            f"{what}: metadata not complete at ts {ts} within {SCHEMA_WAIT_S:.0f}s"
            f" (safe time {ctx.schema_sync.safe_time.current})",
            True,
        ) from None


def table_version(catalogs: CatalogHistory, table_id: int, version: int) -> Table:
    table = catalogs.table_versions(table_id).get(version)
    if table is None:
        raise fail(errors.INTERNAL, f"schema version {version} of table {table_id} unknown here")
    return table


def row_for_reader(catalogs: CatalogHistory, table_id: int, rv: RowVersion, reader: Table) -> Any:
    """A stored row version as the reader's schema sees it (upgraded by column id)."""
    if rv.values is None:
        return None
    versions = catalogs.table_versions(table_id)
    written = versions.get(rv.schema_version)
    if written is not None and rv.schema_version <= reader.schema_version:
        try:
            return upgrade_between(
                to_names(written, rv.values), versions, rv.schema_version, reader.schema_version
            )
        except (ValueError, RowInvalid) as e:
            log.warning("row upgrade v%d -> v%d: %s", rv.schema_version, reader.schema_version, e)
    # A row newer than its reader (only with a bug toggle on): project it by column id.
    return {c.name: rv.values.get(c.id, c.default) for c in reader.columns}


def index_column_ids(table: Table, index: Index) -> tuple[int, ...]:
    ids = []
    for name in index.columns:
        column = table.column(name)
        ids.append(column.id if column is not None else -1)
    return tuple(ids)


def index_values(values_by_id: Mapping[int, Any], column_ids: tuple[int, ...]) -> tuple[Any, ...]:
    return tuple(values_by_id.get(cid) for cid in column_ids)


@dataclass
class _Part:
    """One (table, partition) of a txn on this primary: its I and its buffered writes."""

    table_id: int
    partition: int
    version: int
    base_ts: int
    writes: dict[int, KeyWrite] = field(default_factory=dict)


@dataclass
class _Txn:
    txn_id: str
    coordinator: str
    begin_ts: int
    parts: dict[PartKey, _Part] = field(default_factory=dict)
    prepared: dict[PartKey, int] = field(default_factory=dict)  # part -> commit_ts
    aborted: bool = False
    in_doubt: bool = False  # recovered from the WAL after a restart
    last_active: float = field(default_factory=monotonic)
    prepared_at: float | None = None
    prepare_reply: dict[str, Any] = field(default_factory=dict)

    @property
    def owner(self) -> LockOwner:
        return LockOwner(self.begin_ts, self.txn_id)


class TxnPrimary:
    """Serves the peer-port requests of coordinators for the partitions this node leads."""

    def __init__(self, ctx: NodeContext, storage: Storage) -> None:
        self.ctx = ctx
        self.storage = storage
        self.locks = LockTable()
        self._txns: dict[str, _Txn] = {}
        self.nodes = sorted(ctx.config.nodes)
        self._ended: OrderedDict[str, None] = OrderedDict()  # recent txns: late ops refused
        # This incarnation: a txn whose ops ran on an earlier one lost them at the restart.
        self.epoch = f"{ctx.name}-{ctx.runtime.token()}"

    # -- recovery ------------------------------------------------------------------------
    def recover(self) -> int:
        """Reopen every partition log; re-lock the keys of prepared txns left in doubt."""
        count = 0
        for store in self.storage.recover_all():
            for prepared in store.prepared():
                txn = self._txns.get(prepared.txn_id)
                if txn is None:
                    txn = self._txns[prepared.txn_id] = _Txn(
                        prepared.txn_id, prepared.coordinator, 0, in_doubt=True
                    )
                    txn.prepared_at = 0.0
                    count += 1
                part = (store.table_id, store.partition)
                txn.prepared[part] = prepared.commit_ts
                for w in prepared.writes:
                    self.locks.grant(
                        txn.owner, (store.table_id, store.partition, w.key), LockMode.EXCLUSIVE
                    )
        if count:
            log.info("primary: %d prepared txns in doubt after restart", count)
        return count

    def _store(self, table_id: int, partition: int) -> PartitionStore:
        return self.storage.partition(table_id, partition)

    # -- ops -----------------------------------------------------------------------------
    async def handle_op(self, body: dict[str, Any]) -> dict[str, Any]:
        """One read/write of a txn: validate at op_ts against I, lock, execute."""
        txn_id = str(body["txn_id"])
        table_id = int(body["table_id"])
        partition = int(body["partition"])
        version = int(body["version"])
        op = body["op"]
        txn = self._txns.get(txn_id)
        if txn is None:
            if txn_id in self._ended:
                raise fail(errors.TXN_ABORTED, f"txn {txn_id} already ended on {self.ctx.name}")
            txn = self._txns[txn_id] = _Txn(txn_id, str(body["coordinator"]), int(body["begin_ts"]))
        if txn.aborted or txn.prepared:
            raise fail(errors.TXN_ABORTED, f"txn {txn_id} is no longer active on {self.ctx.name}")
        txn.last_active = monotonic()
        op_ts = self.ctx.hlc.now()
        try:
            cat = await completed_catalog(self.ctx, op_ts, "op")
            table = cat.table_by_id(table_id)
            if table is None:
                raise fail(
                    errors.TABLE_DROPPED,
                    f"table {body.get('table')} (id {table_id}) does not exist at op_ts {op_ts}",
                    False,
                    op_ts=op_ts,
                    node=self.ctx.name,
                    schema_version=None,
                )
            if table.schema_version != version and NO_OP_VALIDATION not in self.ctx.toggles:
                raise fail(
                    errors.INCOMPATIBLE_SCHEMA,
                    f"table {table.name} is at schema version {table.schema_version} at op_ts"
                    f" {op_ts}, the txn started on {version}",
                    True,
                    op_ts=op_ts,
                    node=self.ctx.name,
                    schema_version=table.schema_version,
                )
            part = txn.parts.get((table_id, partition))
            if part is None:
                part = txn.parts[(table_id, partition)] = _Part(
                    table_id, partition, version, int(body.get("base_ts", op_ts))
                )
            schema = table_version(self.ctx.catalogs, table_id, version)
            result = await self._execute(txn, part, schema, op, op_ts)
        except BaseException:
            # Any failure (a cancelled wait included) ends the txn here; the coordinator
            # aborts it everywhere when it hears of it.
            await asyncio.shield(self._abort_local(txn_id))
            raise
        if txn.aborted:  # aborted by the coordinator while this op waited
            await self._abort_local(txn_id)
            self.locks.release_all(txn_id)  # what the op took after the abort released
            raise fail(errors.TXN_ABORTED, f"txn {txn_id} was aborted during the op")
        return {
            "op_ts": op_ts,
            "node": self.ctx.name,
            "schema_version": table.schema_version,
            "result": result,
            "epoch": self.epoch,
        }

    async def _lock(self, txn: _Txn, part: _Part, key: int, mode: LockMode) -> None:
        try:
            await self.locks.acquire(
                txn.owner, (part.table_id, part.partition, key), mode, LOCK_WAIT_S
            )
        except LockConflict as e:
            raise fail(errors.LOCK_CONFLICT, str(e), True) from None

    async def _execute(
        self, txn: _Txn, part: _Part, schema: Table, op: dict[str, Any], op_ts: int
    ) -> Any:
        kind = op.get("op")
        store = self._store(part.table_id, part.partition)
        if kind == "ix":
            return await self._index_lookup(txn, part, schema, op, op_ts, store)
        key = op.get("key")
        if not isinstance(key, int) or isinstance(key, bool) or not -(2**63) <= key < 2**63:
            raise errors.invalid_request(f"key must be an INT64, got {key!r}")
        if kind == "r":
            await self._lock(txn, part, key, LockMode.SHARED)
            own = part.writes.get(key)
            if own is not None:
                rv = RowVersion(op_ts, own.schema_version, own.values)
            else:
                latest = store.latest(key)
                if latest is None:
                    return None
                rv = latest
            return row_for_reader(self.ctx.catalogs, part.table_id, rv, schema)
        if kind == "w":
            row = op.get("row")
            if not isinstance(row, dict):
                raise errors.invalid_request("a write needs a row {column: value}")
            try:
                full = complete_row(schema, row)
                values = to_ids(schema, full)
            except (RowInvalid, TypeInvalid) as e:
                raise errors.invalid_request(f"row does not fit {schema.name}: {e}") from None
            await self._lock(txn, part, key, LockMode.EXCLUSIVE)
            part.writes[key] = KeyWrite(key, schema.schema_version, values)
            return None
        if kind == "d":
            await self._lock(txn, part, key, LockMode.EXCLUSIVE)
            part.writes[key] = KeyWrite(key, schema.schema_version, None)
            return None
        raise errors.invalid_request(f"unknown op {kind!r}")

    async def _index_lookup(
        self,
        txn: _Txn,
        part: _Part,
        schema: Table,
        op: dict[str, Any],
        op_ts: int,
        store: PartitionStore,
    ) -> list[int]:
        index = schema.index(str(op.get("index")))
        if index is None:
            raise errors.invalid_request(f"table {schema.name} has no index {op.get('index')}")
        if not readable(index):
            raise errors.invalid_request(f"index {index.name} is {index.state}, not readable")
        lookup = op.get("lookup")
        raw = list(lookup) if isinstance(lookup, list | tuple) else [lookup]
        if len(raw) != len(index.columns):
            raise errors.invalid_request(f"index {index.name} needs {len(index.columns)} values")
        wanted = []
        for name, value in zip(index.columns, raw, strict=True):
            column = schema.column(name)
            try:
                wanted.append(normalize_value(parse_type(column.type), value) if column else value)
            except TypeInvalid as e:
                raise errors.invalid_request(f"lookup value for {name}: {e}") from None
        values = tuple(wanted)
        await self._wait_prepared(store, op_ts)
        keys = set(store.index_lookup(index.id, values, op_ts))
        column_ids = index_column_ids(schema, index)
        for key, w in part.writes.items():  # the txn sees its own writes
            if w.values is not None and index_values(w.values, column_ids) == values:
                keys.add(key)
            else:
                keys.discard(key)
        return sorted(keys)

    async def _wait_prepared(self, store: PartitionStore, ts: int) -> None:
        try:
            async with within(PREPARED_WAIT_S):
                await store.wait_prepared_below(ts)
        except TimeoutError:
            raise fail(
                errors.UNAVAILABLE, f"prepared txns below ts {ts} still in doubt", True
            ) from None

    # -- commit --------------------------------------------------------------------------
    async def _commit_catalog(self, commit_ts: int) -> Catalog:
        """The catalog a participant validates against: the one at commit_ts (the bug toggle
        `local-schema-at-commit` takes this node's newest instead, without waiting)."""
        if LOCAL_SCHEMA_AT_COMMIT in self.ctx.toggles:
            return self.ctx.catalogs.latest()
        return await completed_catalog(self.ctx, commit_ts, "commit")

    def _validate(self, part: _Part, cat_c: Catalog, commit_ts: int) -> int | None:
        """Existence and step-by-step forward compatibility from I to C (unless toggled off)."""
        table_c = cat_c.table_by_id(part.table_id)
        if NO_COMMIT_VALIDATION in self.ctx.toggles:
            return table_c.schema_version if table_c is not None else None
        if table_c is None:
            raise fail(
                errors.INCOMPATIBLE_SCHEMA,
                f"table {part.table_id} does not exist at commit_ts {commit_ts}",
                True,
            )
        catalogs = self.ctx.catalogs
        start = catalogs.active(part.base_ts).version
        versions = [catalogs.at_version(v) for v in range(start, cat_c.version + 1)]
        bad = first_incompatible(
            versions,
            part.table_id,
            self.ctx.config.rename_column_compatible,
            self.ctx.toggles,
        )
        if bad is not None:
            version, change = bad
            raise fail(
                errors.INCOMPATIBLE_SCHEMA,
                f"catalog version {version} is not forward compatible: {change.describe()}",
                True,
            )
        return table_c.schema_version

    async def _index_writes(
        self, txn: _Txn, part: _Part, store: PartitionStore
    ) -> list[IndexWrite]:
        """Entry changes for the indexes of the catalog at the writer's begin_ts."""
        if not part.writes:
            return []
        cat_b = self.ctx.catalogs.active(txn.begin_ts)
        table_b = cat_b.table_by_id(part.table_id)
        if table_b is None:
            return []
        indexes = [i for i in table_b.indexes if maintained(i)]
        if not indexes:
            return []
        schema = table_version(self.ctx.catalogs, part.table_id, part.version)
        out: list[IndexWrite] = []
        for key, w in part.writes.items():
            old = store.latest(key)
            old_row = (
                None
                if old is None or old.values is None
                else to_ids(schema, row_for_reader(self.ctx.catalogs, part.table_id, old, schema))
            )
            for index in indexes:
                cols = index_column_ids(table_b, index)
                new_vals = None if w.values is None else index_values(w.values, cols)
                if old_row is not None:
                    old_vals = index_values(old_row, cols)
                    if old_vals != new_vals:
                        out.append(IndexWrite(index.id, old_vals, key, False))
                if new_vals is not None:
                    out.append(IndexWrite(index.id, new_vals, key, True))
        return out

    def _stored_writes(self, part: _Part, commit_version: int | None) -> tuple[KeyWrite, ...]:
        """The writes as the store keeps them: each under the version its values were written
        on (I), which a reader upgrades from, filling a column added since with its default.
        The bug toggle `old-writer-no-default` stamps them with the commit-time version instead,
        values unchanged (YugabyteDB #4415: the row built from the old tuple descriptor)."""
        writes = tuple(part.writes.values())
        if OLD_WRITER_NO_DEFAULT not in self.ctx.toggles or commit_version is None:
            return writes
        return tuple(replace(w, schema_version=commit_version) for w in writes)

    async def handle_prepare(self, body: dict[str, Any]) -> dict[str, Any]:
        """Phase one (or the single phase when ``single``): validate at commit_ts, log, reply."""
        txn_id = str(body["txn_id"])
        commit_ts = int(body["commit_ts"])
        single = bool(body.get("single", False))
        txn = self._txns.get(txn_id)
        wanted = [(int(p["table_id"]), int(p["partition"])) for p in body["parts"]]
        restarted = any(p.get("epoch", self.epoch) != self.epoch for p in body["parts"])
        if txn is None or txn.aborted or restarted or any(k not in txn.parts for k in wanted):
            await self._abort_local(txn_id)
            raise fail(
                errors.TXN_ABORTED,
                f"txn {txn_id} is unknown on {self.ctx.name} (restarted or aborted)",
                True,
            )
        if txn.prepared:
            return txn.prepare_reply
        txn.last_active = monotonic()
        try:
            cat_c = await self._commit_catalog(commit_ts)
            results = []
            commit_versions: dict[PartKey, int | None] = {}
            for key in wanted:
                part = txn.parts[key]
                sv = commit_versions[key] = self._validate(part, cat_c, commit_ts)
                results.append(
                    {"table_id": key[0], "partition": key[1], "commit_schema_version": sv}
                )
            for key in wanted:
                part = txn.parts[key]
                store = self._store(*key)
                prepared = PreparedTxn(
                    txn_id,
                    txn.coordinator,
                    commit_ts,
                    self._stored_writes(part, commit_versions[key]),
                    tuple(await self._index_writes(txn, part, store)),
                )
                if txn.aborted:  # the coordinator gave up while this prepare waited
                    raise fail(errors.TXN_ABORTED, f"txn {txn_id} was aborted during prepare")
                if single:
                    await store.commit_single(prepared)
                else:
                    txn.prepared[key] = commit_ts  # before the fsync: an abort must undo it
                    await store.prepare(prepared)
        except BaseException:
            await asyncio.shield(self._abort_local(txn_id))
            raise
        reply = {"parts": results, "node": self.ctx.name}
        if single:
            self._finish(txn_id)
        else:
            txn.prepared_at = monotonic()
            txn.prepare_reply = reply
        return reply

    async def handle_decide(self, body: dict[str, Any]) -> dict[str, Any]:
        """Phase two: apply (commit) or forget (abort) what was prepared."""
        txn_id = str(body["txn_id"])
        if bool(body.get("commit")):
            await self._commit_local(txn_id, int(body["commit_ts"]))
        else:
            await self._abort_local(txn_id)
        return {}

    async def handle_release(self, body: dict[str, Any]) -> dict[str, Any]:
        await self._abort_local(str(body["txn_id"]))
        return {}

    async def _commit_local(self, txn_id: str, commit_ts: int) -> None:
        txn = self._txns.get(txn_id)
        if txn is None:
            return
        for key, _ in list(txn.prepared.items()):
            await self._store(*key).commit_prepared(txn_id, commit_ts)
        self._finish(txn_id)

    async def _abort_local(self, txn_id: str) -> None:
        txn = self._txns.get(txn_id)
        if txn is None:
            self._finish(txn_id)  # an op still on its way must not start the txn afresh
            return
        txn.aborted = True
        for key in list(txn.prepared):
            await self._store(*key).abort_prepared(txn_id)
        self._finish(txn_id)

    def _finish(self, txn_id: str) -> None:
        self._txns.pop(txn_id, None)
        self.locks.release_all(txn_id)
        self._ended[txn_id] = None
        while len(self._ended) > ENDED_MEMORY:
            self._ended.popitem(last=False)

    # -- in-doubt resolution ---------------------------------------------------------------
    async def resolve(self, ask: Callable[[str, str], Awaitable[dict[str, Any]]]) -> None:
        """Ask coordinators about prepared txns that waited too long and idle active ones."""
        now = monotonic()
        for txn in list(self._txns.values()):
            stale_prepared = (
                txn.prepared
                and txn.prepared_at is not None
                and now - txn.prepared_at > IN_DOUBT_AFTER_S
            )
            idle = not txn.prepared and now - txn.last_active > IDLE_ASK_AFTER_S
            if not (stale_prepared or idle):
                continue
            try:
                answer = await ask(txn.coordinator, txn.txn_id)
            except SchemaSyncError as e:
                log.info(
                    "txn %s: coordinator %s not reachable: %s",
                    txn.txn_id,
                    txn.coordinator,
                    e.message,
                )
                continue
            state = answer.get("state")
            if state == "committed":
                log.info("txn %s: resolved as committed at %s", txn.txn_id, answer["commit_ts"])
                await self._commit_local(txn.txn_id, int(answer["commit_ts"]))
            elif state == "aborted":
                log.info("txn %s: resolved as aborted", txn.txn_id)
                await self._abort_local(txn.txn_id)
            else:
                txn.last_active = now if idle else txn.last_active

    def in_doubt(self) -> list[str]:
        return [t.txn_id for t in self._txns.values() if t.prepared]

    # -- reads outside txns --------------------------------------------------------------
    def _owned_store(self, table_id: int, partition: int) -> PartitionStore:
        if primary_of(table_id, partition, self.nodes) != self.ctx.name:
            raise errors.invalid_request(
                f"{self.ctx.name} is not the primary of {table_id}/{partition}"
            )
        return self._store(table_id, partition)

    async def handle_rows(self, body: dict[str, Any]) -> dict[str, Any]:
        """Every live row of a partition at ts, upgraded to the given schema version."""
        table_id, partition, ts = int(body["table_id"]), int(body["partition"]), int(body["ts"])
        await completed_catalog(self.ctx, ts, "read")
        reader = table_version(self.ctx.catalogs, table_id, int(body["version"]))
        store = self._owned_store(table_id, partition)
        await self._wait_prepared(store, ts)
        rows = [
            {"key": key, "row": row_for_reader(self.ctx.catalogs, table_id, rv, reader)}
            for key, rv in store.scan(ts)
        ]
        return {"rows": rows}

    async def handle_entries(self, body: dict[str, Any]) -> dict[str, Any]:
        """The entries of one index in a partition at ts."""
        table_id, partition, ts = int(body["table_id"]), int(body["partition"]), int(body["ts"])
        await completed_catalog(self.ctx, ts, "read")
        store = self._owned_store(table_id, partition)
        await self._wait_prepared(store, ts)
        entries = store.index_entries(int(body["index_id"]), ts)
        return {"entries": [{"key": e.key, "values": list(e.values)} for e in entries]}

    async def handle_backfill(self, body: dict[str, Any]) -> dict[str, Any]:
        """Add index entries for every row of this node's partitions live at ts, for the index
        as the catalog at schema_ts (default ts) defines it."""
        table_id, index_id, ts = int(body["table_id"]), int(body["index_id"]), int(body["ts"])
        cat = await completed_catalog(self.ctx, int(body.get("schema_ts", ts)), "backfill")
        table = cat.table_by_id(table_id)
        index = (
            None if table is None else next((i for i in table.indexes if i.id == index_id), None)
        )
        if table is None or index is None:
            return {"entries": 0, "skipped": "index or table gone"}
        cols = index_column_ids(table, index)
        total = 0
        for partition in range(int(body["partitions"])):
            if primary_of(table_id, partition, self.nodes) != self.ctx.name:
                continue
            store = self._store(table_id, partition)
            await self._wait_prepared(store, ts)
            live = {
                key: index_values(
                    to_ids(table, row_for_reader(self.ctx.catalogs, table_id, rv, table)), cols
                )
                for key, rv in store.scan(ts)
            }
            writes = [IndexWrite(index_id, values, key, True) for key, values in live.items()]
            # A writer that began before REGISTERED activated maintains no entry of the index:
            # overwriting or deleting a row whose entry a later writer added, it leaves that
            # entry stale. The index is made to match the rows at ts.
            writes += [
                IndexWrite(index_id, e.values, e.key, False)
                for e in store.index_entries(index_id, ts)
                if live.get(e.key) != e.values
            ]
            await store.backfill(writes, ts)
            total += len(live)
        log.info("backfill of index %s at %d: %d entries", index.name, ts, total)
        return {"entries": total}

    def oldest_active_begin_ts(self) -> int | None:
        begins = [t.begin_ts for t in self._txns.values() if not t.in_doubt]
        return min(begins) if begins else None
