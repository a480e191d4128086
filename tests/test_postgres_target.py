"""PostgreSQL (primary + 2 hot standbys) held against the checker.

Unit tests pin the DDL translation and the value mapping; the docker tests run the ddl-dml
workload against real servers with a lagging standby. Asynchronous standbys must be caught
answering an old catalog version after a DDL was acknowledged (stale-schema-read);
`remote_apply` with both standbys synchronous must pass under the same fault.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from schemasync.ddl import parse_ddl
from schemasync.types import parse_type
from targets.postgres import PostgresTarget
from targets.postgres.catalog import interface_type
from targets.postgres.ddl import translate_ddl
from targets.postgres.server import server_config
from targets.postgres.sql import column_meta, pg_type, sql_literal
from targets.sql_values import from_db, to_db
from tests.postgres_findings import unexplained_conformance
from tests.spark_session import spark  # noqa: F401  (session fixture)

# -- pure: translation and values ------------------------------------------------------------


def test_every_interface_type_maps_to_a_postgres_type_that_holds_it() -> None:
    assert pg_type("INT32") == "integer"
    assert pg_type("INT64") == "bigint"
    assert pg_type("FLOAT") == "real"
    assert pg_type("DOUBLE") == "double precision"
    assert pg_type("DECIMAL(12,2)") == "numeric(12,2)"
    assert pg_type("VARCHAR(24)") == "varchar(24)"
    assert pg_type("VARBINARY(16)") == "bytea"
    assert pg_type("BOOLEAN") == "boolean"
    assert pg_type("TIMESTAMP") == "timestamp"


def test_create_table_has_a_bigint_key_and_records_each_columns_type_and_default() -> None:
    cmd = parse_ddl("CREATE TABLE t1 (c1 INT64, c2 VARBINARY(4) NOT NULL DEFAULT X'00FF')")
    plan = translate_ddl(cmd, None)
    assert plan.statements[0] == (
        'CREATE TABLE public."t1" (key bigint PRIMARY KEY, "c1" bigint, '
        "\"c2\" bytea NOT NULL DEFAULT '\\x00ff'::bytea)"
    )
    assert plan.statements[2].endswith("IS " + "'" + column_meta("VARBINARY(4)", "00ff") + "'")
    assert (plan.table, plan.version_change) == ("t1", "create")


def test_set_not_null_locks_then_fills_stored_nulls_with_the_default() -> None:
    plan = translate_ddl(
        parse_ddl("ALTER TABLE t ALTER COLUMN c SET NOT NULL"), {"type": "INT32", "default": 5}
    )
    assert plan.statements == (
        'LOCK TABLE public."t" IN ACCESS EXCLUSIVE MODE',
        'UPDATE public."t" SET "c" = DEFAULT WHERE "c" IS NULL',
        'ALTER TABLE public."t" ALTER COLUMN "c" SET NOT NULL',
    )


def test_set_default_on_a_timestamp_keeps_micros_exact() -> None:
    plan = translate_ddl(
        parse_ddl("ALTER TABLE t ALTER COLUMN c SET DEFAULT 1000005"),
        {"type": "TIMESTAMP", "default": None},
    )
    assert "interval '1 microsecond' * 1000005" in plan.statements[0]
    assert json.loads(plan.statements[1].split(" IS ", 1)[1][1:-1]) == {
        "type": "TIMESTAMP",
        "default": 1000005,
    }


def test_drop_index_bumps_the_table_the_caller_found() -> None:
    plan = translate_ddl(parse_ddl("DROP INDEX i3"), None, index_table="t2")
    assert plan.statements == ('DROP INDEX public."i3"',)
    assert (plan.table, plan.version_change) == ("t2", "bump")


@pytest.mark.parametrize(
    ("canonical", "json_value"),
    [
        ("INT32", 7),
        ("INT64", 1 << 40),
        ("DOUBLE", 2.5),
        ("DECIMAL(12,2)", "12.30"),
        ("VARCHAR(8)", "w1"),
        ("VARBINARY(8)", "00000000000000ff"),
        ("BOOLEAN", False),
        ("TIMESTAMP", 1_700_000_000_000_005),
    ],
)
def test_values_round_trip_through_what_psycopg_sends_and_returns(
    canonical: str, json_value: Any
) -> None:
    sent = to_db(canonical, json_value)
    returned = bytes(sent) if isinstance(sent, bytes) else sent
    assert from_db(parse_type(canonical), returned) == json_value


def test_decimal_reads_keep_the_columns_scale_and_timestamps_are_exact() -> None:
    assert from_db(parse_type("DECIMAL(10,3)"), Decimal("5")) == "5.000"
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=1_700_000_000_000_001)
    assert from_db(parse_type("TIMESTAMP"), moment) == 1_700_000_000_000_001
    assert sql_literal("DECIMAL(5,2)", "1.50") == "'1.50'::numeric"


def test_the_column_comment_wins_over_what_postgres_remembers_of_the_type() -> None:
    assert interface_type("bytea", {"type": "VARBINARY(16)"}) == "VARBINARY(16)"
    assert interface_type("numeric(12,2)", {}) == "DECIMAL(12,2)"
    assert interface_type("character varying(24)", {}) == "VARCHAR(24)"


def test_remote_apply_makes_every_standby_synchronous_and_async_none() -> None:
    conf = server_config("n1", ["n2", "n3"], {"synchronous_commit": "remote_apply"}, "/s")
    assert 'synchronous_standby_names = \'FIRST 2 ("n2", "n3")\'' in conf
    assert "synchronous_commit = remote_apply" in conf
    conf = server_config("n1", ["n2", "n3"], {"synchronous_commit": "async"}, "/s")
    assert "synchronous_standby_names = ''" in conf
    any_conf = server_config(
        "n1", ["n2", "n3"], {"synchronous_commit": "remote_apply", "sync_method": "ANY"}, "/s"
    )
    assert "'ANY 2 (" in any_conf


# -- docker: the checker against real PostgreSQL ---------------------------------------------

SEED = 11
CONCURRENCY = 6
TIME_LIMIT_S = 12.0
LAG_WINDOWS_S = ((2.0, 5.0), (7.0, 10.0))  # (start, stop) of the lag on the lagging standby
WORKLOAD = {
    "tables": 2,
    "max_tables": 3,
    "ddl_interval_s": 0.4,
    "dml_interval_s": 0.02,
    "probe_interval_s": 0.05,
    "probe_processes": 2,
    "probe_offsets": [],  # no HLC: probes at an explicit ts cannot be answered
    "nodes": 3,
}


@pytest.fixture(scope="module")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from harness.backends import provision
    from harness.cluster import ClusterSpec
    from tests.conftest import docker_available, require

    require(docker_available(), "no Docker engine answers")
    image = PostgresTarget.docker_image()
    run_id = f"t-pg-{int(time.time()) % 100000}"
    spec = ClusterSpec(backend="docker", nodes=3, voters=1, image=image)
    with provision(spec, run_id, tmp_path_factory.mktemp("pgwork")) as cluster:
        yield cluster


def run_json(run_dir: Path, cluster: Any, target: PostgresTarget, mode: str) -> None:
    payload = {
        "test": f"postgres-{mode}",
        "seed": SEED,
        "backend": "docker",
        "target": target.name,
        "clock": target.clock,
        "nodes": cluster.nodes,
        "voters": [target.primary],
        "learners": target.standbys,
        "config": {
            "delay_duration_ms": 0,
            "max_clock_skew_ms": 0,
            "idle_safe_time_interval_ms": 0,
            "toggles": [],
            "synchronous_commit": mode,
        },
        "nemesis": {"kinds": ["lagging"], "windows_s": [list(w) for w in LAG_WINDOWS_S]},
        "workload": {"name": "ddl-dml", "concurrency": CONCURRENCY, "options": WORKLOAD},
        "start_wall_ms": time.time_ns() // 1_000_000,
        "harness_version": "0.1.0",
    }
    (run_dir / "run.json").write_text(json.dumps(payload, indent=2) + "\n")


async def lag_standby(target: PostgresTarget, recorder: Any, standby: str) -> None:
    """The lag nemesis on a schedule: drop the primary's WAL stream to one standby."""
    started = time.monotonic()
    for start_s, stop_s in LAG_WINDOWS_S:
        await asyncio.sleep(max(0.0, start_s - (time.monotonic() - started)))
        recorder.nemesis("start-lagging", await asyncio.to_thread(target.lag, standby))
        await asyncio.sleep(max(0.0, stop_s - (time.monotonic() - started)))
        recorder.nemesis("stop-lagging", await asyncio.to_thread(target.unlag, standby))


async def exercise(target: PostgresTarget, cluster: Any, run_dir: Path) -> dict[str, Any]:
    from workloads import build_generator
    from workloads.final import final_reads, tables_and_indexes
    from workloads.history import HistoryRecorder
    from workloads.runner import run_clients

    recorder = HistoryRecorder(run_dir / "history.jsonl")
    try:
        generator = build_generator("ddl-dml", SEED, CONCURRENCY, WORKLOAD)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(lag_standby(target, recorder, "n2"))
            summary = await run_clients(
                generator, target.client, cluster.nodes, recorder, TIME_LIMIT_S, CONCURRENCY
            )
        for standby in target.standbys:
            recorder.nemesis("heal-all", await asyncio.to_thread(target.unlag, standby))
        async with asyncio.timeout(60):
            catalog = await target.catalog_log()
            await final_reads(
                target.client, cluster.nodes, recorder, tables_and_indexes(catalog[-1])
            )
            catalog = await target.catalog_log()
    finally:
        recorder.close()
    (run_dir / "catalog.jsonl").write_text("".join(json.dumps(c) + "\n" for c in catalog))
    return dict(summary)


def run_postgres(cluster: Any, run_dir: Path, mode: str) -> dict[str, Any]:
    target = PostgresTarget()
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    try:
        target.setup(cluster, {"synchronous_commit": mode})
        target.start_all()
        target.wait_ready(60)
        print("setup_s", round(time.monotonic() - started, 1))
        run_json(run_dir, cluster, target, mode)
        started = time.monotonic()
        summary = asyncio.run(exercise(target, cluster, run_dir))
        summary["exercise_s"] = round(time.monotonic() - started, 1)
        for node in cluster.nodes:
            target.collect_logs(node, run_dir / "nodes" / node)
    finally:
        target.teardown()
    return summary


def ddl_ok(run_dir: Path) -> int:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return sum(1 for e in map(json.loads, lines) if e["f"] == "ddl" and e["type"] == "ok")


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.timeout(240)
def test_async_standbys_with_a_lagging_standby_give_stale_schema_reads(
    pg_cluster: Any,
    tmp_path: Path,
    spark: Any,  # noqa: F811
) -> None:
    from checker.analyze import analyze_run

    run_dir = tmp_path / "async"
    summary = run_postgres(pg_cluster, run_dir, "async")
    assert ddl_ok(run_dir) >= 5, summary
    started = time.monotonic()
    results = analyze_run(run_dir, spark=spark)
    print("analyze_s", round(time.monotonic() - started, 1), summary)
    stale = [a for a in results["anomalies"] if a["class"] == "stale-schema-read"]
    assert results["valid"] is False, results
    assert stale, results
    assert "n2" in {n for a in stale for n in a["nodes"]}
    assert {"ap-violation", "transborder-op"} <= set(results["not_applicable"])
    # A standby that answers an old version, and reads on a schema newer than the snapshot's
    # (tests/postgres_findings.py): nothing else.
    found = {a["class"] for a in results["anomalies"]}
    assert found <= {"stale-schema-read", "schema-conformance"}, results
    assert unexplained_conformance(run_dir, results) == []


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.timeout(240)
def test_remote_apply_on_both_standbys_gives_no_stale_read_under_the_same_lag(
    pg_cluster: Any,
    tmp_path: Path,
    spark: Any,  # noqa: F811
) -> None:
    from checker.analyze import analyze_run

    run_dir = tmp_path / "remote-apply"
    summary = run_postgres(pg_cluster, run_dir, "remote_apply")
    # Commits wait for the lagging standby, so fewer DDL get through than with async ones.
    assert ddl_ok(run_dir) >= 4, summary
    started = time.monotonic()
    results = analyze_run(run_dir, spark=spark)
    print("analyze_s", round(time.monotonic() - started, 1), summary)
    assert results["valid"] != "unknown", results["errors"]
    found = {a["class"] for a in results["anomalies"]}
    assert found <= {"schema-conformance"}, results["anomalies"][:5]
    assert unexplained_conformance(run_dir, results) == []
    assert "ap-violation" in results["not_applicable"]
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    lagged = [e for e in events if e["f"] == "start-lagging"]
    assert len(lagged) == len(LAG_WINDOWS_S)
