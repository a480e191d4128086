"""Admin API on the client port: status, the catalog log, the apply inhibitor, live DD, and a
Meta Storage write for benchmarks (keys under ``bench/``)."""

from __future__ import annotations

import asyncio
from typing import Any

from schemasync import errors
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock
from schemasync.metastore import MetaStorage
from schemasync.schema_sync import SchemaSync


class Admin:
    """Handlers of ``admin.*`` requests for one node."""

    def __init__(
        self,
        name: str,
        clock: HybridClock,
        metastore: MetaStorage,
        schema_sync: SchemaSync,
        timeout_s: float = 10.0,
    ) -> None:
        self.timeout_s = timeout_s
        self.name = name
        self.clock = clock
        self.metastore = metastore
        self.schema_sync = schema_sync

    async def handle(self, req_type: str, body: dict[str, Any]) -> dict[str, Any]:
        if req_type == "admin.status":
            return self.status()
        if req_type == "admin.catalog_log":
            return {"entries": [c.to_json() for c in self.metastore.catalogs]}
        if req_type == "admin.inhibit_apply":
            hold = body.get("hold")
            if not isinstance(hold, bool):
                raise errors.invalid_request("admin.inhibit_apply needs {hold: bool}")
            self.metastore.inhibit_apply(hold)
            return {"applied_index": self.metastore.raft.applied_index}
        if req_type == "admin.set_delay":
            delay = body.get("delay_duration_ms")
            if not isinstance(delay, int) or isinstance(delay, bool) or delay < 1:
                raise errors.invalid_request("admin.set_delay needs {delay_duration_ms: int >= 1}")
            self.metastore.live_delay_ms = delay
            return {}
        if req_type == "admin.ms_write":
            key = body.get("key")
            if not isinstance(key, str) or not key.startswith("bench/"):
                raise errors.invalid_request("admin.ms_write writes keys under bench/ only")
            try:
                async with asyncio.timeout(self.timeout_s):
                    return {"index": await self.metastore.put(key, body.get("value"))}
            except TimeoutError:
                raise SchemaSyncError(
                    errors.TIMEOUT, "Meta Storage write timed out", True
                ) from None
        raise errors.invalid_request(f"unknown admin request {req_type!r}")

    def status(self) -> dict[str, Any]:
        raft = self.metastore.raft
        return {
            "node": self.name,
            "hlc_now": self.clock.now(),
            "wall_ms": self.clock.wall_ms(),
            "role": raft.role,
            "term": raft.term,
            "leader": raft.leader,
            "commit_index": raft.commit_index,
            "applied_index": raft.applied_index,
            "log_base_index": raft.log.base_index,
            "safe_ts": self.metastore.safe_time.current,
            "safe_ts_regressions": self.metastore.safe_ts_regressions,
            "catalog_version": self.metastore.catalogs.latest().version,
            "safe_time_waits": self.schema_sync.waits.to_json(),
            "hlc_ahead_count": self.clock.ahead_count,
            "apply_held": not raft.apply_gate.is_set(),
            "delay_duration_ms": self.metastore.live_delay_ms,
        }
