"""MariaDB Galera Cluster as a target: pure translation and bookkeeping, then a real 3-node
cluster on docker: it forms, every node takes DDL and writes, the minority of a partition
answers 1047 and merges back, killed nodes rejoin (one bootstrap when no primary is left),
and the control both ways: RSU leaves a node on the old schema (a stale probe, final reads that
differ per node) where TOI with wsrep_sync_wait=1 does not.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from contract.target import ClientError
from schemasync.catalog import Catalog
from schemasync.ddl import parse_ddl
from schemasync.types import parse_type
from targets.galera import GaleraTarget
from targets.galera.catalog_log import CatalogState
from targets.galera.ddl import maria_type, marker, marker_version, translate_ddl
from targets.galera.errors import error_of
from targets.galera.server import (
    GaleraTargetError,
    grastate_safe_to_bootstrap,
    recovered_seqno,
    server_config,
    validated,
)
from targets.sql_values import from_db, to_db
from tests.conftest import docker_available, require

# -- pure ----------------------------------------------------------------------------------


def _catalog_with(*stmts: str) -> CatalogState:
    state = CatalogState()
    for stmt in stmts:
        cat = state.next(parse_ddl(stmt), stmt)
        table = next(iter(cat.tables)) if cat.tables else None
        state.commit(cat, table, None)
    return state


def test_every_interface_type_maps_to_a_mariadb_type_that_holds_it() -> None:
    assert maria_type("INT32") == "INT"
    assert maria_type("INT64") == "BIGINT"
    assert maria_type("DECIMAL(12,2)") == "DECIMAL(12,2)"
    assert maria_type("VARBINARY(16)") == "VARBINARY(16)"
    assert maria_type("TIMESTAMP") == "DATETIME(6)"
    assert maria_type("BOOLEAN") == "BOOLEAN"


def test_each_ddl_stamps_its_version_in_the_same_statement() -> None:
    state = _catalog_with("CREATE TABLE t (c1 INT32 DEFAULT 7)")
    create = translate_ddl(parse_ddl("CREATE TABLE u (c VARCHAR(4))"), 3, {})
    assert create.statements[0].endswith("COMMENT='schemachaos:v=3'")
    assert "`key` BIGINT NOT NULL PRIMARY KEY" in create.statements[0]
    add = translate_ddl(parse_ddl("ALTER TABLE t ADD COLUMN c2 INT64"), 4, state.latest.tables)
    assert add.statements == (
        "ALTER TABLE `app`.`t` ADD COLUMN `c2` BIGINT NULL, COMMENT='schemachaos:v=4'",
    )
    alter = translate_ddl(
        parse_ddl("ALTER TABLE t ALTER COLUMN c1 SET DATA TYPE INT64"), 5, state.latest.tables
    )
    # MODIFY restates the whole column: the default must survive the type change
    assert (
        "MODIFY COLUMN `c1` BIGINT NULL DEFAULT 7, COMMENT='schemachaos:v=5'"
        in (alter.statements[0])
    )
    drop = translate_ddl(parse_ddl("DROP TABLE t"), 6, state.latest.tables)
    assert drop.table is None and "COMMENT" not in drop.statements[0]
    assert marker_version(marker(12)) == 12
    assert marker_version("a user's comment") is None


def test_a_node_schema_maps_to_the_newest_version_with_exactly_its_markers() -> None:
    state = _catalog_with("CREATE TABLE t (c1 INT32)", "ALTER TABLE t ADD COLUMN c2 INT32")
    assert state.latest.version == 3
    assert state.version_of({"t": 3}) == 3
    assert state.version_of({"t": 2}) == 2  # an RSU node without the ADD COLUMN
    assert state.version_of({}) == 1


def test_server_config_has_what_galera_needs_and_bad_settings_name_their_key() -> None:
    conf = server_config("n2", "10.0.0.2", ["10.0.0.1", "10.0.0.2"], "/d", {"sync_wait": 1})
    for line in (
        "binlog_format = ROW",
        "innodb_autoinc_lock_mode = 2",
        "innodb_flush_log_at_trx_commit = 1",
        "wsrep_sst_method = rsync",
        "wsrep_cluster_address = gcomm://10.0.0.1,10.0.0.2",
        "wsrep_ignore_apply_errors = 7",
    ):
        assert line in conf
    with pytest.raises(GaleraTargetError, match="osu_method"):
        validated({"osu_method": "NBO"})
    with pytest.raises(GaleraTargetError, match="sync_wait"):
        validated({"sync_wait": True})


def test_crash_positions_come_from_grastate_or_wsrep_recover() -> None:
    clean = "version: 2.1\nuuid: abc\nseqno: 41\nsafe_to_bootstrap: 1\n"
    assert grastate_safe_to_bootstrap(clean) == (41, True)
    crashed = "version: 2.1\nuuid: abc\nseqno: -1\nsafe_to_bootstrap: 0\n"
    assert grastate_safe_to_bootstrap(crashed) == (None, False)
    log = "... [Note] WSREP: Recovered position: 5c1f-77:523\n"
    assert recovered_seqno(log) == 523
    assert recovered_seqno("nothing recovered") is None


def test_galera_errors_map_to_history_codes() -> None:
    assert error_of(pymysql.err.OperationalError(1213, "Deadlock")) == ("TXN_ABORTED", True, False)
    assert error_of(pymysql.err.OperationalError(1047, "WSREP has not yet prepared node"))[0] == (
        "UNAVAILABLE"
    )
    assert error_of(pymysql.err.OperationalError(1317, "interrupted"))[0] == "TIMEOUT"
    assert error_of(pymysql.err.OperationalError(1060, "Duplicate column"))[0] == "DDL_INVALID"
    assert error_of(pymysql.err.OperationalError(1412, "Table definition has changed"))[0] == (
        "SCHEMA_VERSION_MISMATCH"
    )
    lost = error_of(pymysql.err.OperationalError(2013, "Lost connection"))
    assert lost == ("UNAVAILABLE", True, True)


def test_values_round_trip_through_the_driver_types() -> None:
    assert from_db(parse_type("TIMESTAMP"), to_db("TIMESTAMP", 1_000_001)) == 1_000_001
    assert from_db(parse_type("DECIMAL(6,2)"), Decimal("1.5")) == "1.50"
    assert from_db(parse_type("VARBINARY(4)"), to_db("VARBINARY(4)", "00ff")) == "00ff"
    assert from_db(parse_type("BOOLEAN"), 1) is True


def test_catalog_lines_are_history_md_lines() -> None:
    lines = _catalog_with("CREATE TABLE t (c1 INT32)").lines()
    assert [line["catalog_version"] for line in lines] == [1, 2]
    assert Catalog.from_json(lines[1]).tables["t"].columns[0].name == "c1"


# -- a real cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def galera(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GaleraTarget]:
    require(docker_available(), "no Docker engine answers")
    from harness.backends import provision
    from harness.cluster import ClusterSpec

    target = GaleraTarget()
    spec = ClusterSpec(backend="docker", nodes=3, voters=3, image=target.docker_image())
    run_id = f"galeratest-{uuid.uuid4().hex[:8]}"
    with provision(spec, run_id, tmp_path_factory.mktemp("galera")) as cluster:
        target.setup(cluster, {"osu_method": "TOI", "sync_wait": 1})
        target.start_all()
        target.wait_ready(60)
        try:
            yield target
        finally:
            target.teardown()


async def _clients(target: GaleraTarget) -> dict[str, Any]:
    return {n: await target.client(n) for n in target._cluster().nodes}


async def _close(clients: dict[str, Any]) -> None:
    for c in clients.values():
        await c.close()


@pytest.mark.docker
def test_three_nodes_form_one_primary_component(galera: GaleraTarget) -> None:
    for node in galera._cluster().nodes:
        status = galera.wsrep_status(node)
        assert status["wsrep_cluster_status"] == "Primary"
        assert status["wsrep_cluster_size"] == "3"
        assert status["wsrep_local_state_comment"] == "Synced"
    assert galera.bootstraps == ["n1"]


@pytest.mark.docker
def test_every_node_takes_ddl_and_writes_and_reads_the_same_rows(galera: GaleraTarget) -> None:
    async def go() -> None:
        c = await _clients(galera)
        try:
            ok = await c["n2"].ddl({"stmt": "CREATE TABLE mm (v INT64, b BOOLEAN)"})
            assert ok["catalog_version"] == galera.catalog.latest.version
            for i, node in enumerate(("n1", "n2", "n3")):
                ops = [{"op": "w", "table": "mm", "key": i, "row": {"v": i * 10, "b": True}}]
                await c[node].txn({"ops": ops})
            await c["n3"].ddl({"stmt": "ALTER TABLE mm ADD COLUMN w INT32 DEFAULT 5"})
            probe = await c["n1"].probe({"table": "mm"})  # sync_wait=1: sees n3's DDL
            assert probe["catalog_version"] == galera.catalog.latest.version
            assert [col["name"] for col in probe["columns"]] == ["v", "b", "w"]
            reads = [(await c[n].final_read({"table": "mm"}))["rows"] for n in c]
            assert reads[0] == reads[1] == reads[2]
            assert reads[0][2] == {"key": 2, "row": {"v": 20, "b": True, "w": 5}}
        finally:
            await _close(c)

    asyncio.run(go())


def _surface(target: GaleraTarget) -> Any:
    """The fault surface the nemeses act through, on this run's hosts."""
    from harness.backends.host_surface import HostSurface

    cluster = target._cluster()
    return HostSurface(cluster, target, cluster.run_id)  # type: ignore[attr-defined]


def _isolate(target: GaleraTarget, alone: str) -> None:
    from contract.fault_surface import Link

    nodes = target._cluster().nodes
    links = [Link(dst=n, src=m) for n in nodes for m in nodes if m != n and alone in (m, n)]
    assert asyncio.run(_surface(target).cut(links, "galeratest")) == {}


def _heal(target: GaleraTarget) -> None:
    healed = asyncio.run(_surface(target).heal("galeratest"))
    assert not healed.errors and set(healed.remaining.values()) == {0}, healed


@pytest.mark.docker
def test_the_minority_of_a_partition_answers_1047_and_merges_back(galera: GaleraTarget) -> None:
    async def txn_on(node: str) -> dict[str, Any]:
        client = await galera.client(node)
        try:
            ops = [{"op": "w", "table": "mm", "key": 50, "row": {"v": 1}}]
            result: dict[str, Any] = await client.txn({"ops": ops})
            return result
        finally:
            await client.close()

    _isolate(galera, "n3")
    try:
        deadline = time.monotonic() + 30
        while galera.wsrep_status("n3").get("wsrep_cluster_status") == "Primary":
            assert time.monotonic() < deadline, "n3 never left the primary component"
            time.sleep(0.5)
        with pytest.raises(ClientError) as refused:
            asyncio.run(txn_on("n3"))
        assert refused.value.code == "UNAVAILABLE" and refused.value.definite
        assert "1047" in refused.value.message
        asyncio.run(txn_on("n1"))  # the majority keeps taking writes
    finally:
        _heal(galera)
    assert galera.await_primary(60) == []


@pytest.mark.docker
def test_killed_nodes_rejoin_and_a_lost_quorum_bootstraps_exactly_once(
    galera: GaleraTarget,
) -> None:
    galera.kill("n2")
    galera.start("n2")  # n1 and n3 are primary: a plain join (IST)
    assert galera.bootstraps == ["n1"]
    galera.kill("n1")
    galera.kill("n2")  # n3 alone: no quorum, non-primary
    deadline = time.monotonic() + 30
    while galera.wsrep_status("n3").get("wsrep_cluster_status") == "Primary":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(galera.start, ["n1", "n2"]))
    assert len(galera.bootstraps) == 2, galera.bootstraps  # the first, and one recovery
    assert galera.await_primary(60) == []
    galera.wait_ready(30)


@pytest.mark.docker
def test_rsu_leaves_nodes_on_the_old_schema_where_toi_with_sync_wait_does_not(
    galera: GaleraTarget,
) -> None:
    """The control both ways on one cluster: the same ADD COLUMN by TOI, then by RSU."""

    async def round_trip(method: str, table: str) -> tuple[int, int, list[Any]]:
        galera.config["osu_method"] = method
        c = await _clients(galera)
        try:
            await c["n1"].ddl({"stmt": f"CREATE TABLE {table} (v INT32)"})
            await c["n1"].ddl({"stmt": f"ALTER TABLE {table} ADD COLUMN x INT32"})
            acked = galera.catalog.latest.version
            stale = (await c["n2"].probe({"table": table}))["catalog_version"]
            await c["n1"].txn(
                {"ops": [{"op": "w", "table": table, "key": 1, "row": {"v": 1, "x": 9}}]}
            )
            await c["n2"].txn({"ops": [{"op": "r", "table": table, "key": 1}]})
            reads = [(await c[n].final_read({"table": table}))["rows"] for n in c]
            return acked, stale, reads
        finally:
            galera.config["osu_method"] = "TOI"
            await _close(c)

    acked, seen, reads = asyncio.run(round_trip("TOI", "ctl_toi"))
    assert seen == acked
    assert reads[0] == reads[1] == reads[2] == [{"key": 1, "row": {"v": 1, "x": 9}}]
    acked, seen, reads = asyncio.run(round_trip("RSU", "ctl_rsu"))
    assert seen == acked - 1  # n2 never got the column: it answers the version before
    assert reads[0] == [{"key": 1, "row": {"v": 1, "x": 9}}]
    assert reads[1] == reads[2] == [{"key": 1, "row": {"v": 1}}]


def test_the_local_backend_is_refused_with_a_reason(tmp_path: Path) -> None:
    from harness.cluster import Cluster

    cluster = Cluster(["n1", "n2", "n3"], ["n1", "n2", "n3"], [], {}, "local", shared_host=True)
    with pytest.raises(GaleraTargetError, match="local backend"):
        GaleraTarget().setup(cluster, {})


@pytest.mark.docker
def test_a_toi_default_taken_from_the_node_diverges_the_copies(galera: GaleraTarget) -> None:
    """codership/mysql-wsrep#366 on the shipped version: TOI replicates the ALTER statement,
    and each node fills the existing rows with its own UUID(): every row differs, silently
    (the cluster stays Synced). A deterministic default (the control) does not."""

    def values(column: str) -> dict[str, list[Any]]:
        out = {}
        for node in galera._cluster().nodes:
            conn = pymysql.connect(host=galera.host(node), user="schemachaos", database="app")
            try:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION wsrep_sync_wait = 1")
                    cur.execute(f"SELECT k, {column} FROM nd ORDER BY k")
                    out[node] = list(cur.fetchall())
            finally:
                conn.close()
        return out

    conn = pymysql.connect(
        host=galera.host("n1"), user="schemachaos", database="app", autocommit=True
    )
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE nd (k INT PRIMARY KEY)")
            cur.execute("INSERT INTO nd VALUES " + ",".join(f"({i})" for i in range(20)))
            cur.execute("ALTER TABLE nd ADD COLUMN d VARCHAR(36) NOT NULL DEFAULT 'x'")
            cur.execute("ALTER TABLE nd ADD COLUMN u VARCHAR(36) NOT NULL DEFAULT UUID()")
    finally:
        conn.close()
    same = values("d")
    assert same["n1"] == same["n2"] == same["n3"]
    nondet = values("u")
    assert all(a != b for a, b in zip(nondet["n1"], nondet["n2"], strict=True))
    assert all(a != b for a, b in zip(nondet["n1"], nondet["n3"], strict=True))
    assert galera.await_primary(10) == []


@pytest.mark.docker
def test_inhibit_holds_one_nodes_apply_and_unlag_lets_it_catch_up(galera: GaleraTarget) -> None:
    def seqno(node: str) -> int:
        return int(galera.wsrep_status(node)["wsrep_last_committed"])

    async def writes(n: int) -> None:
        client = await galera.client("n1")
        try:
            for i in range(n):
                ops = [{"op": "w", "table": "mm", "key": 100 + i, "row": {"v": i}}]
                await client.txn({"ops": ops})
        finally:
            await client.close()

    galera.lag("n3", "inhibit")
    try:
        deadline = time.monotonic() + 20
        while galera.wsrep_status("n3").get("wsrep_local_state_comment") == "Synced":
            assert time.monotonic() < deadline, "FTWRL never desynced n3"
            time.sleep(0.3)
        held = seqno("n3")
        asyncio.run(writes(5))  # the others go on: a desynced node is out of flow control
        assert seqno("n1") >= held + 5
        time.sleep(1)
        assert seqno("n3") == held
    finally:
        galera.unlag("n3")
    assert galera.await_primary(30) == []
    assert seqno("n3") >= held + 5
