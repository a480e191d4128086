"""Error codes every client sees, and the one exception type that carries them over the wire."""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION_MISMATCH = "SCHEMA_VERSION_MISMATCH"
INCOMPATIBLE_SCHEMA = "INCOMPATIBLE_SCHEMA"
TABLE_DROPPED = "TABLE_DROPPED"
TABLE_NOT_FOUND = "TABLE_NOT_FOUND"
DDL_INVALID = "DDL_INVALID"
TIMEOUT = "TIMEOUT"
UNAVAILABLE = "UNAVAILABLE"
LOCK_CONFLICT = "LOCK_CONFLICT"
TXN_ABORTED = "TXN_ABORTED"
INVALID_REQUEST = "INVALID_REQUEST"
INTERNAL = "INTERNAL"

RETRIABLE_BY_DEFAULT: frozenset[str] = frozenset(
    {SCHEMA_VERSION_MISMATCH, INCOMPATIBLE_SCHEMA, TIMEOUT, UNAVAILABLE, LOCK_CONFLICT}
)
ALL_CODES: frozenset[str] = frozenset(
    {
        SCHEMA_VERSION_MISMATCH,
        INCOMPATIBLE_SCHEMA,
        TABLE_DROPPED,
        TABLE_NOT_FOUND,
        DDL_INVALID,
        TIMEOUT,
        UNAVAILABLE,
        LOCK_CONFLICT,
        TXN_ABORTED,
        INVALID_REQUEST,
        INTERNAL,
    }
)


class SchemaSyncError(Exception):
    """A failure with a code, a message and a retriable flag, sent to clients as an error reply."""

    def __init__(
        self,
        code: str,
        message: str,
        retriable: bool | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retriable = code in RETRIABLE_BY_DEFAULT if retriable is None else retriable
        self.data: dict[str, Any] = dict(data or {})

    def to_wire(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "retriable": self.retriable,
            "data": self.data,
        }

    @classmethod
    def from_wire(cls, error: Any) -> SchemaSyncError:
        if not isinstance(error, dict):
            return cls(INTERNAL, f"malformed error reply: {error!r}", False)
        return cls(
            str(error.get("code", INTERNAL)),
            str(error.get("message", "")),
            bool(error.get("retriable", False)),
            error.get("data") if isinstance(error.get("data"), dict) else None,
        )


def unavailable(message: str, **data: Any) -> SchemaSyncError:
    return SchemaSyncError(UNAVAILABLE, message, True, data)


def invalid_request(message: str) -> SchemaSyncError:
    return SchemaSyncError(INVALID_REQUEST, message, False)
