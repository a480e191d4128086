"""A schemasync node process: HLC, Meta Storage replica, schema sync, probes, admin.

``python -m schemasync.node --config FILE``. Three TCP ports (client, metastore, peer); client
and peer requests are dispatched by type prefix, so the txn layer plugs in with
``register_client_handler`` / ``register_peer_handler`` and the ``NodeContext``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from schemasync import errors
from schemasync.admin import Admin
from schemasync.config import ConfigError, NodeConfig, load_config
from schemasync.context import NodeContext, RequestHandler
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock
from schemasync.metastore import MetaStorage
from schemasync.probe import handle_probe, handle_schema_get
from schemasync.runtime import Runtime
from schemasync.schema_sync import SchemaSync
from schemasync.toggles import NO_ACK_WAIT
from schemasync.transport import Listener
from schemasync.txn_service import install as install_txn_service
from schemasync.wire import MAX_FRAME, PeerClient, serve_connection

log = logging.getLogger("schemasync.node")

__all__ = ["Node", "NodeContext", "main"]

ADMIN_TYPES = (
    "admin.status",
    "admin.catalog_log",
    "admin.inhibit_apply",
    "admin.set_delay",
    "admin.ms_write",
)


def _source_address(config: NodeConfig) -> str | None:
    """The address outgoing peer traffic leaves from: our own bind address when it is a
    specific one, so that partition rules can match the sending node."""
    bind = config.nodes[config.name].bind
    if bind in ("", "0.0.0.0", "::"):
        return None
    return bind


class _Shutdown(Exception):
    """Raised inside the node's TaskGroup to end it on SIGTERM/SIGINT."""


class Node:
    """One node: owns the servers, the Meta Storage replica and every background task."""

    def __init__(self, config: NodeConfig, runtime: Runtime | None = None) -> None:
        self.config = config
        self.name = config.name
        self.runtime = runtime if runtime is not None else Runtime()
        self.hlc = HybridClock(config.max_clock_skew_ms, self.runtime.wall_ms)
        source = _source_address(config)
        self._raft_peers = PeerClient(
            {n: (a.host, a.metastore_port) for n, a in config.nodes.items()},
            self.hlc.now,
            self.hlc.update,
            source,
            self.runtime.transport,
        )
        self.peers = PeerClient(
            {n: (a.host, a.peer_port) for n, a in config.nodes.items()},
            self.hlc.now,
            self.hlc.update,
            source,
            self.runtime.transport,
        )
        self.metastore = MetaStorage(config, self.hlc, self._raft_peers.call, self.runtime)
        self.schema_sync = SchemaSync(
            self.hlc,
            self.metastore.safe_time,
            lambda: self.metastore.catalogs,
            self.metastore.delay_ms,
            config.max_clock_skew_ms,
            config.toggles,
        )
        self.admin = Admin(
            self.name, self.hlc, self.metastore, self.schema_sync, config.request_timeout_ms / 1000
        )
        self._client_handlers: dict[str, RequestHandler] = {}
        self._peer_handlers: dict[str, RequestHandler] = {}
        self.request_timeout_s = config.request_timeout_ms / 1000
        self.register_client_handler("ddl", self._handle_ddl)
        self.register_client_handler(
            "probe", lambda b: handle_probe(b, self.hlc, self.schema_sync, self.request_timeout_s)
        )
        self.register_client_handler("schema.", self._handle_schema)
        for admin_type in ADMIN_TYPES:
            self.register_client_handler(admin_type, self._admin_handler(admin_type))
        self.context: NodeContext | None = None

    # ---- plug-in points ------------------------------------------------------------------

    def register_client_handler(self, prefix: str, handler: RequestHandler) -> None:
        """Route client-port requests whose type starts with ``prefix`` to ``handler``."""
        self._client_handlers[prefix] = handler

    def register_peer_handler(self, prefix: str, handler: RequestHandler) -> None:
        """Route peer-port requests whose type starts with ``prefix`` to ``handler``."""
        self._peer_handlers[prefix] = handler

    @staticmethod
    def _route(handlers: dict[str, RequestHandler], req_type: str) -> RequestHandler:
        best = max((p for p in handlers if req_type.startswith(p)), key=len, default=None)
        if best is None:
            raise errors.invalid_request(f"unknown request type {req_type!r}")
        return handlers[best]

    async def _dispatch_client(self, req_type: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._route(self._client_handlers, req_type)(body)

    async def _dispatch_peer(self, req_type: str, body: dict[str, Any]) -> dict[str, Any]:
        if req_type.startswith("raft."):
            # Raft traffic belongs to the metastore port only.
            raise errors.invalid_request("raft requests go to the metastore port")
        return await self._route(self._peer_handlers, req_type)(body)

    # ---- core handlers --------------------------------------------------------------------

    async def _handle_ddl(self, body: dict[str, Any]) -> dict[str, Any]:
        stmt = body.get("stmt")
        if not isinstance(stmt, str) or not stmt.strip():
            raise errors.invalid_request("ddl needs {stmt: str}")
        try:
            async with asyncio.timeout(self.request_timeout_s):
                if NO_ACK_WAIT in self.config.toggles:
                    outcome = await self.metastore.propose_ddl_outcome(stmt)
                    return {
                        "catalog_version": outcome.catalog_version,
                        "activation_ts": outcome.activation_ts,
                    }
                cat = await self.metastore.propose_ddl(stmt)
                await self.schema_sync.wait_ddl_ack(cat.activation_ts)
        except TimeoutError:
            raise SchemaSyncError(
                errors.TIMEOUT,
                f"DDL not acknowledged within {self.request_timeout_s:.1f}s (outcome unknown)",
                True,
            ) from None
        return {"catalog_version": cat.version, "activation_ts": cat.activation_ts}

    async def _handle_schema(self, body: dict[str, Any]) -> dict[str, Any]:
        return handle_schema_get(body, self.schema_sync)

    def _admin_handler(self, req_type: str) -> RequestHandler:
        async def handler(body: dict[str, Any]) -> dict[str, Any]:
            return await self.admin.handle(req_type, body)

        return handler

    # ---- lifecycle --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (by default: until SIGTERM/SIGINT)."""
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop.set)

        async def stop_on_signal() -> None:
            await stop.wait()
            log.info("node %s: shutting down", self.name)
            raise _Shutdown

        try:
            async with asyncio.TaskGroup() as tg:
                self.context = NodeContext(
                    name=self.name,
                    config=self.config,
                    toggles=self.config.toggles,
                    data_dir=self.config.data_dir,
                    hlc=self.hlc,
                    schema_sync=self.schema_sync,
                    metastore=self.metastore,
                    peers=self.peers,
                    task_group=tg,
                    runtime=self.runtime,
                )
                self._install_txn_service(self.context)
                servers = await self._start_servers()
                tg.create_task(self.metastore.run())
                tg.create_task(self._announce_ready())
                tg.create_task(stop_on_signal())
                for server in servers:
                    tg.create_task(server.serve_forever())
        except* _Shutdown:
            pass
        finally:
            self._raft_peers.close()
            self.peers.close()

    def _install_txn_service(self, ctx: NodeContext) -> None:
        install_txn_service(ctx, self)

    async def _start_servers(self) -> list[Listener]:
        me = self.config.me
        ports: list[tuple[str, int, Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]]]
        ports = [
            ("client", me.client_port, self._dispatch_client),
            ("metastore", me.metastore_port, self.metastore.raft.handle),
            ("peer", me.peer_port, self._dispatch_peer),
        ]
        servers = []
        for port_name, port, handler in ports:

            async def on_connect(
                reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter,
                handler: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] = handler,
                port_name: str = port_name,
            ) -> None:
                # asyncio.Server owns this task and nobody awaits it: at shutdown it ends
                # quietly instead of surfacing a cancellation in asyncio's stream callback.
                with contextlib.suppress(asyncio.CancelledError):
                    await serve_connection(
                        reader, writer, handler, self.hlc.now, self.hlc.update, port_name
                    )

            server = await self.runtime.transport.listen(
                me.bind, port, on_connect, limit=MAX_FRAME + 8
            )
            log.info("node %s: %s port listening on %s:%d", self.name, port_name, me.bind, port)
            servers.append(server)
        return servers

    async def _announce_ready(self) -> None:
        raft = self.metastore.raft
        while raft.leader is None or raft.applied_index < 1:
            await asyncio.sleep(0.02)
        log.info(
            "ready: node %s, leader %s, term %d, applied %d, catalog version %d",
            self.name,
            raft.leader,
            raft.term,
            raft.applied_index,
            self.metastore.catalogs.latest().version,
        )


def _setup_logging(config: NodeConfig) -> None:
    handler: logging.Handler
    if config.log_file is not None:
        config.log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(config.log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s {config.name} %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemasync.node")
    parser.add_argument("--config", required=True, help="the node's TOML file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 2
    except OSError as e:
        print(f"config error: {args.config}: data_dir: {e}", file=sys.stderr)
        return 2
    _setup_logging(config)
    log.info("node %s starting (toggles: %s)", config.name, sorted(config.toggles) or "none")
    if config.extra:
        log.warning(
            "config keys not read by the core (txn layer options?): %s", sorted(config.extra)
        )
    if config.idle_safe_time_interval_ms * 2 > config.delay_duration_ms:
        log.warning(
            "idle_safe_time_interval_ms %d exceeds delay_duration_ms/2 (%d): schema waits"
            " will block between SyncTime commands",
            config.idle_safe_time_interval_ms,
            config.delay_duration_ms // 2,
        )
    try:
        asyncio.run(Node(config).run())
    except (OSError, ExceptionGroup) as e:
        log.error("node %s: stopped by an error: %s", config.name, e, exc_info=e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
