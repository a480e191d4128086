"""What the node core gives the transaction layer (docs/interfaces.md).

A module of its own so that ``node`` can import ``txn_service`` plainly while the txn layer
names these types without importing ``node`` back (no import cycle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from schemasync.catalog import CatalogHistory
from schemasync.config import NodeConfig
from schemasync.hlc import HybridClock
from schemasync.metastore import MetaStorage
from schemasync.runtime import Runtime
from schemasync.schema_sync import SchemaSync
from schemasync.wire import PeerClient

RequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class HandlerRegistry(Protocol):
    """Where the txn layer plugs its request handlers in (the node)."""

    def register_client_handler(self, prefix: str, handler: RequestHandler) -> None: ...

    def register_peer_handler(self, prefix: str, handler: RequestHandler) -> None: ...


@dataclass
class NodeContext:
    name: str
    config: NodeConfig
    toggles: frozenset[str]
    data_dir: Path
    hlc: HybridClock
    schema_sync: SchemaSync
    metastore: MetaStorage
    peers: PeerClient
    task_group: asyncio.TaskGroup
    runtime: Runtime

    @property
    def catalogs(self) -> CatalogHistory:
        """The locally applied catalog versions (replaced wholesale by a snapshot install)."""
        return self.metastore.catalogs
