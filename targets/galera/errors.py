"""MariaDB/Galera errors as the history's error codes (pure)."""

from __future__ import annotations

import pymysql

# MariaDB error numbers and what they mean in the history
ER_DEADLOCK = 1213  # certification failure or brute-force abort by a replicated write-set
ER_UNKNOWN_COM = 1047  # "WSREP has not yet prepared node for application use": not primary
ER_COMMIT_FAILED = 1180  # e.g. "not connected to Primary Component" at COMMIT
ER_INTERRUPTED = 1317
ER_LOCK_WAIT = 1205
ER_NO_SUCH_TABLE = 1146
ER_BAD_FIELD = 1054
ER_TABLE_DEF_CHANGED = 1412  # a DDL applied under the transaction: its snapshot is gone
LOST = frozenset({2003, 2006, 2013, 2014, 2055, 0})
# MariaDB refusing a DDL against the node's schema (exists, unknown, duplicate, nulls...)
DDL_REFUSED = frozenset({1050, 1051, 1060, 1061, 1068, 1072, 1091, 1138, 1171, 1176})
# A DDL that failed with these did not run: not in the primary component, certification, or
# refused by the node's schema (the same on every node under TOI, this node alone under RSU).
REFUSED_DDL = frozenset({"UNAVAILABLE", "TXN_ABORTED", "DDL_INVALID", "TABLE_NOT_FOUND"})
DATA_ERRORS = frozenset({1048, 1062, 1264, 1265, 1292, 1366, 1406, 1690})


def error_of(e: BaseException) -> tuple[str, bool, bool]:
    """(code, retriable, lost) for what PyMySQL raised; `lost`: the connection is gone, so
    whether the op took effect is unknown once it was sent."""
    if isinstance(e, TimeoutError | OSError):
        return "UNAVAILABLE", True, True
    errno = e.args[0] if isinstance(e, pymysql.err.MySQLError) and e.args else -1
    if not isinstance(errno, int):
        errno = -1
    if isinstance(e, pymysql.err.InterfaceError) or errno in LOST:
        return "UNAVAILABLE", True, True
    if errno == ER_DEADLOCK:
        return "TXN_ABORTED", True, False
    if errno in (ER_UNKNOWN_COM, ER_COMMIT_FAILED):
        return "UNAVAILABLE", True, False
    if errno == ER_INTERRUPTED:
        return "TIMEOUT", True, False
    if errno == ER_LOCK_WAIT:
        return "LOCK_CONFLICT", True, False
    if errno == ER_NO_SUCH_TABLE:
        return "TABLE_NOT_FOUND", False, False
    if errno in (ER_BAD_FIELD, ER_TABLE_DEF_CHANGED):
        return "SCHEMA_VERSION_MISMATCH", True, False
    if errno in DDL_REFUSED:
        return "DDL_INVALID", False, False
    if errno in DATA_ERRORS:
        return "INVALID_REQUEST", False, False
    return "INTERNAL", False, False
