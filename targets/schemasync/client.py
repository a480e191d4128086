"""The schemasync TargetClient: one node through `schemasync.client.Client`, and how the
node's errors map to a history's `fail` (definite) or `info` (outcome unknown)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from contract.target import ClientError
from schemasync.client import SchemaSyncError
from schemasync.deadline import within
from schemasync.txn_client import run_txn

log = logging.getLogger("schemachaos.target")
T = TypeVar("T")

# Node errors after which the op may still have taken effect: recorded as `info`.
INDEFINITE_CODES = frozenset({"TIMEOUT", "INTERNAL"})
INDEFINITE_DDL_CODES = INDEFINITE_CODES | {"UNAVAILABLE"}
OP_TIMEOUT_S = 60.0  # a backstop: the workload runner sets the real per-op timeouts


def client_error(e: BaseException, indefinite: frozenset[str]) -> ClientError:
    """Map what the client library raised to a ClientError with the right definiteness."""
    if isinstance(e, ClientError):
        return e
    if isinstance(e, SchemaSyncError):
        value = getattr(e, "value", None)
        said = e.data.get("definite") if isinstance(getattr(e, "data", None), dict) else None
        return ClientError(
            e.code,
            e.message,
            retriable=bool(e.retriable),
            definite=said if isinstance(said, bool) else e.code not in indefinite,
            value=_reached(value) if isinstance(value, dict) else None,
        )
    if isinstance(e, TimeoutError):
        return ClientError("TIMEOUT", "no reply in time", retriable=True, definite=False)
    if isinstance(e, OSError | EOFError | ConnectionError | asyncio.IncompleteReadError):
        return ClientError("UNAVAILABLE", f"connection lost: {e}", retriable=True, definite=False)
    return ClientError("INTERNAL", f"{type(e).__name__}: {e}", retriable=False, definite=False)


def _reached(value: dict[str, Any]) -> dict[str, Any]:
    """A failed txn's partial value as history.md has it: what the txn reached. An implicit
    txn that failed before it had an id carries `txn_id: null`; the field is left out."""
    return {k: v for k, v in value.items() if not (k == "txn_id" and v is None)}


class SchemaSyncClient:
    """TargetClient over `schemasync.client.Client`: one node, explicit timeouts per op."""

    def __init__(self, node: str, client: Any, timeout_s: float = OP_TIMEOUT_S) -> None:
        self.node = node
        self._client = client
        self._timeout = timeout_s

    async def _call(self, fn: Callable[[], Awaitable[T]], indefinite: frozenset[str]) -> T:
        try:
            async with within(self._timeout):
                return await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise client_error(e, indefinite) from e

    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]:
        reply = await self._call(lambda: self._client.ddl(value["stmt"]), INDEFINITE_DDL_CODES)
        return {
            **value,
            "catalog_version": reply["catalog_version"],
            "activation_ts": reply["activation_ts"],
        }

    async def txn(self, value: dict[str, Any]) -> dict[str, Any]:
        implicit = bool(value.get("implicit"))
        reply = await self._call(
            lambda: run_txn(self._client, value["ops"], implicit=implicit), INDEFINITE_CODES
        )
        return dict(reply)

    async def probe(self, value: dict[str, Any]) -> dict[str, Any]:
        reply = await self._call(
            lambda: self._client.probe(value.get("table"), value.get("ts")), INDEFINITE_CODES
        )
        return dict(reply)

    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("index"):
            body = {"table": value["table"], "index": value["index"], "ts": value.get("ts")}
            kind = "read.index"
        else:
            body = {"table": value["table"], "ts": value.get("ts")}
            kind = "read.table"
        reply = await self._call(
            lambda: self._client.request(kind, body, timeout=self._timeout), INDEFINITE_CODES
        )
        return dict(reply)

    async def status(self) -> dict[str, Any]:
        return dict(await self._call(self._client.status, INDEFINITE_CODES))

    async def set_delay(self, delay_duration_ms: int) -> None:
        """The node's live DD (admin.set_delay): the `delay` nemesis's hook."""
        await self._call(lambda: self._client.set_delay(delay_duration_ms), INDEFINITE_CODES)

    async def close(self) -> None:
        try:
            async with asyncio.timeout(5):
                await self._client.close()
        except Exception as e:
            log.debug("closing client of %s: %s", self.node, e)
