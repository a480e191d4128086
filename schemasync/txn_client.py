"""Client side of transactions: explicit `Transaction`s, implicit ops and `run_txn`.

The library keeps the table schemas it has seen, by version (`schema.get`), and sends the
version it believes in with every op. A SCHEMA_VERSION_MISMATCH carries the version the txn
uses: the library loads it and resends the op, transparently (seed 001, steps 1-2).
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

from schemasync import errors
from schemasync.client import Client
from schemasync.errors import SchemaSyncError

MISMATCH_RETRIES = 5


class TxnFailed(SchemaSyncError):
    """A txn that did not commit; ``value`` is the completion value it reached."""

    def __init__(self, cause: SchemaSyncError, value: dict[str, Any]) -> None:
        super().__init__(cause.code, cause.message, cause.retriable, {**cause.data, "value": value})
        self.value = value


@dataclass(frozen=True)
class TableSchema:
    """One version of a table's schema, as `schema.get` returns it."""

    table: str
    schema_version: int
    columns: tuple[dict[str, Any], ...]

    def column_names(self) -> list[str]:
        return [str(c["name"]) for c in self.columns]


class SchemaCache:
    """The schemas a client knows, by (table, version), and the newest version per table."""

    def __init__(self) -> None:
        self.versions: dict[tuple[str, int], TableSchema] = {}
        self.current: dict[str, int] = {}
        self.loads = 0

    def version_of(self, table: str) -> int:
        """The version to send for ``table`` (0 when unknown: the node answers with it)."""
        return self.current.get(table, 0)

    async def load(self, client: Client, table: str, version: int) -> TableSchema:
        known = self.versions.get((table, version))
        if known is None:
            reply = await client.request("schema.get", {"table": table, "version": version})
            known = TableSchema(
                table, int(reply["schema_version"]), tuple(reply.get("columns") or ())
            )
            self.versions[(table, version)] = known
            self.loads += 1
        self.current[table] = version
        return known


_caches: weakref.WeakKeyDictionary[Client, SchemaCache] = weakref.WeakKeyDictionary()


def schema_cache(client: Client) -> SchemaCache:
    """The schema cache of one client connection (created on first use)."""
    cache = _caches.get(client)
    if cache is None:
        cache = _caches[client] = SchemaCache()
    return cache


async def _with_schema_retry(
    client: Client, cache: SchemaCache, table: str, send: Any, known: int | None = None
) -> tuple[dict[str, Any], int]:
    """Send with the txn's known version of the table, else the cached one; on
    SCHEMA_VERSION_MISMATCH load the expected version and resend."""
    retries = 0
    version = known if known is not None else cache.version_of(table)
    while True:
        try:
            return await send(version), retries
        except SchemaSyncError as e:
            expected = e.data.get("expected_version")
            if e.code != errors.SCHEMA_VERSION_MISMATCH or not isinstance(expected, int):
                raise
            if retries >= MISMATCH_RETRIES:
                raise
            retries += 1
            await cache.load(client, table, expected)
            version = expected


class Transaction:
    """An explicit transaction on the node the client is connected to."""

    def __init__(self, client: Client, cache: SchemaCache | None = None) -> None:
        self.client = client
        self.cache = cache if cache is not None else schema_cache(client)
        self.txn_id: str | None = None
        self.begin_ts: int | None = None
        self.node: str | None = None
        self.ops: list[dict[str, Any]] = []
        self.tables: dict[str, dict[str, int]] = {}
        self.schema_retries = 0
        self.done = False

    async def begin(self) -> Transaction:
        reply = await self.client.request("txn.begin", {})
        self.txn_id, self.begin_ts = str(reply["txn_id"]), int(reply["begin_ts"])
        self.node = reply.get("node", self.client.node)
        return self

    def value(self) -> dict[str, Any]:
        """The completion value as far as this txn got (before a commit reply)."""
        return {
            "txn_id": self.txn_id,
            "begin_ts": self.begin_ts,
            "commit_ts": None,
            "ops": list(self.ops),
            "tables": dict(self.tables),
            "participants": [],
        }

    async def op(self, op: dict[str, Any]) -> Any:
        """Run one micro-op of history.md ({op, table, key, row | index, lookup})."""
        if self.txn_id is None:
            await self.begin()
        table = str(op["table"])

        async def send(version: int) -> dict[str, Any]:
            return await self.client.request(
                "txn.op", {"txn_id": self.txn_id, "op": op, "client_schema_version": version}
            )

        try:
            known = self.tables.get(table, {}).get("schema_version")
            reply, retries = await _with_schema_retry(self.client, self.cache, table, send, known)
        except SchemaSyncError as e:
            # A server error ended the txn there; a lost reply did not: roll it back then.
            self.done = e.data.get("definite") is not False
            raise TxnFailed(e, e.data.get("value") or self.value()) from None
        self.schema_retries += retries
        self.tables[table] = dict(reply["table"])
        self.ops.append(
            {
                **op,
                "op_ts": reply["op_ts"],
                "node": reply["node"],
                "schema_version": reply["schema_version"],
                "result": reply["result"],
            }
        )
        return reply["result"]

    async def get(self, table: str, key: int) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self.op({"op": "r", "table": table, "key": key})
        return result

    async def put(self, table: str, key: int, row: dict[str, Any]) -> None:
        await self.op({"op": "w", "table": table, "key": key, "row": row})

    async def delete(self, table: str, key: int) -> None:
        await self.op({"op": "d", "table": table, "key": key})

    async def lookup(self, table: str, index: str, value: Any) -> list[int]:
        keys: list[int] = await self.op(
            {"op": "ix", "table": table, "index": index, "lookup": value}
        )
        return keys

    async def commit(self) -> dict[str, Any]:
        """Commit; the completion value of history.md, or TxnFailed with the partial one."""
        if self.txn_id is None:
            await self.begin()
        try:
            value = await self.client.request("txn.commit", {"txn_id": self.txn_id})
        except SchemaSyncError as e:
            self.done = True
            raise TxnFailed(e, e.data.get("value") or self.value()) from None
        self.done = True
        value["schema_retries"] = self.schema_retries
        return value

    async def rollback(self) -> None:
        if self.txn_id is not None and not self.done:
            self.done = True
            await self.client.request("txn.rollback", {"txn_id": self.txn_id}, timeout=2.0)


async def run_implicit(client: Client, op: dict[str, Any]) -> dict[str, Any]:
    """One op as an implicit txn (begin, op, commit on the node; schema retries inside)."""
    cache = schema_cache(client)

    async def send(version: int) -> dict[str, Any]:
        return await client.request("txn.implicit", {"op": op, "client_schema_version": version})

    try:
        value, retries = await _with_schema_retry(client, cache, str(op["table"]), send)
    except SchemaSyncError as e:
        partial = e.data.get("value") or {
            "txn_id": None,
            "begin_ts": None,
            "commit_ts": None,
            "ops": [],
            "tables": {},
            "participants": [],
        }
        raise TxnFailed(e, partial) from None
    value["schema_retries"] = retries
    return value


async def run_txn(
    client: Client, ops: list[dict[str, Any]], implicit: bool | None = None
) -> dict[str, Any]:
    """Run micro-ops as one txn; the completion value, or TxnFailed with the partial value.

    One op runs as an implicit txn unless ``implicit`` is False.
    """
    if implicit is None:
        implicit = len(ops) == 1
    if implicit:
        if len(ops) != 1:
            raise errors.invalid_request("an implicit txn has exactly one op")
        return await run_implicit(client, ops[0])
    txn = Transaction(client)
    try:
        await txn.begin()
        for op in ops:
            await txn.op(op)
        return await txn.commit()
    except SchemaSyncError as e:
        if not txn.done:
            with contextlib.suppress(SchemaSyncError):
                await txn.rollback()
        if isinstance(e, TxnFailed):
            raise
        raise TxnFailed(e, txn.value()) from None
