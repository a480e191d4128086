"""Plugs transactions, storage and index states into a node: handlers and background tasks.

`install(ctx, node)` opens (and recovers) the partition stores, registers the client types
`txn.*` and `read.*` and the peer types `txnp.*`, and starts, in the node's TaskGroup, the
resolver of in-doubt txns and the index state driver (REGISTERED -> BUILDING with backfill ->
AVAILABLE; STOPPING -> removed), each move gated on older transactions having finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from schemasync import errors
from schemasync.catalog import AVAILABLE, BUILDING, Catalog
from schemasync.deadline import within
from schemasync.errors import SchemaSyncError
from schemasync.hlc import make_ts
from schemasync.index_states import may_advance, pending_steps, state_activation_ts
from schemasync.storage import Storage
from schemasync.toggles import BACKFILL_IGNORES_SKEW, SKIP_INDEX_STATES
from schemasync.txn_coordinator import PEER_TIMEOUT_S, TxnCoordinator
from schemasync.txn_primary import TxnPrimary, completed_catalog, fail

if TYPE_CHECKING:
    from schemasync.context import HandlerRegistry, NodeContext

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

RESOLVE_INTERVAL_S = 0.5
INDEX_DRIVER_INTERVAL_S = 0.1
HOUSEKEEPING_INTERVAL_S = 5.0
BACKFILL_TIMEOUT_S = 30.0


class TxnService:
    """The transaction layer of one node."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.storage = Storage(ctx.data_dir, disk=ctx.runtime.disk)
        self.primary = TxnPrimary(ctx, self.storage)
        self.coordinator = TxnCoordinator(ctx, self.call)
        self.peer_handlers: dict[str, Handler] = {
            "txnp.op": self.primary.handle_op,
            "txnp.prepare": self.primary.handle_prepare,
            "txnp.decide": self.primary.handle_decide,
            "txnp.release": self.primary.handle_release,
            "txnp.rows": self.primary.handle_rows,
            "txnp.entries": self.primary.handle_entries,
            "txnp.backfill": self.primary.handle_backfill,
            "txnp.outcome": self.coordinator.handle_outcome,
            "txnp.oldest": self.coordinator.handle_oldest,
        }
        self.client_handlers: dict[str, Handler] = {
            "txn.begin": self.coordinator.handle_begin,
            "txn.op": self.coordinator.handle_op,
            "txn.commit": self.coordinator.handle_commit,
            "txn.rollback": self.coordinator.handle_rollback,
            "txn.implicit": self.coordinator.handle_implicit,
            "read.table": self.read_table,
            "read.index": self.read_index,
        }
        self._backfilled: set[int] = set()

    async def call(
        self, node: str, req_type: str, body: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """A peer request; to this node itself it is a direct call (same clock, no socket)."""
        if node != self.ctx.name:
            return await self.ctx.peers.call(node, req_type, body, timeout)
        try:
            async with within(timeout):
                return await self.peer_handlers[req_type](body)
        except TimeoutError:
            raise fail(
                errors.TIMEOUT, f"{req_type} on {node}: no reply in {timeout}s", True
            ) from None

    # -- background ----------------------------------------------------------------------
    async def run_resolver(self) -> None:
        async def ask(coordinator: str, txn_id: str) -> dict[str, Any]:
            return await self.call(coordinator, "txnp.outcome", {"txn_id": txn_id}, 2.0)

        while True:
            await asyncio.sleep(RESOLVE_INTERVAL_S)
            try:
                await self.primary.resolve(ask)
            except Exception:
                log.exception("in-doubt resolver")

    async def run_housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                await self.coordinator.expire_idle()
                self.storage.maybe_compact()
            except Exception:
                log.exception("housekeeping")

    async def run_index_driver(self) -> None:
        while True:
            await asyncio.sleep(INDEX_DRIVER_INTERVAL_S)
            if self.ctx.metastore.raft.leader != self.ctx.name:
                continue  # one driver: the Meta Storage leader's
            try:
                await self.drive_indexes()
            except SchemaSyncError as e:
                log.info("index driver: %s", e)
            except Exception:
                log.exception("index driver")

    async def oldest_running_begin_ts(self) -> list[int] | None:
        """begin_ts of the oldest running txn of every node; None if a node does not answer."""
        begins: list[int] = []
        for node in sorted(self.ctx.config.nodes):
            try:
                reply = await self.call(node, "txnp.oldest", {}, 1.0)
            except SchemaSyncError:
                return None
            if reply.get("begin_ts") is not None:
                begins.append(int(reply["begin_ts"]))
        return begins

    async def drive_indexes(self) -> None:
        catalogs = self.ctx.catalogs
        latest = catalogs.latest()
        history = list(catalogs)
        if SKIP_INDEX_STATES in self.ctx.toggles:
            await self._backfill_created_available(history)
        for step in pending_steps(latest):
            since = state_activation_ts(history, step.index)
            if since is None or self.ctx.hlc.now() < since:
                continue  # the state is not active yet
            await completed_catalog(self.ctx, since, "index driver")
            snapshot = self._backfill_snapshot(since)
            running = await self.oldest_running_begin_ts()
            if running is None or not may_advance(since, running):
                continue
            if step.from_state == BUILDING:
                found = latest.index(step.index)
                if found is None:
                    continue
                table, index = found
                await self._backfill(table.id, index.id, snapshot, since)
            try:
                async with asyncio.timeout(PEER_TIMEOUT_S * 2):
                    cat = await self.ctx.metastore.propose_ddl(step.stmt)
                log.info("index driver: %s -> catalog version %d", step.stmt, cat.version)
            except SchemaSyncError as e:
                log.info("index driver: %s: %s", step.stmt, e.message)

    def _backfill_snapshot(self, since: int) -> int:
        """The timestamp the backfill reads rows at: BUILDING's activation, which lies above the
        commit of every writer that maintains no entry (the gate waited for them, and the poll's
        replies lifted this node's HLC past their commits before BUILDING was stamped). The bug
        toggle `backfill-ignores-skew` reads this node's own wall clock instead, before the
        poll, as CockroachDB's backfill fixed its scan timestamp from its own clock (#18533):
        a writer on a node whose clock is ahead commits above it, and its row gets no entry."""
        if BACKFILL_IGNORES_SKEW in self.ctx.toggles:
            return make_ts(self.ctx.hlc.wall_ms())
        return since

    async def _backfill_created_available(self, history: list[Catalog]) -> None:
        """With `skip-index-states` an index is AVAILABLE at once: backfill it right away, as
        of its activation, without waiting for older writers (F1's one-step change)."""
        for table in history[-1].tables.values():
            for index in table.indexes:
                if index.state != AVAILABLE or index.id in self._backfilled:
                    continue
                if self.ctx.metastore.get_local(f"index_backfilled/{index.id}"):
                    self._backfilled.add(index.id)
                    continue
                created = next(
                    (
                        c
                        for c in history
                        if (hit := c.index(index.name)) is not None and hit[1].id == index.id
                    ),
                    None,
                )
                if created is None or self.ctx.hlc.now() < created.activation_ts:
                    continue
                await completed_catalog(self.ctx, created.activation_ts, "index driver")
                await self._backfill(table.id, index.id, created.activation_ts)
                await self.ctx.metastore.put(f"index_backfilled/{index.id}", True)
                self._backfilled.add(index.id)

    async def _backfill(
        self, table_id: int, index_id: int, ts: int, schema_ts: int | None = None
    ) -> None:
        """Entries for the rows live at `ts`, of the index as the catalog at `schema_ts` (default
        `ts`) defines it, added on every node."""
        body: dict[str, Any] = {
            "table_id": table_id,
            "index_id": index_id,
            "ts": ts,
            "partitions": self.ctx.config.partitions,
        }
        if schema_ts is not None and schema_ts != ts:
            body["schema_ts"] = schema_ts
        failed: list[str] = []

        async def backfill_on(node: str) -> None:
            try:
                await self.call(node, "txnp.backfill", body, BACKFILL_TIMEOUT_S)
            except SchemaSyncError as e:
                failed.append(f"{node}: {e.message}")

        async with asyncio.TaskGroup() as tg:
            for node in sorted(self.ctx.config.nodes):
                tg.create_task(backfill_on(node))
        if failed:
            raise fail(errors.UNAVAILABLE, f"backfill of index {index_id}: {'; '.join(failed)}")

    # -- final reads ---------------------------------------------------------------------
    async def _read_target(self, body: dict[str, Any]) -> tuple[int, Catalog]:
        ts = body.get("ts")
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
            raise errors.invalid_request("ts must be an HLC integer or null")
        if ts is None:
            await self._sync_clocks()
        at = self.ctx.hlc.now() if ts is None else ts
        return at, await completed_catalog(self.ctx, at, "read")

    async def _sync_clocks(self) -> None:
        """Hear from every reachable node first: each reply moves our HLC past that node's,
        so a read at our now() is after every commit those nodes acknowledged (clock skew
        would otherwise let a final read miss an acknowledged write)."""

        async def ping(node: str) -> None:
            try:
                await self.call(node, "txnp.oldest", {}, 1.0)
            except SchemaSyncError as e:
                log.info("read: %s did not answer the clock sync: %s", node, e.message)

        async with asyncio.TaskGroup() as tg:
            for node in sorted(self.ctx.config.nodes):
                if node != self.ctx.name:
                    tg.create_task(ping(node))

    async def read_table(self, body: dict[str, Any]) -> dict[str, Any]:
        """Every row of a table at ts (default now), with the schema version active there."""
        ts, cat = await self._read_target(body)
        table = cat.table(str(body.get("table")))
        if table is None:
            raise fail(errors.TABLE_NOT_FOUND, f"no table {body.get('table')} at {ts}", False)
        rows: list[dict[str, Any]] = []
        for p in range(self.ctx.config.partitions):
            reply = await self.call(
                self.coordinator.primary(table.id, p),
                "txnp.rows",
                {"table_id": table.id, "partition": p, "ts": ts, "version": table.schema_version},
                PEER_TIMEOUT_S * 2,
            )
            rows.extend(reply["rows"])
        rows.sort(key=lambda r: r["key"])
        return {"table": table.name, "ts": ts, "schema_version": table.schema_version, "rows": rows}

    async def read_index(self, body: dict[str, Any]) -> dict[str, Any]:
        """Every entry of an index at ts; `state` says whether the checker may judge it."""
        ts, cat = await self._read_target(body)
        table = cat.table(str(body.get("table")))
        if table is None:
            raise fail(errors.TABLE_NOT_FOUND, f"no table {body.get('table')} at {ts}", False)
        index = table.index(str(body.get("index")))
        if index is None:
            raise errors.invalid_request(f"table {table.name} has no index {body.get('index')}")
        entries: list[dict[str, Any]] = []
        for p in range(self.ctx.config.partitions):
            reply = await self.call(
                self.coordinator.primary(table.id, p),
                "txnp.entries",
                {"table_id": table.id, "partition": p, "ts": ts, "index_id": index.id},
                PEER_TIMEOUT_S * 2,
            )
            for e in reply["entries"]:
                values = dict(zip(index.columns, e["values"], strict=False))
                entries.append({"key": e["key"], "values": values})
        entries.sort(key=lambda e: (e["key"], repr(e["values"])))
        return {
            "table": table.name,
            "index": index.name,
            "ts": ts,
            "state": index.state,
            "schema_version": table.schema_version,
            "entries": entries,
        }


def install(ctx: NodeContext, node: HandlerRegistry) -> TxnService:
    """Recover storage, register the txn layer's handlers and start its background tasks."""
    service = TxnService(ctx)
    service.primary.recover()
    for prefix, handler in service.client_handlers.items():
        node.register_client_handler(prefix, handler)
    for prefix, handler in service.peer_handlers.items():
        node.register_peer_handler(prefix, handler)
    ctx.task_group.create_task(service.run_resolver())
    ctx.task_group.create_task(service.run_housekeeping())
    ctx.task_group.create_task(service.run_index_driver())
    log.info("txn service installed on %s", ctx.name)
    return service
