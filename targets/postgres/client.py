"""The PostgreSQL TargetClient: ops of the interface as SQL on the primary or the client's
node, with the bookkeeping that gives PostgreSQL a catalog version."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract.target import ClientError
from schemasync import ddl as d
from schemasync.types import TypeInvalid
from targets.postgres.catalog import (
    CATALOG_COLUMNS,
    CATALOG_SQL,
    interface_type,
    table_json,
)
from targets.postgres.ddl import DdlPlanSql, translate_ddl
from targets.postgres.sql import (
    CONNECT_TIMEOUT_S,
    LSN_NOW,
    META,
    error_code,
    ident,
    qualified,
)
from targets.sql_values import from_db, sql_type, table_rows, to_db

log = logging.getLogger("schemachaos.target.postgres")

READ_OPS = frozenset({"r", "ix"})


@dataclass(frozen=True)
class TableView:
    """A table as one transaction saw it: version, columns with types, indexes."""

    name: str
    schema_version: int
    types: Mapping[str, str]
    indexes: Mapping[str, tuple[str, ...]]


def _view(row: Sequence[Any]) -> TableView:
    t = table_json(row)
    return TableView(
        str(row[0]),
        int(t["schema_version"]),
        {c["name"]: c["type"] for c in t["columns"]},
        {i["name"]: tuple(i["columns"]) for i in t["indexes"]},
    )


class PostgresClient:
    """TargetClient for one node. Probes and read-only transactions run on the node itself
    (REPEATABLE READ on a standby, which refuses SERIALIZABLE); DDL, writing transactions and
    final reads go to the primary."""

    _ids = itertools.count(1)

    def __init__(
        self, node: str, primary: str, own: Mapping[str, Any], primary_info: Mapping[str, Any]
    ) -> None:
        self.node = node
        self.primary = primary
        self._own_info = dict(own)
        self._primary_info = dict(primary_info)
        self._own: Any = None
        self._prim: Any = None

    async def connect(self) -> None:
        self._own = await self._open(self._own_info, self.node)

    async def _open(self, info: Mapping[str, Any], node: str) -> Any:
        import psycopg

        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S + 1):
                return await psycopg.AsyncConnection.connect(
                    **info, autocommit=True, prepare_threshold=None
                )
        except (psycopg.Error, OSError, TimeoutError) as e:
            raise ClientError(
                "UNAVAILABLE", f"cannot connect to {node}: {e}", retriable=True, definite=True
            ) from e

    async def _conn(self, primary: bool) -> Any:
        """A live connection to the node (or the primary), reopened after a broken one."""
        if primary and self.node != self.primary:
            if self._prim is None or self._prim.closed or self._prim.broken:
                self._prim = await self._open(self._primary_info, self.primary)
            return self._prim
        if self._own is None or self._own.closed or self._own.broken:
            self._own = await self._open(self._own_info, self.node)
        return self._own

    async def _drop(self, conn: Any) -> None:
        """Forget a connection whose state is unknown (cancelled mid-statement)."""
        if conn is None:
            return
        if conn is self._own:
            self._own = None
        if conn is self._prim:
            self._prim = None
        try:
            async with asyncio.timeout(2):
                await conn.close()
        except Exception as e:
            log.debug("closing a connection of %s: %s", self.node, e)

    # -- ops -------------------------------------------------------------------------------
    async def probe(self, value: dict[str, Any]) -> dict[str, Any]:
        """Catalog version, table version and columns from one statement's snapshot."""
        if value.get("ts") is not None:
            raise ClientError(
                "INVALID_REQUEST",
                "PostgreSQL cannot answer for an explicit timestamp (clock none)",
                definite=True,
            )
        table = value.get("table")
        conn = await self._conn(primary=False)
        sql = (
            f"SELECT (SELECT catalog_version FROM {META}.schema_version WHERE id = 1), "
            f"{LSN_NOW}, (SELECT row_to_json(x) FROM ({CATALOG_SQL} AND c.relname = %s) x)"
        )
        row = await self._guard(conn, self._fetchone(conn, sql, (table,)), definite=True)
        version, lsn, table_row = row
        out: dict[str, Any] = {
            "ts": int(lsn),
            "catalog_version": int(version),
            "table_schema_version": None,
            "columns": None,
        }
        if table is not None and table_row is not None:
            t = table_json([table_row[k] for k in CATALOG_COLUMNS])
            out["table_schema_version"] = t["schema_version"]
            out["columns"] = t["columns"]
        return out

    async def _fetchone(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur = await conn.execute(sql, params)
        return await cur.fetchone()

    async def _guard(self, conn: Any, work: Any, definite: bool) -> Any:
        """Await work; map what it raised to a ClientError, dropping a connection left in an
        unknown state (also on cancellation: the runner's timeout)."""
        import psycopg

        try:
            return await work
        except BaseException as e:
            if isinstance(e, ClientError):
                raise
            if not isinstance(e, psycopg.Error) or conn.broken:
                await self._drop(conn)
            if not isinstance(e, Exception):
                raise
            code, retriable = error_code(e)
            broken = code in ("UNAVAILABLE", "TIMEOUT", "INTERNAL")
            raise ClientError(
                code, str(e).strip(), retriable=retriable, definite=definite or not broken
            ) from e

    async def status(self) -> dict[str, Any]:
        conn = await self._conn(primary=False)
        row = await self._guard(
            conn,
            self._fetchone(
                conn,
                f"SELECT pg_is_in_recovery(), {LSN_NOW}, "
                f"(SELECT catalog_version FROM {META}.schema_version WHERE id = 1)",
            ),
            definite=True,
        )
        in_recovery, lsn, version = row
        return {
            "node": self.node,
            "role": "standby" if in_recovery else "primary",
            "hlc_now": int(lsn),
            "lsn": int(lsn),
            "applied_index": int(lsn),  # what the nemeses read as "how far this node is"
            "catalog_version": int(version),
        }

    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]:
        """One transaction on the primary: bump the catalog version (the row lock orders DDL),
        run the statement, bump the table's version, append the catalog to the history."""
        try:
            cmd = d.parse_ddl(str(value["stmt"]))
        except d.DdlInvalid as e:
            raise ClientError("DDL_INVALID", e.message, definite=True) from e
        conn = await self._conn(primary=True)
        stage = ["begin"]
        try:
            return await self._guard_ddl(conn, self._ddl(conn, cmd, str(value["stmt"]), stage))
        except ClientError as e:
            if stage[0] == "commit" and e.code not in ("TXN_ABORTED", "LOCK_CONFLICT"):
                e.definite = False  # it may have committed (e.g. a cancelled sync-rep wait)
            raise

    async def _guard_ddl(self, conn: Any, work: Any) -> dict[str, Any]:
        import psycopg.errors as pe

        try:
            result: dict[str, Any] = await self._guard(conn, work, definite=True)
            return result
        except ClientError as e:
            cause = e.__cause__
            if isinstance(cause, pe.UndefinedTable):
                raise
            invalid = pe.ProgrammingError | pe.DataError | pe.IntegrityError | pe.NotSupportedError
            if isinstance(cause, invalid):
                raise ClientError("DDL_INVALID", e.message, definite=True) from cause
            raise

    async def _ddl(
        self, conn: Any, cmd: d.DdlCommand, stmt: str, stage: list[str]
    ) -> dict[str, Any]:
        async with conn.cursor() as cur:
            await cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                await cur.execute("SET LOCAL lock_timeout = '5s'")
                await cur.execute(
                    f"UPDATE {META}.schema_version SET catalog_version = catalog_version + 1 "
                    "WHERE id = 1 RETURNING catalog_version"
                )
                row = await cur.fetchone()
                version = int(row[0])
                current, index_table = await self._ddl_context(cur, cmd)
                try:
                    plan = translate_ddl(cmd, current, index_table)
                except TypeInvalid as e:
                    raise ClientError("DDL_INVALID", str(e), definite=True) from e
                for sql in plan.statements:
                    await cur.execute(sql)
                await self._bump(cur, plan)
                await cur.execute(CATALOG_SQL)
                tables = {str(r[0]): table_json(r) for r in await cur.fetchall()}
                await cur.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
                row = await cur.fetchone()
                activation = int(row[0])
                await cur.execute(
                    f"INSERT INTO {META}.catalog_history VALUES (%s, %s, %s, %s)",
                    (version, activation, stmt, json.dumps(tables)),
                )
            except BaseException:
                if not conn.broken:
                    try:
                        async with asyncio.timeout(5):
                            await cur.execute("ROLLBACK")
                    except BaseException as e:
                        log.debug("rollback on %s: %s", self.node, e)
                raise
            stage[0] = "commit"
            await cur.execute("COMMIT")
        return {"catalog_version": version, "activation_ts": activation}

    async def _ddl_context(
        self, cur: Any, cmd: d.DdlCommand
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The changed column's metadata and DROP INDEX's table, read inside the DDL's txn."""
        current = None
        column = getattr(cmd, "column", None)
        if isinstance(column, str) and isinstance(cmd.table, str):
            await cur.execute(
                "SELECT a.attnum, format_type(a.atttypid, a.atttypmod), "
                "col_description(a.attrelid, a.attnum) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attname = %s AND NOT a.attisdropped",
                (qualified(cmd.table), column),
            )
            row = await cur.fetchone()
            if row is not None:
                meta = json.loads(row[2]) if row[2] else {}
                current = {"type": interface_type(str(row[1]), meta), **meta}
                current["type"] = interface_type(str(row[1]), meta)
        index_table = None
        if isinstance(cmd, d.DropIndex):
            await cur.execute(
                "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid "
                "WHERE x.indexrelid = to_regclass(%s)",
                (f"public.{ident(cmd.index)}",),
            )
            row = await cur.fetchone()
            index_table = str(row[0]) if row else None
        return current, index_table

    async def _bump(self, cur: Any, plan: DdlPlanSql) -> None:
        tv = f"{META}.table_versions"
        if plan.table is None:
            return
        if plan.version_change == "create":
            await cur.execute(
                f"INSERT INTO {tv} VALUES (%s, 1) ON CONFLICT (table_name) "
                "DO UPDATE SET schema_version = 1",
                (plan.table,),
            )
        elif plan.version_change == "drop":
            await cur.execute(f"DELETE FROM {tv} WHERE table_name = %s", (plan.table,))
        elif plan.version_change == "rename":
            await cur.execute(
                f"UPDATE {tv} SET table_name = %s, schema_version = schema_version + 1 "
                "WHERE table_name = %s",
                (plan.new_name, plan.table),
            )
        else:
            await cur.execute(
                f"UPDATE {tv} SET schema_version = schema_version + 1 WHERE table_name = %s",
                (plan.table,),
            )

    async def txn(self, value: dict[str, Any]) -> dict[str, Any]:
        """SERIALIZABLE on the primary; read-only ones on a standby at REPEATABLE READ.
        Each table's version is read in the transaction's snapshot at its first use: that is
        the version the transaction worked with (PostgreSQL validates nothing against it)."""
        ops = list(value.get("ops") or [])
        read_only = all(op.get("op") in READ_OPS for op in ops)
        on_primary = not read_only or self.node == self.primary
        conn = await self._conn(primary=on_primary)
        where = self.primary if on_primary else self.node
        partial: dict[str, Any] = {
            "txn_id": f"{where}:{id(self) & 0xFFFF:x}:{next(self._ids)}",
            "begin_ts": 0,
            "commit_ts": None,
            "ops": [],
            "tables": {},
            "participants": [],
        }
        stage = ["begin"]
        try:
            await self._guard(conn, self._txn(conn, ops, where, partial, stage), definite=True)
        except ClientError as e:
            if stage[0] == "commit" and e.code not in ("TXN_ABORTED", "LOCK_CONFLICT"):
                e.definite = False
            elif stage[0] != "commit" and e.code in ("UNAVAILABLE", "TIMEOUT", "INTERNAL"):
                e.definite = True  # not committed: the server rolls back a lost session
            e.value = partial
            raise
        return partial

    async def _txn(
        self,
        conn: Any,
        ops: list[dict[str, Any]],
        where: str,
        out: dict[str, Any],
        stage: list[str],
    ) -> None:
        level = (
            "SERIALIZABLE" if where == self.primary else "ISOLATION LEVEL REPEATABLE READ READ ONLY"
        )
        views: dict[str, TableView] = {}
        async with conn.cursor() as cur:
            if level == "SERIALIZABLE":
                await cur.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            else:
                await cur.execute(f"BEGIN {level}")
            try:
                await cur.execute(f"SELECT {LSN_NOW}")
                out["begin_ts"] = int((await cur.fetchone())[0])
                for op in ops:
                    table = str(op["table"])
                    if table not in views:
                        await cur.execute(f"{CATALOG_SQL} AND c.relname = %s", (table,))
                        row = await cur.fetchone()
                        if row is None:
                            raise ClientError(
                                "TABLE_NOT_FOUND", f"table {table} does not exist", definite=True
                            )
                        views[table] = _view(row)
                        out["tables"][table] = {
                            "base_ts": out["begin_ts"],
                            "schema_version": views[table].schema_version,
                        }
                    result = await self._op(cur, op, views[table])
                    await cur.execute(f"SELECT {LSN_NOW}")
                    op_ts = int((await cur.fetchone())[0])
                    out["ops"].append(
                        {
                            **op,
                            "op_ts": op_ts,
                            "node": where,
                            "schema_version": views[table].schema_version,
                            "result": result,
                        }
                    )
            except BaseException:
                if not conn.broken:
                    try:
                        async with asyncio.timeout(5):
                            await cur.execute("ROLLBACK")
                    except BaseException as e:
                        log.debug("rollback on %s: %s", self.node, e)
                raise
            stage[0] = "commit"
            await cur.execute("COMMIT")
            await cur.execute(f"SELECT {LSN_NOW}")
            out["commit_ts"] = int((await cur.fetchone())[0])
        out["participants"] = [
            {"node": where, "table": t, "partition": 0, "commit_schema_version": v.schema_version}
            for t, v in sorted(views.items())
        ]

    async def _op(self, cur: Any, op: Mapping[str, Any], view: TableView) -> Any:
        table, key, kind = qualified(view.name), int(op["key"]), op["op"]
        if kind == "r":
            await cur.execute(f"SELECT * FROM {table} WHERE key = %s", (key,))
            row = await cur.fetchone()
            if row is None:
                return None
            names = [c.name for c in cur.description]
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
                        f"{view.name} has no column {name} at version {view.schema_version}",
                        retriable=True,
                        definite=True,
                    )
            cols = ["key", *row]
            values = [key, *(to_db(view.types[n], v) for n, v in row.items())]
            updates = ", ".join(f"{ident(n)} = EXCLUDED.{ident(n)}" for n in row)
            conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
            await cur.execute(
                f"INSERT INTO {table} ({', '.join(ident(c) for c in cols)}) "
                f"VALUES ({', '.join(['%s'] * len(cols))}) ON CONFLICT (key) {conflict}",
                values,
            )
            return None
        if kind == "d":
            await cur.execute(f"DELETE FROM {table} WHERE key = %s", (key,))
            return None
        if kind == "ix":
            index = str(op.get("index"))
            columns = view.indexes.get(index)
            if not columns:
                raise ClientError(
                    "INVALID_REQUEST", f"{view.name} has no index {index}", definite=True
                )
            column = columns[0]
            lookup = to_db(view.types[column], op.get("lookup"))
            await cur.execute(
                f"SELECT key FROM {table} WHERE {ident(column)} = %s ORDER BY key", (lookup,)
            )
            return [int(r[0]) for r in await cur.fetchall()]
        raise ClientError("INVALID_REQUEST", f"unknown micro-op {kind!r}", definite=True)

    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]:
        """A whole table (or index) read on the primary, which has every acknowledged write."""
        conn = await self._conn(primary=True)
        result: dict[str, Any] = await self._guard(conn, self._final(conn, value), definite=True)
        return result

    async def _final(self, conn: Any, value: Mapping[str, Any]) -> dict[str, Any]:
        table = str(value["table"])
        async with conn.cursor() as cur:
            await cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                await cur.execute(f"SELECT {LSN_NOW}")
                ts = int((await cur.fetchone())[0])
                await cur.execute(f"{CATALOG_SQL} AND c.relname = %s", (table,))
                row = await cur.fetchone()
                if row is None:
                    raise ClientError("TABLE_NOT_FOUND", f"table {table} does not exist")
                view = _view(row)
                index = value.get("index")
                if index:
                    columns = view.indexes.get(str(index))
                    if columns is None:
                        raise ClientError("INVALID_REQUEST", f"{table} has no index {index}")
                    # Read through the index itself: no sequential scan of the heap.
                    await cur.execute("SET LOCAL enable_seqscan = off")
                    cols = ", ".join(ident(c) for c in columns)
                    await cur.execute(
                        f"SELECT key, {cols} FROM {qualified(table)} ORDER BY {cols}, key"
                    )
                    entries = [
                        {
                            "key": int(r[0]),
                            "values": {
                                c: from_db(sql_type(view.types.get(c)), v)
                                for c, v in zip(columns, r[1:], strict=True)
                            },
                        }
                        for r in await cur.fetchall()
                    ]
                    return {"table": table, "index": index, "ts": ts, "entries": entries}
                await cur.execute(f"SELECT * FROM {qualified(table)} ORDER BY key")
                names = [c.name for c in cur.description]
                return {
                    "table": table,
                    "ts": ts,
                    "schema_version": view.schema_version,
                    "rows": table_rows(names, await cur.fetchall(), view.types),
                }
            finally:
                if not conn.broken:
                    await cur.execute("ROLLBACK")

    async def close(self) -> None:
        for conn in (self._own, self._prim):
            await self._drop(conn)
