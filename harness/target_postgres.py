"""PostgreSQL as a target: one primary and hot standbys by streaming replication.

A database the harness did not build, to hold the checker against: the first node is the
primary, the others are `pg_basebackup` standbys, asynchronous or all synchronous with
`remote_apply`. PostgreSQL has no catalog version and no HLC, so the target keeps them itself:
every DDL bumps the `schemachaos.schema_version` row, the table's row of
`schemachaos.table_versions` and appends the whole catalog to `schemachaos.catalog_history`,
all in the DDL's own transaction. Timestamps are WAL positions (LSNs): opaque, `clock = none`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import json
import logging
import shlex
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from harness.cluster import Cluster
from harness.remote import Remote, RemoteError
from harness.target import ClientError, TargetSetupError
from schemasync import ddl as d
from schemasync.types import SqlType, TypeInvalid, literal_to_value, parse_type

log = logging.getLogger("schemachaos.target.postgres")

PORT = 5432
META = "schemachaos"  # the schema of the bookkeeping tables; user tables live in `public`
SYNC_MODES = ("async", "remote_apply")
DEFAULT_CONFIG: dict[str, Any] = {
    "synchronous_commit": "async",  # or "remote_apply": every standby synchronous
    "sync_method": "FIRST",  # FIRST n (...) or ANY n (...)
    "max_standby_streaming_delay_ms": 5000,
    "lag_mode": "drop",  # the lag fault: "drop" replication traffic, or "replay-pause"
}
CONNECT_TIMEOUT_S = 5
OP_TIMEOUT_S = 60.0
EPOCH = dt.datetime(1970, 1, 1)
LSN_NOW = (
    "(CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_replay_lsn(), '0/0') "
    "ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint"
)
LAG_COMMENT = "schemachaos"
LAG_TAG = "pg-lag"
LAG_MODE_OF_NEMESIS = {"inhibit": "replay-pause"}  # the nemesis's "hold the apply"


class PostgresTargetError(TargetSetupError):
    """PostgreSQL could not be installed, configured, started or made ready on a node."""


# -- the DDL of docs/interfaces.md as PostgreSQL SQL (pure) ----------------------------------


def ident(name: str) -> str:
    """A quoted identifier: names keep their case, as the interface's grammar says."""
    return '"' + name.replace('"', '""') + '"'


def qualified(table: str) -> str:
    return f"public.{ident(table)}"


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def pg_type(canonical: str) -> str:
    """The PostgreSQL type that stores every value of an interface type exactly."""
    t = parse_type(canonical)
    if t.name == "INT32":
        return "integer"
    if t.name == "INT64":
        return "bigint"
    if t.name == "FLOAT":
        return "real"
    if t.name == "DOUBLE":
        return "double precision"
    if t.name == "DECIMAL":
        return f"numeric({t.precision},{t.scale})"
    if t.name == "VARCHAR":
        return f"varchar({t.length})"
    if t.name == "VARBINARY":
        return "bytea"  # the length lives in the column's metadata comment
    if t.name == "BOOLEAN":
        return "boolean"
    if t.name == "TIMESTAMP":
        return "timestamp"
    raise TypeInvalid(f"no PostgreSQL type for {canonical!r}")


def sql_literal(canonical: str, value: Any) -> str:
    """A SQL expression for a JSON-encoded value of an interface type (a column default)."""
    if value is None:
        return "NULL"
    name = parse_type(canonical).name
    if name == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    if name in ("INT32", "INT64"):
        return str(int(value))
    if name in ("FLOAT", "DOUBLE"):
        return repr(float(value))
    if name == "DECIMAL":
        return f"{quote(str(value))}::numeric"
    if name == "VARCHAR":
        return quote(str(value))
    if name == "VARBINARY":
        return f"{quote(chr(92) + 'x' + str(value))}::bytea"
    if name == "TIMESTAMP":
        return f"(timestamp 'epoch' + interval '1 microsecond' * {int(value)})"
    raise TypeInvalid(f"no literal for {canonical!r}")


def column_meta(canonical: str, default: Any) -> str:
    """The column comment: the interface type (bytea forgets VARBINARY's length) and the
    default as its JSON encoding, written in the DDL's transaction like everything else."""
    return json.dumps({"type": canonical, "default": default}, sort_keys=True)


def default_value(canonical: str, literal: d.Literal | None) -> Any:
    if literal is None:
        return None
    return literal_to_value(parse_type(canonical), literal.kind, literal.text)


@dataclass(frozen=True)
class DdlPlanSql:
    """A DDL as SQL: the statements, the table whose version it bumps (None: none yet), and
    what happens to `table_versions` (bump, create, drop, rename)."""

    statements: tuple[str, ...]
    table: str | None
    version_change: str
    new_name: str | None = None


def _column_sql(col: d.ColumnDef) -> str:
    text = f"{ident(col.name)} {pg_type(col.type)}"
    if col.not_null:
        text += " NOT NULL"
    value = default_value(col.type, col.default)
    if value is not None:
        text += f" DEFAULT {sql_literal(col.type, value)}"
    return text


def _comment(table: str, column: str, canonical: str, default: Any) -> str:
    meta = quote(column_meta(canonical, default))
    return f"COMMENT ON COLUMN {qualified(table)}.{ident(column)} IS {meta}"


def translate_ddl(
    cmd: d.DdlCommand, current: Mapping[str, Any] | None, index_table: str | None = None
) -> DdlPlanSql:
    """The SQL of one parsed DDL. `current` is the column's metadata (type, default) where the
    statement changes it; `index_table` is DROP INDEX's table, looked up by the caller."""
    if isinstance(cmd, d.CreateTable):
        cols = ", ".join(_column_sql(c) for c in cmd.columns)
        create_stmts = [f"CREATE TABLE {qualified(cmd.table)} (key bigint PRIMARY KEY, {cols})"]
        create_stmts += [
            _comment(cmd.table, c.name, c.type, default_value(c.type, c.default))
            for c in cmd.columns
        ]
        return DdlPlanSql(tuple(create_stmts), cmd.table, "create")
    if isinstance(cmd, d.DropTable):
        return DdlPlanSql((f"DROP TABLE {qualified(cmd.table)}",), cmd.table, "drop")
    if isinstance(cmd, d.RenameTable):
        stmt = f"ALTER TABLE {qualified(cmd.table)} RENAME TO {ident(cmd.new_name)}"
        return DdlPlanSql((stmt,), cmd.table, "rename", cmd.new_name)
    if isinstance(cmd, d.CreateIndex):
        cols = ", ".join(ident(c) for c in cmd.columns)
        stmt = f"CREATE INDEX {ident(cmd.index)} ON {qualified(cmd.table)} ({cols})"
        return DdlPlanSql((stmt,), cmd.table, "bump")
    if isinstance(cmd, d.DropIndex):
        return DdlPlanSql((f"DROP INDEX public.{ident(cmd.index)}",), index_table, "bump")
    if isinstance(cmd, d.IndexState):
        raise TypeInvalid("index state changes are internal to schemasync")
    alter = f"ALTER TABLE {qualified(cmd.table)}"
    if isinstance(cmd, d.AddColumn):
        col = cmd.column
        stmts = (
            f"{alter} ADD COLUMN {_column_sql(col)}",
            _comment(cmd.table, col.name, col.type, default_value(col.type, col.default)),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.DropColumn):
        return DdlPlanSql((f"{alter} DROP COLUMN {ident(cmd.column)}",), cmd.table, "bump")
    if isinstance(cmd, d.RenameColumn):
        stmt = f"{alter} RENAME COLUMN {ident(cmd.column)} TO {ident(cmd.new_name)}"
        return DdlPlanSql((stmt,), cmd.table, "bump")
    if current is None:
        raise TypeInvalid(f"column {cmd.column!r} of {cmd.table!r} does not exist")
    col_type, default = str(current["type"]), current.get("default")
    column = f"ALTER COLUMN {ident(cmd.column)}"
    if isinstance(cmd, d.AlterType):
        new_pg = pg_type(cmd.type)
        stmts = (
            f"{alter} {column} TYPE {new_pg} USING {ident(cmd.column)}::{new_pg}",
            _comment(cmd.table, cmd.column, cmd.type, default),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.SetNotNull):
        # The interface fills stored nulls with the default; PostgreSQL would refuse them.
        # The table lock comes first, or a write could slip a null in between fill and check.
        lock = f"LOCK TABLE {qualified(cmd.table)} IN ACCESS EXCLUSIVE MODE"
        fill = (
            f"UPDATE {qualified(cmd.table)} SET {ident(cmd.column)} = DEFAULT "
            f"WHERE {ident(cmd.column)} IS NULL"
        )
        return DdlPlanSql((lock, fill, f"{alter} {column} SET NOT NULL"), cmd.table, "bump")
    if isinstance(cmd, d.DropNotNull):
        return DdlPlanSql((f"{alter} {column} DROP NOT NULL",), cmd.table, "bump")
    if isinstance(cmd, d.SetDefault):
        value = default_value(col_type, cmd.default)
        stmts = (
            f"{alter} {column} SET DEFAULT {sql_literal(col_type, value)}",
            _comment(cmd.table, cmd.column, col_type, value),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    if isinstance(cmd, d.DropDefault):
        stmts = (
            f"{alter} {column} DROP DEFAULT",
            _comment(cmd.table, cmd.column, col_type, None),
        )
        return DdlPlanSql(stmts, cmd.table, "bump")
    raise TypeInvalid(f"unsupported DDL {cmd!r}")


# -- values between the history's JSON and psycopg (pure) ------------------------------------


def to_db(canonical: str, value: Any) -> Any:
    """A JSON-encoded value of an interface type as the Python value psycopg sends."""
    if value is None:
        return None
    name = parse_type(canonical).name
    if name == "VARBINARY":
        return bytes.fromhex(str(value))
    if name == "TIMESTAMP":
        return EPOCH + dt.timedelta(microseconds=int(value))
    if name == "DECIMAL":
        return Decimal(str(value))
    if name in ("FLOAT", "DOUBLE"):
        return float(value)
    return value


def from_db(t: SqlType | None, value: Any) -> Any:
    """What psycopg returned, as the history's JSON encoding of the interface type."""
    if value is None:
        return None
    if isinstance(value, memoryview | bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dt.datetime):
        delta = value.replace(tzinfo=None) - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, Decimal):
        if t is not None and t.scale is not None:
            value = value.quantize(Decimal(1).scaleb(-t.scale))
        return format(value, "f")
    return value


# -- the system catalogs, read in one statement -------------------------------------------

CATALOG_SQL = f"""
SELECT c.relname AS name, c.oid::bigint AS oid, tv.schema_version AS version,
  coalesce((SELECT json_agg(json_build_object(
       'id', a.attnum, 'name', a.attname, 'notnull', a.attnotnull,
       'meta', col_description(c.oid, a.attnum),
       'pgtype', format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum)
     FROM pg_attribute a
     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attname <> 'key'), '[]'::json) AS columns,
  coalesce((SELECT json_agg(json_build_object(
       'id', x.indexrelid::bigint, 'name', i.relname,
       'valid', x.indisvalid AND x.indisready,
       'columns', (SELECT json_agg(a.attname ORDER BY k.ord)
                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum))
       ORDER BY i.relname)
     FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
     WHERE x.indrelid = c.oid AND NOT x.indisprimary), '[]'::json) AS indexes
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN {META}.table_versions tv ON tv.table_name = c.relname
WHERE c.relkind = 'r'
"""
CATALOG_COLUMNS = ("name", "oid", "version", "columns", "indexes")
PG_TYPE_NAMES = {
    "integer": "INT32",
    "bigint": "INT64",
    "real": "FLOAT",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp without time zone": "TIMESTAMP",
    "bytea": "VARBINARY(65535)",
}


def interface_type(pgtype: str, meta: Mapping[str, Any]) -> str:
    """The interface type of a column: its comment's, else what PostgreSQL's type says."""
    if isinstance(meta.get("type"), str):
        return str(meta["type"])
    if pgtype.startswith("numeric("):
        return "DECIMAL" + pgtype.removeprefix("numeric").replace(" ", "")
    if pgtype.startswith("character varying("):
        return "VARCHAR" + pgtype.removeprefix("character varying")
    return PG_TYPE_NAMES.get(pgtype, pgtype.upper())


def table_json(row: Sequence[Any]) -> dict[str, Any]:
    """One row of CATALOG_SQL as a catalog.jsonl table (history.md)."""
    _, oid, version, columns, indexes = row
    cols = []
    for c in columns or []:
        meta = json.loads(c["meta"]) if c.get("meta") else {}
        cols.append(
            {
                "id": int(c["id"]),
                "name": str(c["name"]),
                "type": interface_type(str(c["pgtype"]), meta),
                "nullable": not c["notnull"],
                "default": meta.get("default"),
            }
        )
    idx = [
        {
            "id": int(i["id"]),
            "name": str(i["name"]),
            "columns": list(i["columns"] or []),
            "state": "AVAILABLE" if i["valid"] else "BUILDING",
        }
        for i in indexes or []
    ]
    return {
        "id": int(oid),
        "schema_version": int(version) if version is not None else 1,
        "columns": cols,
        "indexes": idx,
    }


def error_code(e: BaseException) -> tuple[str, bool]:
    """(interface error code, retriable) for what psycopg raised."""
    import psycopg.errors as pe

    if isinstance(e, pe.SerializationFailure):
        return "TXN_ABORTED", True
    if isinstance(e, pe.DeadlockDetected | pe.LockNotAvailable):
        return "LOCK_CONFLICT", True
    if isinstance(e, pe.UndefinedTable):
        return "TABLE_NOT_FOUND", False
    if isinstance(e, pe.UndefinedColumn):
        return "SCHEMA_VERSION_MISMATCH", True
    if isinstance(e, pe.QueryCanceled):
        return "TIMEOUT", True
    if isinstance(e, pe.OperationalError | pe.InterfaceError):
        return "UNAVAILABLE", True
    if isinstance(e, pe.IntegrityError | pe.DataError):
        return "INVALID_REQUEST", False
    return "INTERNAL", False


# -- the target -----------------------------------------------------------------------------

BOOTSTRAP_SQL = f"""
SET synchronous_commit = local;  -- the standbys are cloned from this, they cannot ack it yet
CREATE SCHEMA {META};
CREATE TABLE {META}.schema_version (
  id int PRIMARY KEY CHECK (id = 1), catalog_version bigint NOT NULL);
INSERT INTO {META}.schema_version VALUES (1, 1);
CREATE TABLE {META}.table_versions (
  table_name text PRIMARY KEY, schema_version int NOT NULL);
CREATE TABLE {META}.catalog_history (
  catalog_version bigint PRIMARY KEY, activation_ts bigint NOT NULL, ddl text NOT NULL,
  tables jsonb NOT NULL);
INSERT INTO {META}.catalog_history VALUES (1, 0, '', '{{}}');
"""


def server_config(
    node: str, standbys: Sequence[str], config: Mapping[str, Any], socket_dir: str
) -> str:
    """postgresql.conf additions: streaming replication and the synchronous mode asked for."""
    mode = str(config.get("synchronous_commit", "async"))
    if mode not in SYNC_MODES:
        raise PostgresTargetError(f"synchronous_commit: {mode!r} is not one of {SYNC_MODES}")
    method = str(config.get("sync_method", "FIRST")).upper()
    if method not in ("FIRST", "ANY"):
        raise PostgresTargetError(f"sync_method: {method!r} is not FIRST or ANY")
    names = ", ".join(ident(s) for s in standbys)
    sync_names = f"{method} {len(standbys)} ({names})" if mode == "remote_apply" else ""
    delay_ms = int(config.get("max_standby_streaming_delay_ms", 5000))
    lines = {
        "listen_addresses": "'*'",
        "port": str(PORT),
        "unix_socket_directories": quote(socket_dir),
        "wal_level": "replica",
        "max_wal_senders": "10",
        "hot_standby": "on",
        "hot_standby_feedback": "on",
        "wal_receiver_status_interval": "'1s'",
        "wal_retrieve_retry_interval": "'200ms'",
        "max_standby_streaming_delay": f"'{delay_ms}ms'",
        # After a kill, startup first fsyncs every file of the data directory, one by one:
        # 1 to 6 s on a busy shared disk, which the kill nemesis's restart (and the next
        # fault's window) waits for. One syncfs() is 0.3-0.4 s here; nothing differs after it.
        "recovery_init_sync_method": "syncfs",
        "synchronous_commit": "remote_apply" if mode == "remote_apply" else "on",
        "synchronous_standby_names": quote(sync_names),
        "cluster_name": quote(node),
        "shared_buffers": "'32MB'",
        "max_connections": "100",
        "log_line_prefix": "'%m [%p] %a '",
    }
    return "\n# schemachaos\n" + "".join(f"{k} = {v}\n" for k, v in lines.items())


HBA = (
    "host all all 0.0.0.0/0 trust\n"
    "host replication all 0.0.0.0/0 trust\n"
    "local all all trust\n"
    "local replication all trust\n"
)


class PostgresTarget:
    """Target for a PostgreSQL primary (the first node) and hot standbys (the others)."""

    name = "postgres"
    clock = "none"
    capabilities = frozenset({"catalog-log", "probe-now", "real-time"})
    # lagging-learner modes done here, not by the generic nemesis: its `drop` matches the port
    # (5432 carries the clients too) and its `inhibit` is schemasync's admin API. `tbf` stays
    # generic: shaping the primary's egress to a standby's address slows the WAL stream alone.
    own_lagging_modes = frozenset({"drop", "inhibit"})

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.config: dict[str, Any] = dict(DEFAULT_CONFIG)
        self.bindir: dict[str, str] = {}
        self.lagging: dict[str, str] = {}  # standby -> lag mode in force

    @staticmethod
    def docker_image() -> str:
        """The image the docker backend must run (built once, tagged by content hash)."""
        from harness.images_postgres import ensure_postgres_image

        return ensure_postgres_image()

    # -- layout ----------------------------------------------------------------------------
    def _cluster(self) -> Cluster:
        if self.cluster is None:
            raise PostgresTargetError("target used before setup()")
        return self.cluster

    @property
    def primary(self) -> str:
        return self._cluster().nodes[0]

    @property
    def standbys(self) -> list[str]:
        return self._cluster().nodes[1:]

    def _remote(self, node: str) -> Remote:
        return self._cluster().remotes[node]

    def host(self, node: str) -> str:
        return self._cluster().remotes[node].host

    def root(self, node: str) -> str:
        return self._cluster().node_dirs[node]

    def pgdata(self, node: str) -> str:
        return f"{self.root(node)}/pgdata"

    def socket_dir(self, node: str) -> str:
        return f"{self.root(node)}/socket"

    def _as_postgres(self, node: str, command: str) -> str:
        """A command run as the postgres user with the server binaries on PATH."""
        path = f"{self.bindir[node]}:/usr/sbin:/usr/bin:/sbin:/bin"
        inner = f"export PATH={path}; {command}"
        return f"runuser -u postgres -- sh -c {shlex.quote(inner)}"

    def _run(self, node: str, command: str, timeout: float = 60.0) -> str:
        try:
            return self._remote(node).run(command, timeout=timeout).stdout
        except RemoteError as e:
            raise PostgresTargetError(f"{node}: {e}") from e

    def _parallel(self, fn: Any, nodes: Sequence[str]) -> None:
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            for future in [pool.submit(fn, n) for n in nodes]:
                future.result()

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, cluster: Cluster, config: dict[str, Any]) -> None:
        """Stop whatever ran before, wipe the data directories, find the server binaries."""
        if len(cluster.nodes) < 2:
            raise PostgresTargetError("the postgres target needs a primary and >= 1 standby")
        self.cluster = cluster
        self.config = {**DEFAULT_CONFIG, **config}
        self.lagging.clear()
        # Every port a nemesis may aim at is the server's: `lagging-learner` in tbf mode then
        # shapes the primary's WAL stream to the standbys (the learners) and nothing else.
        cluster.ports = dict.fromkeys(("client_port", "metastore_port", "peer_port"), PORT)
        server_config(self.primary, self.standbys, self.config, "/")  # validate early
        self._parallel(self._setup_node, cluster.nodes)

    def _setup_node(self, node: str) -> None:
        remote = self._remote(node)
        found = remote.run(
            "ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1", check=False
        ).stdout.strip()
        if not found:
            raise PostgresTargetError(
                f"{node}: no PostgreSQL server binaries (the postgres image installs them)"
            )
        self.bindir[node] = found
        root = shlex.quote(self.root(node))
        remote.run("pkill -KILL -u postgres; true", check=False)
        remote.run(
            f"rm -rf {root} && mkdir -p {root}/pgdata {root}/socket && "
            f"chown -R postgres:postgres {root} && chmod 0700 {root}/pgdata"
        )

    def start_all(self) -> None:
        """The primary (initdb and bookkeeping tables on first start), then the standbys."""
        self.start(self.primary)
        self._parallel(self.start, self.standbys)

    def start(self, node: str) -> None:
        """Start a node's server; a standby's first start clones the primary."""
        data = shlex.quote(self.pgdata(node))
        fresh = self._run(node, f"test -f {data}/PG_VERSION && echo old || echo new").strip()
        if fresh == "new":
            if node == self.primary:
                self._init_primary(node)
            else:
                self._clone_standby(node)
        logfile = shlex.quote(f"{self.root(node)}/postgres.log")
        self._run(
            node,
            self._as_postgres(node, f"pg_ctl -D {data} -l {logfile} -w -t 60 start >/dev/null"),
            timeout=90,
        )
        if fresh == "new" and node == self.primary:
            self._bootstrap(node)
        log.info("started %s", node)

    def _init_primary(self, node: str) -> None:
        data = shlex.quote(self.pgdata(node))
        self._run(
            node,
            self._as_postgres(
                node,
                f"initdb -D {data} -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync "
                ">/dev/null",
            ),
            timeout=120,
        )
        conf = server_config(node, self.standbys, self.config, self.socket_dir(node))
        self._append(node, f"{self.pgdata(node)}/postgresql.conf", conf)
        self._write(node, f"{self.pgdata(node)}/pg_hba.conf", HBA)

    def _clone_standby(self, node: str) -> None:
        data = shlex.quote(self.pgdata(node))
        primary = shlex.quote(self.host(self.primary))
        self._run(
            node,
            self._as_postgres(
                node,
                f"rm -rf {data}/* && pg_basebackup -h {primary} -p {PORT} -U postgres "
                f"-D {data} -X stream -c fast -R --no-sync",
            ),
            timeout=180,
        )
        conninfo = (
            f"host={self.host(self.primary)} port={PORT} user=postgres application_name={node}"
        )
        extra = (
            f"primary_conninfo = {quote(conninfo)}\n"
            f"cluster_name = {quote(node)}\n"
            f"unix_socket_directories = {quote(self.socket_dir(node))}\n"
        )
        self._append(node, f"{self.pgdata(node)}/postgresql.auto.conf", extra)

    def _bootstrap(self, node: str) -> None:
        path = f"{self.root(node)}/bootstrap.sql"
        self._write(node, path, BOOTSTRAP_SQL)
        sock = shlex.quote(self.socket_dir(node))
        self._run(
            node,
            self._as_postgres(node, f"psql -q -h {sock} -U postgres -v ON_ERROR_STOP=1 -f {path}"),
        )

    def _write(self, node: str, path: str, text: str, append: bool = False) -> None:
        encoded = base64.b64encode(text.encode()).decode()
        op = ">>" if append else ">"
        self._run(
            node,
            f"printf %s {encoded} | base64 -d {op} {shlex.quote(path)} && "
            f"chown postgres:postgres {shlex.quote(path)}",
        )

    def _append(self, node: str, path: str, text: str) -> None:
        self._write(node, path, text, append=True)

    def stop(self, node: str) -> None:
        """A clean shutdown (fast mode), after waking a paused server."""
        self.resume(node)
        data = shlex.quote(self.pgdata(node))
        self._remote(node).run(
            self._as_postgres(node, f"pg_ctl -D {data} -m fast -w -t 30 stop"),
            timeout=45,
            check=False,
        )

    def kill(self, node: str) -> None:
        """SIGKILL to every server process of the node: a crash, recovered from the WAL."""
        self._remote(node).run("pkill -KILL -u postgres; true", check=False)

    def pause(self, node: str) -> None:
        self._remote(node).run("pkill -STOP -u postgres; true", check=False)

    def resume(self, node: str) -> None:
        self._remote(node).run("pkill -CONT -u postgres; true", check=False)

    def teardown(self) -> None:
        if self.cluster is None:
            return
        for node in self._cluster().nodes:
            try:
                self.unlag(node)
            except Exception as e:
                log.warning("teardown of %s: %s", node, e)
            try:
                self.kill(node)
            except RemoteError as e:
                log.warning("teardown of %s: %s", node, e)

    # -- the lag fault ---------------------------------------------------------------------
    def lag(self, standby: str, mode: str | None = None) -> dict[str, Any]:
        """Make a standby fall behind while it keeps answering clients: `drop` discards the
        primary's replication packets on the standby (iptables, source port 5432 from the
        primary's address), `replay-pause` stops WAL replay (`pg_wal_replay_pause()`)."""
        if standby == self.primary:
            raise ValueError("the primary cannot lag behind itself")
        how = mode or str(self.config.get("lag_mode", "drop"))
        how = LAG_MODE_OF_NEMESIS.get(how, how)
        before = self._replay_lsn(standby)
        if how == "drop":
            rule = (
                f"-s {shlex.quote(self.host(self.primary))} -p tcp --sport {PORT} "
                f"-m comment --comment {LAG_COMMENT}:{LAG_TAG} -j DROP"
            )
            self._run(standby, f"iptables -w -A INPUT {rule}")
        elif how == "replay-pause":
            self._psql(standby, "SELECT pg_wal_replay_pause()")
        else:
            raise ValueError(f"unknown lag mode {how!r} (drop, replay-pause)")
        self.lagging[standby] = how
        return {"node": standby, "mode": how, "replay_lsn": before}

    def unlag(self, standby: str) -> dict[str, Any]:
        """Undo a lag fault (both kinds, whatever is recorded: heal must not depend on it)."""
        remote = self._remote(standby)
        dropped = remote.run(
            f"iptables -w -S INPUT | grep -F -- '{LAG_COMMENT}:{LAG_TAG}' | sed 's/^-A /-D /' | "
            "while read -r rule; do eval iptables -w $rule && echo removed; done; true",
            check=False,
        )
        if standby != self.primary and "removed" in dropped.stdout:
            # The stream resumes at once instead of after TCP's retransmission backoff (which
            # grows to many seconds while packets are dropped): a fresh WAL receiver reconnects.
            self._psql(
                standby,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE backend_type = 'walreceiver'",
                check=False,
            )
        if standby != self.primary:
            self._psql(
                standby,
                "SELECT pg_wal_replay_resume() WHERE pg_is_in_recovery() "
                "AND pg_get_wal_replay_pause_state() <> 'not paused'",
                check=False,
            )
        self.lagging.pop(standby, None)
        return {"node": standby, "replay_lsn": self._replay_lsn(standby)}

    def _psql(self, node: str, sql: str, check: bool = True) -> str:
        sock = shlex.quote(self.socket_dir(node))
        cmd = self._as_postgres(
            node, f"psql -qAt -h {sock} -U postgres -v ON_ERROR_STOP=1 -c {shlex.quote(sql)}"
        )
        result = self._remote(node).run(cmd, timeout=30, check=check)
        return result.stdout.strip()

    def _replay_lsn(self, node: str) -> int | None:
        out = self._psql(node, f"SELECT {LSN_NOW}", check=False)
        return int(out) if out.isdigit() else None

    # -- readiness -------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Until the primary accepts writes and every standby streams from it."""
        deadline = time.monotonic() + timeout
        why = "no answer"
        while time.monotonic() < deadline:
            try:
                why = self._not_ready()
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
            if not why:
                return
            time.sleep(0.3)
        raise PostgresTargetError(f"postgres not ready after {timeout:.0f}s: {why}")

    def _not_ready(self) -> str:
        import psycopg

        with psycopg.connect(**self.conninfo(self.primary), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name, state FROM pg_stat_replication"
            ).fetchall()
        streaming = {str(name) for name, state in rows if state == "streaming"}
        missing = [s for s in self.standbys if s not in streaming]
        if missing:
            return f"standbys not streaming: {', '.join(missing)}"
        for standby in self.standbys:
            with psycopg.connect(**self.conninfo(standby), autocommit=True) as conn:
                row = conn.execute(f"SELECT catalog_version FROM {META}.schema_version").fetchone()
            if row is None:
                return f"{standby}: no schema_version row yet"
        return ""

    def conninfo(self, node: str) -> dict[str, Any]:
        return {
            "host": self.host(node),
            "port": PORT,
            "user": "postgres",
            "dbname": "postgres",
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "schemachaos-client",
        }

    # -- observation -----------------------------------------------------------------------
    def collect_logs(self, node: str, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        remote = self._remote(node)
        files = {
            "postgres.log": f"{self.root(node)}/postgres.log",
            "postgresql.conf": f"{self.pgdata(node)}/postgresql.conf",
            "postgresql.auto.conf": f"{self.pgdata(node)}/postgresql.auto.conf",
        }
        for name, path in files.items():
            if remote.run(f"test -f {shlex.quote(path)}", check=False).exit_code != 0:
                continue
            try:
                remote.download(path, dest / name)
            except RemoteError as e:
                log.warning("log %s of %s not collected: %s", name, node, e)

    async def client(self, node: str) -> PostgresClient:
        client = PostgresClient(
            node, self.primary, self.conninfo(node), self.conninfo(self.primary)
        )
        try:
            await client.connect()
        except ClientError:
            await client.close()
            raise
        return client

    async def catalog_log(self) -> list[dict[str, Any]]:
        """catalog.jsonl from the primary's `catalog_history`, one line per version."""
        import psycopg

        async with asyncio.timeout(OP_TIMEOUT_S):
            conn = await psycopg.AsyncConnection.connect(
                **self.conninfo(self.primary), autocommit=True
            )
            try:
                cur = await conn.execute(
                    "SELECT catalog_version, activation_ts, ddl, tables "
                    f"FROM {META}.catalog_history ORDER BY catalog_version"
                )
                rows = await cur.fetchall()
            finally:
                await conn.close()
        return [
            {
                "catalog_version": int(v),
                "activation_ts": int(a),
                "safe_ts": int(a),
                "delay_ms": 0,
                "ddl": str(stmt),
                "tables": dict(tables),
            }
            for v, a, stmt, tables in rows
        ]


# -- the client -----------------------------------------------------------------------------

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
            "leader": self.primary,  # the node every write goes to (no failover)
            "term": 1,
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
                n: from_db(_sql_type(view.types.get(n)), v)
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
                                c: from_db(_sql_type(view.types.get(c)), v)
                                for c, v in zip(columns, r[1:], strict=True)
                            },
                        }
                        for r in await cur.fetchall()
                    ]
                    return {"table": table, "index": index, "ts": ts, "entries": entries}
                await cur.execute(f"SELECT * FROM {qualified(table)} ORDER BY key")
                names = [c.name for c in cur.description]
                rows = []
                for r in await cur.fetchall():
                    record = dict(zip(names, r, strict=True))
                    key = int(record.pop("key"))
                    rows.append(
                        {
                            "key": key,
                            "row": {
                                n: from_db(_sql_type(view.types.get(n)), v)
                                for n, v in record.items()
                            },
                        }
                    )
                return {
                    "table": table,
                    "ts": ts,
                    "schema_version": view.schema_version,
                    "rows": rows,
                }
            finally:
                if not conn.broken:
                    await cur.execute("ROLLBACK")

    async def close(self) -> None:
        for conn in (self._own, self._prim):
            await self._drop(conn)


def _sql_type(canonical: str | None) -> SqlType | None:
    if canonical is None:
        return None
    try:
        return parse_type(canonical)
    except TypeInvalid:
        return None
