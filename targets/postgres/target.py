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
import logging
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contract.remote import Remote, RemoteError
from contract.target import ClientError, ClusterView
from harness.remote import on_each_node
from targets.postgres.client import PostgresClient
from targets.postgres.images import ensure_postgres_image
from targets.postgres.server import (
    BOOTSTRAP_SQL,
    DEFAULT_CONFIG,
    HBA,
    PostgresTargetError,
    server_config,
)
from targets.postgres.server import (
    check_settings as check_postgres_settings,
)
from targets.postgres.sql import (
    CONNECT_TIMEOUT_S,
    LSN_NOW,
    META,
    OP_TIMEOUT_S,
    PORT,
    quote,
)

log = logging.getLogger("schemachaos.target.postgres")

LAG_COMMENT = "schemachaos"
LAG_TAG = "pg-lag"
LAG_MODE_OF_NEMESIS = {"inhibit": "replay-pause"}  # the nemesis's "hold the apply"


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
        self.cluster: ClusterView | None = None
        self.config: dict[str, Any] = dict(DEFAULT_CONFIG)
        self.bindir: dict[str, str] = {}
        self.lagging: dict[str, str] = {}  # standby -> lag mode in force

    @staticmethod
    def check_settings(config: Mapping[str, Any]) -> dict[str, Any]:
        """The settings with their defaults (`server.PostgresSettings`), or SettingsError."""
        return check_postgres_settings(config)

    @staticmethod
    def docker_image() -> str:
        """The image the docker backend must run (built once, tagged by content hash)."""
        return ensure_postgres_image()

    # -- layout ----------------------------------------------------------------------------
    def _cluster(self) -> ClusterView:
        if self.cluster is None:
            raise PostgresTargetError("target used before setup()")
        return self.cluster

    @property
    def primary(self) -> str:
        return self._cluster().nodes[0]

    async def primaries(self, wait_s: float) -> list[str]:
        """The primary: every write goes to it, and it stays the primary whatever happens to
        it (the target runs no failover), so there is nothing to wait for."""
        return [self.primary]

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

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, cluster: ClusterView, config: dict[str, Any]) -> None:
        """Stop whatever ran before, wipe the data directories, find the server binaries."""
        if len(cluster.nodes) < 2:
            raise PostgresTargetError("the postgres target needs a primary and >= 1 standby")
        self.cluster = cluster
        self.config = check_postgres_settings(config)
        self.lagging.clear()
        # Every port a nemesis may aim at is the server's: `lagging-learner` in tbf mode then
        # shapes the primary's WAL stream to the standbys (the learners) and nothing else.
        cluster.ports = dict.fromkeys(("client_port", "metastore_port", "peer_port"), PORT)
        server_config(self.primary, self.standbys, self.config, "/")  # validate early
        on_each_node(self._setup_node, cluster.nodes)

    def _find_bindir(self, node: str) -> str:
        found = (
            self._remote(node)
            .run("ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1", check=False)
            .stdout.strip()
        )
        if not found:
            raise PostgresTargetError(
                f"{node}: no PostgreSQL server binaries (the postgres image installs them)"
            )
        return found

    def software_version(self, node: str) -> str:
        """What the node's server binary says (`postgres (PostgreSQL) 16.4 ...`), on any
        backend: the docker image's major version alone does not pin a run."""
        bindir = self.bindir.get(node) or self._find_bindir(node)
        out = self._run(node, f"{shlex.quote(bindir)}/postgres --version", timeout=10.0)
        return out.strip().splitlines()[0] if out.strip() else "unknown"

    def _setup_node(self, node: str) -> None:
        remote = self._remote(node)
        self.bindir[node] = self._find_bindir(node)
        root = shlex.quote(self.root(node))
        remote.run("pkill -KILL -u postgres; true", check=False)
        remote.run(
            f"rm -rf {root} && mkdir -p {root}/pgdata {root}/socket && "
            f"chown -R postgres:postgres {root} && chmod 0700 {root}/pgdata"
        )

    def start_all(self) -> None:
        """The primary (initdb and bookkeeping tables on first start), then the standbys."""
        self.start(self.primary)
        on_each_node(self.start, self.standbys)

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
