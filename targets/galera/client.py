"""TargetClient for one Galera node: every op runs on the client's own node (multi-master).

PyMySQL is synchronous, so each op runs in a worker thread on the client's one connection; a
cancelled op abandons that connection (its state is unknown) and the next op opens a new one.
Timestamps are the node's `wsrep_last_committed`: the global write-set sequence number it has
applied, the same order on every node (opaque to the checker: `clock = none`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pymysql

from contract.target import ClientError
from schemasync import ddl as d
from schemasync.types import TypeInvalid
from targets.galera.catalog_log import LOG_TABLE, CatalogState, Pending
from targets.galera.ddl import ident, qualified, translate_ddl
from targets.galera.errors import REFUSED_DDL, error_of
from targets.galera.node_schema import (
    COLUMNS_SQL,
    STATUS_SQL,
    View,
    last_committed,
    marker,
    read_view,
    table_markers,
)
from targets.galera.server import APP_DB, CLIENT_PORT, USER
from targets.sql_values import from_db, sql_type, table_rows, to_db

log = logging.getLogger("schemachaos.target.galera")

CONNECT_TIMEOUT_S = 5
OP_TIMEOUT_S = 30
# Tables come and go by TOI even in an RSU run (an operator's practice: RSU is for ALTERs);
# a CREATE TABLE by RSU would leave the table on one node only.
TABLE_DDL = (d.CreateTable, d.DropTable, d.RenameTable)


class GaleraClient:
    """One connection to one node; DDL serialized through the run's CatalogState."""

    _ids = itertools.count(1)

    def __init__(
        self,
        node: str,
        hosts: Mapping[str, str],
        state: CatalogState,
        sync_wait: int,
        osu_method: str,
    ) -> None:
        self.node = node
        self.hosts = dict(hosts)
        self.state = state
        self.sync_wait = sync_wait
        self.osu_method = osu_method
        self._conn: Any = None

    # -- connections -------------------------------------------------------------------------
    def _open(self, node: str, sync_wait: int | None = None) -> Any:
        conn = pymysql.connect(
            host=self.hosts[node],
            port=CLIENT_PORT,
            user=USER,
            password="",
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=OP_TIMEOUT_S,
            write_timeout=OP_TIMEOUT_S,
            charset="utf8mb4",
        )
        wait = self.sync_wait if sync_wait is None else sync_wait
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION wsrep_sync_wait = {int(wait)}")
        return conn

    async def connect(self) -> None:
        await self._run(lambda conn: None, definite=True)

    async def _run(self, work: Callable[[Any], Any], definite: bool) -> Any:
        """work(conn) in a thread; errors become ClientErrors. `definite=False`: losing the
        connection after sending leaves the outcome unknown (`info`)."""
        conn = self._conn
        if conn is None:
            try:
                conn = await asyncio.to_thread(self._open, self.node)
            except Exception as e:
                code, retriable, _ = error_of(e)
                raise ClientError(
                    code, f"cannot connect to {self.node}: {e}", retriable=True
                ) from e
            self._conn = conn
        try:
            return await asyncio.to_thread(work, conn)
        except ClientError:
            raise
        except BaseException as e:
            if not isinstance(e, Exception):  # cancelled: the worker may still be mid-statement
                self._abandon(conn)
                raise
            code, retriable, lost = error_of(e)
            if lost:
                self._abandon(conn)
            raise ClientError(
                code, f"{self.node}: {e}", retriable=retriable, definite=definite or not lost
            ) from e

    def _abandon(self, conn: Any) -> None:
        """Forget a connection in an unknown state; a worker may still be using it."""
        if conn is not None and conn is self._conn:
            self._conn = None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(conn.close), 2)
            except Exception as e:
                log.debug("closing a connection of %s: %s", self.node, e)

    # -- reading the node's schema -----------------------------------------------------------
    def _unchanged(self, cur: Any, view: View) -> None:
        """MariaDB's DDL is not MVCC: a statement sees the table as it is when it runs, not
        as the transaction's snapshot had it. A DDL applied between the view and the
        statement would make the op's reported version a lie, so the op fails instead."""
        now = marker(cur, view.name)
        if now != view.version:
            raise ClientError(
                "SCHEMA_VERSION_MISMATCH",
                f"{view.name} changed on {self.node} during the op (version {view.version} "
                f"-> {now})",
                retriable=True,
            )

    # -- probe and status --------------------------------------------------------------------
    async def probe(self, value: dict[str, Any]) -> dict[str, Any]:
        """The node's schema now: its tables' markers mapped to the authoritative version."""
        if value.get("ts") is not None:
            raise ClientError(
                "INVALID_REQUEST", "Galera cannot answer for an explicit timestamp (clock none)"
            )
        table = value.get("table")

        def work(conn: Any) -> dict[str, Any]:
            with conn.cursor() as cur:
                markers = table_markers(cur)
                out: dict[str, Any] = {
                    "ts": last_committed(cur),
                    "catalog_version": self.state.version_of(markers),
                    "table_schema_version": None,
                    "columns": None,
                }
                view = read_view(cur, self.state, str(table)) if table is not None else None
                if view is not None:
                    cat = self.state.at(view.version)
                    known = cat.table(view.name) if cat else None
                    cur.execute(COLUMNS_SQL, (APP_DB, view.name))
                    nullable = {str(r[0]): r[1] == "YES" for r in cur.fetchall()}
                    cols = []
                    for name, typ in view.types.items():
                        col = known.column(name) if known else None
                        cols.append(
                            {
                                "id": col.id if col else -1,
                                "name": name,
                                "type": typ,
                                "nullable": nullable.get(name, True),
                                "default": col.default if col else None,
                            }
                        )
                    out["table_schema_version"] = view.schema_version
                    out["columns"] = cols
                return out

        result: dict[str, Any] = await self._run(work, definite=True)
        return result

    async def status(self) -> dict[str, Any]:
        def work(conn: Any) -> dict[str, Any]:
            with conn.cursor() as cur:
                # The node's own state: no causal wait (a node out of the primary component
                # must still say so rather than time out).
                cur.execute("SET SESSION wsrep_sync_wait = 0")
                try:
                    cur.execute(STATUS_SQL)
                    status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                    markers = table_markers(cur)
                finally:
                    cur.execute(f"SET SESSION wsrep_sync_wait = {int(self.sync_wait)}")
            seqno = int(status.get("wsrep_last_committed", "0") or 0)
            return {
                "node": self.node,
                "role": status.get("wsrep_cluster_status", "unknown").lower(),
                "state": status.get("wsrep_local_state_comment", ""),
                "hlc_now": seqno,
                "applied_index": seqno,
                "catalog_version": self.state.version_of(markers),
            }

        result: dict[str, Any] = await self._run(work, definite=True)
        return result

    # -- DDL ---------------------------------------------------------------------------------
    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]:
        """Serialized with every other DDL of the run: decide an undecided earlier one, log
        `pending`, run the statement (which stamps the marker), log `done` (catalog_log.py)."""
        stmt = str(value["stmt"])
        try:
            cmd = d.parse_ddl(stmt)
        except d.DdlInvalid as e:
            raise ClientError("DDL_INVALID", e.message) from e
        async with self.state.lock:
            if self.state.pending is not None:
                await self.resolve_pending()
            try:
                catalog = self.state.next(cmd, stmt)
                plan = translate_ddl(cmd, catalog.version, self.state.latest.tables)
            except (d.DdlInvalid, TypeInvalid) as e:
                raise ClientError("DDL_INVALID", str(e)) from e
            dropped = cmd.table if isinstance(cmd, d.DropTable) else None
            row = json.dumps(catalog.to_json())
            rsu = self.osu_method == "RSU" and not isinstance(cmd, TABLE_DDL)
            pending = Pending(catalog.version, self.node, plan.table, dropped, catalog, not rsu)

            def log_pending(conn: Any) -> None:
                with conn.cursor() as cur:
                    cur.execute(
                        f"REPLACE INTO {LOG_TABLE} VALUES (%s, 'pending', %s, 0, %s, %s)",
                        (catalog.version, self.node, stmt, row),
                    )

            await self._run(log_pending, definite=True)
            self.state.pending = pending

            def run_ddl(conn: Any) -> None:
                with conn.cursor() as cur:
                    cur.execute(f"SET SESSION wsrep_OSU_method = '{'RSU' if rsu else 'TOI'}'")
                    try:
                        for sql in plan.statements:
                            cur.execute(sql)
                    finally:
                        cur.execute("SET SESSION wsrep_OSU_method = 'TOI'")

            try:
                await self._run(run_ddl, definite=False)
            except ClientError as e:
                if e.definite and e.code in REFUSED_DDL:
                    self.state.pending = None  # refused before it ran: N is free again
                    await self._forget(catalog.version)
                else:
                    # TOI replicates the statement before running it: an interrupted or lost
                    # DDL may have taken effect elsewhere. The marker decides, later.
                    e.definite = False
                raise
            activation = await self._done(catalog.version)
            self.state.pending = None
            self.state.commit(
                dataclasses.replace(catalog, activation_ts=activation, safe_ts=activation),
                plan.table,
                dropped,
            )
        return {"catalog_version": catalog.version, "activation_ts": activation}

    async def _forget(self, version: int) -> None:
        def work(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.execute(
                    f"DELETE FROM {LOG_TABLE} WHERE catalog_version = %s AND state = 'pending'",
                    (version,),
                )

        try:
            await self._run(work, definite=True)
        except ClientError as e:  # the marker is absent: catalog_log drops the row anyway
            log.info("pending catalog version %d not removed: %s", version, e)

    async def _done(self, version: int) -> int:
        """Mark version done at the write-set position seen after it (an upper bound of the
        DDL's own seqno). A failure here leaves the row pending, for the marker to decide."""

        def work(conn: Any) -> int:
            with conn.cursor() as cur:
                seqno = last_committed(cur)
                cur.execute(
                    f"UPDATE {LOG_TABLE} SET state = 'done', activation_ts = %s "
                    "WHERE catalog_version = %s",
                    (seqno, version),
                )
                return seqno

        try:
            result: int = await self._run(work, definite=True)
            return result
        except ClientError as e:
            log.info("catalog version %d not marked done on %s: %s", version, self.node, e)
            return 0

    async def resolve_pending(self) -> None:
        """Decide the pending version by its marker, or raise UNAVAILABLE (definite: the new
        DDL was not sent) when no node that can tell answers."""
        pending = self.state.pending
        if pending is None:
            return
        where = [pending.origin]
        if pending.replicated:  # TOI: on every node, so any primary node can tell
            where += [n for n in self.hosts if n != pending.origin]
        why = "no node answered"
        for node in where:
            try:
                took, seqno = await asyncio.wait_for(
                    asyncio.to_thread(self._decide, node, pending), OP_TIMEOUT_S
                )
            except Exception as e:
                why = f"{node}: {e}"
                continue
            self.state.pending = None
            if took:
                cat = dataclasses.replace(pending.catalog, activation_ts=seqno, safe_ts=seqno)
                self.state.commit(cat, pending.table, pending.dropped)
            await asyncio.to_thread(self._record, node, pending.version, took, seqno)
            return
        raise ClientError(
            "UNAVAILABLE",
            f"the outcome of catalog version {pending.version} is not known yet ({why})",
            retriable=True,
        )

    def _decide(self, node: str, pending: Pending) -> tuple[bool, int]:
        conn = self._open(node, sync_wait=15)
        try:
            with conn.cursor() as cur:
                markers = table_markers(cur)
                seqno = last_committed(cur)
        finally:
            conn.close()
        if pending.table is None:
            return pending.dropped not in markers, seqno
        return markers.get(pending.table) == pending.version, seqno

    def _record(self, node: str, version: int, took: bool, seqno: int) -> None:
        try:
            conn = self._open(node)
        except pymysql.err.MySQLError as e:
            log.info("catalog version %d: outcome not written: %s", version, e)
            return
        try:
            with conn.cursor() as cur:
                if took:
                    cur.execute(
                        f"UPDATE {LOG_TABLE} SET state = 'done', activation_ts = %s "
                        "WHERE catalog_version = %s",
                        (seqno, version),
                    )
                else:
                    cur.execute(f"DELETE FROM {LOG_TABLE} WHERE catalog_version = %s", (version,))
        except pymysql.err.MySQLError as e:
            log.info("catalog version %d: outcome not written: %s", version, e)
        finally:
            conn.close()

    # -- transactions ------------------------------------------------------------------------
    async def txn(self, value: dict[str, Any]) -> dict[str, Any]:
        """REPEATABLE READ on the client's node. Each table's version is the one its marker
        names on this node at the table's first use (MariaDB validates nothing against it)."""
        ops = list(value.get("ops") or [])
        partial: dict[str, Any] = {
            "txn_id": f"{self.node}:{id(self) & 0xFFFF:x}:{next(self._ids)}",
            "begin_ts": 0,
            "commit_ts": None,
            "ops": [],
            "tables": {},
            "participants": [],
        }
        stage = ["begin"]
        try:
            await self._run(lambda conn: self._txn(conn, ops, partial, stage), definite=False)
        except ClientError as e:
            if stage[0] != "commit":
                e.definite = True  # not committed: the server rolls back a lost session
            e.value = partial
            raise
        return partial

    def _txn(
        self, conn: Any, ops: list[dict[str, Any]], out: dict[str, Any], stage: list[str]
    ) -> None:
        views: dict[str, View] = {}
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            try:
                out["begin_ts"] = last_committed(cur)
                for op in ops:
                    table = str(op["table"])
                    if table not in views:
                        view = read_view(cur, self.state, table)
                        if view is None:
                            raise ClientError(
                                "TABLE_NOT_FOUND", f"table {table} does not exist on {self.node}"
                            )
                        views[table] = view
                        out["tables"][table] = {
                            "base_ts": out["begin_ts"],
                            "schema_version": view.schema_version,
                        }
                    result = self._op(cur, op, views[table])
                    self._unchanged(cur, views[table])
                    out["ops"].append(
                        {
                            **op,
                            "op_ts": out["begin_ts"],
                            "node": self.node,
                            "schema_version": views[table].schema_version,
                            "result": result,
                        }
                    )
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except Exception as e:
                    log.debug("rollback on %s: %s", self.node, e)
                raise
            stage[0] = "commit"
            cur.execute("COMMIT")
            out["commit_ts"] = last_committed(cur)
        out["participants"] = [
            {
                "node": self.node,
                "table": t,
                "partition": 0,
                "commit_schema_version": v.schema_version,
            }
            for t, v in sorted(views.items())
        ]

    def _op(self, cur: Any, op: Mapping[str, Any], view: View) -> Any:
        table, key, kind = qualified(view.name), int(op["key"]), op["op"]
        if kind == "r":
            cur.execute(f"SELECT * FROM {table} WHERE `key` = %s", (key,))
            row = cur.fetchone()
            if row is None:
                return None
            names = [c[0] for c in cur.description]
            return {
                n: from_db(sql_type(view.types.get(n)), v)
                for n, v in zip(names, row, strict=True)
                if n != "key"
            }
        if kind == "w":
            row = dict(op.get("row") or {})
            for name in row:
                if name not in view.types:
                    raise ClientError(
                        "SCHEMA_VERSION_MISMATCH",
                        f"{view.name} has no column {name} on {self.node}",
                        retriable=True,
                    )
            cols = ["key", *row]
            values = [key, *(to_db(view.types[n], v) for n, v in row.items())]
            updates = ", ".join(f"{ident(n)} = VALUES({ident(n)})" for n in row) or "`key` = `key`"
            cur.execute(
                f"INSERT INTO {table} ({', '.join(ident(c) for c in cols)}) "
                f"VALUES ({', '.join(['%s'] * len(cols))}) ON DUPLICATE KEY UPDATE {updates}",
                values,
            )
            return None
        if kind == "d":
            cur.execute(f"DELETE FROM {table} WHERE `key` = %s", (key,))
            return None
        if kind == "ix":
            index = str(op.get("index"))
            columns = view.indexes.get(index)
            if not columns or columns[0] not in view.types:
                raise ClientError("INVALID_REQUEST", f"{view.name} has no index {index}")
            column = columns[0]
            lookup = to_db(view.types[column], op.get("lookup"))
            cur.execute(
                f"SELECT `key` FROM {table} WHERE {ident(column)} = %s ORDER BY `key`", (lookup,)
            )
            return [int(r[0]) for r in cur.fetchall()]
        raise ClientError("INVALID_REQUEST", f"unknown micro-op {kind!r}")

    # -- final reads -------------------------------------------------------------------------
    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]:
        """A whole table (or index) as this node holds it: every node keeps its own copy."""
        result: dict[str, Any] = await self._run(
            lambda conn: self._final(conn, value), definite=True
        )
        return result

    def _final(self, conn: Any, value: Mapping[str, Any]) -> dict[str, Any]:
        table = str(value["table"])
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                ts = last_committed(cur)
                view = read_view(cur, self.state, table)
                if view is None:
                    raise ClientError("TABLE_NOT_FOUND", f"table {table} does not exist")
                index = value.get("index")
                if index:
                    columns = view.indexes.get(str(index))
                    if columns is None:
                        raise ClientError("INVALID_REQUEST", f"{table} has no index {index}")
                    cols = ", ".join(ident(c) for c in columns)
                    cur.execute(
                        f"SELECT `key`, {cols} FROM {qualified(table)} "
                        f"FORCE INDEX ({ident(str(index))}) ORDER BY {cols}, `key`"
                    )
                    found = cur.fetchall()
                    self._unchanged(cur, view)
                    entries = [
                        {
                            "key": int(r[0]),
                            "values": {
                                c: from_db(sql_type(view.types.get(c)), v)
                                for c, v in zip(columns, r[1:], strict=True)
                            },
                        }
                        for r in found
                    ]
                    return {"table": table, "index": index, "ts": ts, "entries": entries}
                cur.execute(f"SELECT * FROM {qualified(table)} ORDER BY `key`")
                names = [c[0] for c in cur.description]
                found = cur.fetchall()
                self._unchanged(cur, view)
                return {
                    "table": table,
                    "ts": ts,
                    "schema_version": view.schema_version,
                    "rows": table_rows(names, found, view.types),
                }
            finally:
                cur.execute("ROLLBACK")
