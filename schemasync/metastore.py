"""Meta Storage: the replicated state machine on Raft that carries the catalog and safe time.

Every entry carries the leader's safe_ts; applying it advances this replica's safe time after
the catalog applied it. DDL goes in as a compare-and-set on the catalog version, so two
concurrent DDLs never both become version v+1. A small key-value space serves the txn layer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from schemasync import errors
from schemasync.catalog import Catalog, CatalogHistory, apply_ddl
from schemasync.config import NodeConfig
from schemasync.ddl import DdlInvalid, parse_ddl
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock, add_ms
from schemasync.raft import LogEntry, RaftNode
from schemasync.runtime import Runtime
from schemasync.toggles import MUTABLE_DELAY, NO_SAFE_TIME_RECOVERY, SYNCTIME_REORDER

log = logging.getLogger(__name__)


def next_activation_ts(previous_activation: int, safe_ts: int, delay_ms: int) -> int:
    """Tu = safe_ts + DD, bumped just past the previous version's Tu so that it strictly grows."""
    return max(add_ms(safe_ts, delay_ms), previous_activation + 1)


class SafeTimeTracker:
    """This replica's safe time and the tasks waiting for it to reach a timestamp."""

    def __init__(self) -> None:
        self.current = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def advance(self, ts: int) -> None:
        if ts <= self.current:
            return
        self.current = ts
        while self._waiters and self._waiters[0][0] <= ts:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)

    async def wait(self, ts: int) -> None:
        """Return once safe time >= ts; callers bound it with asyncio.timeout."""
        if self.current >= ts:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (ts, next(self._seq), fut))
        await fut


@dataclass(frozen=True)
class DdlOutcome:
    """What the Meta Storage committed for a DDL: the version and its activation."""

    catalog_version: int
    activation_ts: int
    index: int


class MetaStorage:
    """The replica's state machine (catalog history, key-value space, safe time) over Raft."""

    def __init__(
        self,
        config: NodeConfig,
        clock: HybridClock,
        rpc: Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]],
        runtime: Runtime | None = None,
    ) -> None:
        self.config = config
        self.runtime = runtime if runtime is not None else Runtime()
        self.clock = clock
        self.toggles = config.toggles
        self.live_delay_ms = config.delay_duration_ms
        self.catalogs = self._new_history()
        self.kv: dict[str, Any] = {}
        self._ddl_requests: dict[str, int] = {}
        self.safe_time = SafeTimeTracker()
        self.last_applied_safe_ts = 0
        self.safe_ts_regressions = 0
        self._sorted_nodes = sorted(config.nodes)
        self.raft = RaftNode(
            config.name,
            config.voters,
            tuple(sorted(config.nodes)),
            config.data_dir / "metastore",
            clock,
            rpc,
            self,
            election_timeout_ms=(config.election_timeout_min_ms, config.election_timeout_max_ms),
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            idle_sync_interval_ms=config.idle_safe_time_interval_ms,
            snapshot_threshold=config.snapshot_threshold,
            disk=self.runtime.disk,
            rng=self.runtime.rng,
            stamp_before_append_ms=(
                config.synctime_reorder_window_ms if SYNCTIME_REORDER in self.toggles else None
            ),
        )

    def _new_history(self, first: Catalog | None = None) -> CatalogHistory:
        return CatalogHistory(first, ordered_activation=MUTABLE_DELAY not in self.toggles)

    def delay_ms(self) -> int:
        """DD for new entries and completeness waits: fixed, unless ``mutable-delay``."""
        return (
            self.live_delay_ms if MUTABLE_DELAY in self.toggles else self.config.delay_duration_ms
        )

    async def run(self) -> None:
        await self.raft.run()

    # ---- state machine --------------------------------------------------------------------

    def apply(self, entry: LogEntry, replay: bool) -> Any:
        cmd = entry.cmd
        op = cmd.get("op")
        result: Any = None
        advance = True
        if op == "ddl":
            result = self._apply_ddl(entry)
        elif op == "put":
            self.kv[str(cmd["key"])] = cmd.get("value")
            result = {"status": "ok"}
        elif op == "cas":
            key = str(cmd["key"])
            current = self.kv.get(key)
            if current == cmd.get("expected"):
                self.kv[key] = cmd.get("value")
                result = {"status": "ok", "value": cmd.get("value")}
            else:
                result = {"status": "conflict", "value": current}
        elif op == "sync_time":
            # A SyncTime appended under another term than the one it was made for is stale.
            advance = int(cmd.get("term", -1)) == entry.term
        elif op != "noop":
            log.warning("metastore: unknown command %r at %d", op, entry.index)
        if advance and not (replay and NO_SAFE_TIME_RECOVERY in self.toggles):
            if entry.safe_ts <= self.last_applied_safe_ts:
                self.safe_ts_regressions += 1  # only possible with synctime-reorder
            self.last_applied_safe_ts = max(self.last_applied_safe_ts, entry.safe_ts)
            self.safe_time.advance(entry.safe_ts)
        return result

    def _apply_ddl(self, entry: LogEntry) -> dict[str, Any]:
        cmd = entry.cmd
        latest = self.catalogs.latest()
        request_id = str(cmd.get("request_id", ""))
        if request_id in self._ddl_requests:
            done = self.catalogs.at_version(self._ddl_requests[request_id])
            return {"status": "ok", "version": done.version, "activation_ts": done.activation_ts}
        if int(cmd["expected_version"]) != latest.version:
            return {"status": "conflict", "version": latest.version}
        stmt = str(cmd["stmt"])
        try:
            tables, next_id = apply_ddl(
                latest,
                parse_ddl(stmt),
                self.toggles,
                index_state_bumps_version=self.config.index_state_bumps_version,
            )
        except DdlInvalid as e:
            return {"status": "invalid", "message": e.message}
        if MUTABLE_DELAY in self.toggles:
            # IGNITE-20498: DD comes from this node's live config, not from the entry.
            delay = self.live_delay_ms
            activation = add_ms(entry.safe_ts, delay)
        else:
            delay = int(cmd["delay_ms"])
            activation = next_activation_ts(latest.activation_ts, entry.safe_ts, delay)
        cat = Catalog(latest.version + 1, activation, entry.safe_ts, delay, stmt, tables, next_id)
        self.catalogs.append(cat)
        if request_id:
            self._ddl_requests[request_id] = cat.version
        for table in tables.values():
            if latest.table_by_id(table.id) is None:
                self._record_primaries(table.id)
        return {"status": "ok", "version": cat.version, "activation_ts": cat.activation_ts}

    def _record_primaries(self, table_id: int) -> None:
        nodes = self._sorted_nodes
        for p in range(self.config.partitions):
            self.kv[f"primary/{table_id}/{p}"] = nodes[(table_id + p) % len(nodes)]

    def snapshot(self) -> bytes:
        return msgpack.packb(
            {
                "catalogs": [c.to_json() for c in self.catalogs],
                "kv": self.kv,
                "ddl_requests": self._ddl_requests,
                "safe_ts": self.last_applied_safe_ts,
            },
            use_bin_type=True,
        )

    def restore(self, data: bytes, replay: bool) -> None:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
        cats = [Catalog.from_json(line) for line in raw["catalogs"]]
        history = self._new_history(cats[0])
        for cat in cats[1:]:
            history.append(cat)
        self.catalogs = history
        self.kv = dict(raw["kv"])
        self._ddl_requests = dict(raw["ddl_requests"])
        self.last_applied_safe_ts = int(raw["safe_ts"])
        if not (replay and NO_SAFE_TIME_RECOVERY in self.toggles):
            self.safe_time.advance(self.last_applied_safe_ts)

    # ---- operations -----------------------------------------------------------------------

    async def propose(self, cmd: dict[str, Any]) -> tuple[int, Any]:
        """Replicate a command through the leader; (log index, apply result)."""
        return await self.raft.propose(cmd)

    async def propose_ddl_outcome(self, stmt: str) -> DdlOutcome:
        """CAS-append a DDL as version v+1 of the Meta Storage's latest catalog; retry conflicts.

        The statement is validated where the CAS succeeds, against the latest catalog of the
        log (this replica's may lag). Returns once the leader applied it, not necessarily this
        replica. Callers bound it with asyncio.timeout.
        """
        request_id = self.runtime.token()
        parse_ddl(stmt)  # a syntax error costs no Raft round
        expected = self.catalogs.latest().version
        while True:
            index, result = await self.propose(
                {
                    "op": "ddl",
                    "stmt": stmt,
                    "expected_version": expected,
                    "delay_ms": self.delay_ms(),
                    "request_id": request_id,
                }
            )
            status = result.get("status") if isinstance(result, dict) else None
            if status == "ok":
                return DdlOutcome(int(result["version"]), int(result["activation_ts"]), index)
            if status == "invalid":
                raise DdlInvalid(str(result.get("message")))
            if status != "conflict":
                raise SchemaSyncError(errors.INTERNAL, f"unexpected DDL result {result!r}")
            # Someone else appended first: compare against the version the log holds now.
            expected = int(result["version"])

    async def propose_ddl(self, stmt: str) -> Catalog:
        """Append a DDL and return its catalog version once this replica applied it."""
        outcome = await self.propose_ddl_outcome(stmt)
        await self.raft.wait_applied(outcome.index)
        return self.catalogs.at_version(outcome.catalog_version)

    async def put(self, key: str, value: Any) -> int:
        """Replicate ``key = value``; returns the log index once applied here."""
        index, _ = await self.propose({"op": "put", "key": key, "value": value})
        await self.raft.wait_applied(index)
        return index

    async def cas(self, key: str, expected: Any, value: Any) -> tuple[bool, Any]:
        """Set ``key`` to ``value`` if it equals ``expected``; (done, value now)."""
        index, result = await self.propose(
            {"op": "cas", "key": key, "expected": expected, "value": value}
        )
        await self.raft.wait_applied(index)
        return result["status"] == "ok", result["value"]

    async def get(self, key: str) -> Any:
        """The locally applied value of ``key`` (None if absent); not a linearizable read."""
        return self.kv.get(key)

    def get_local(self, key: str) -> Any:
        return self.kv.get(key)

    def inhibit_apply(self, hold: bool) -> None:
        """Hold (or release) applying committed entries here (Ignite's WatchListenerInhibitor)."""
        if hold:
            self.raft.apply_gate.clear()
        else:
            self.raft.apply_gate.set()
        log.info(
            "metastore: apply %s at index %d",
            "held" if hold else "released",
            self.raft.applied_index,
        )
