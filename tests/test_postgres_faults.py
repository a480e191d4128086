"""Each nemesis that applies to PostgreSQL, played through the nemesis runner against a real
primary and two asynchronous hot standbys in docker, and measured on the servers themselves.

A lagging standby (its WAL stream cut, slowed through a token bucket, or its replay held) and a
partitioned one fall behind the primary by WAL position and by the catalog version they answer,
while still answering clients; heal removes every rule and qdisc and the standby catches up.
Kill and pause stop every server process of a node; restart and resume bring it back. What
each test measured is printed (`pytest -s`): lag in bytes and versions, catch-up time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract.target import ClientError
from harness.backends import provision
from harness.backends.host_net import QDISC_HANDLE
from harness.backends.host_surface import HostSurface
from harness.cluster import Cluster, ClusterSpec
from nemesis import NemesisContext, NemesisStep, heal_all
from nemesis.runner import apply_step
from targets.postgres import PostgresTarget
from targets.postgres.sql import LSN_NOW, META
from workloads.history import HistoryRecorder

pytestmark = [pytest.mark.docker]

PRIMARY, LAGGED, HEALTHY = "n1", "n2", "n3"
DDL_DURING_FAULT = 6
CATCH_UP_LIMIT_S = 10.0
# an unhindered standby replays a DDL in milliseconds: one still behind a second after the
# healthy one caught up is held back by the fault, not by ordinary replication delay
FAIR_CHANCE_S = 1.0
_fault_ids = itertools.count()


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, PostgresTarget]]:
    from tests.conftest import docker_available, require

    require(docker_available(), "no Docker engine answers")
    image = PostgresTarget.docker_image()
    run_id = f"t-pgf-{uuid.uuid4().hex[:8]}"
    spec = ClusterSpec(backend="docker", nodes=3, voters=1, image=image)
    with provision(spec, run_id, tmp_path_factory.mktemp("pgfaults") / ".tmp") as cluster:
        target = PostgresTarget()
        try:
            target.setup(cluster, {"synchronous_commit": "async"})
            target.start_all()
            target.wait_ready(60)
            yield cluster, target
        finally:
            target.teardown()


@pytest.fixture
def nem(
    pg: tuple[Cluster, PostgresTarget], tmp_path: Path
) -> Iterator[tuple[NemesisContext, HistoryRecorder]]:
    """A nemesis context on a streaming cluster; heal_all after the test, whatever it did."""
    cluster, target = pg
    target.wait_ready(30)
    surface = HostSurface(cluster, target, cluster.run_id)
    ctx = NemesisContext(cluster, target, surface, config={"lagging_rate_kbit": 1})
    recorder = HistoryRecorder(tmp_path / "history.jsonl")
    try:
        yield ctx, recorder
    finally:
        healed = asyncio.run(heal_all(ctx, recorder))
        recorder.close()
        assert set(healed["rules_remaining"].values()) == {0}, healed
        assert set(healed["qdiscs_remaining"].values()) == {0}, healed


# -- observation, on the servers ------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """How far a node is: WAL replayed (a standby) or written (the primary), and the catalog
    version a client reading there is told."""

    lsn: int
    version: int


def ask(target: PostgresTarget, node: str, sql: str) -> tuple[Any, ...]:
    """One row from a node, over a client connection as the workload makes them."""
    import psycopg

    with psycopg.connect(**target.conninfo(node), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def position(target: PostgresTarget, node: str) -> Position:
    lsn, version = ask(
        target, node, f"SELECT {LSN_NOW}, (SELECT catalog_version FROM {META}.schema_version)"
    )
    return Position(int(lsn), int(version))


def wait_caught_up(target: PostgresTarget, node: str, goal: Position, limit_s: float) -> float:
    """Seconds until `node` replayed up to `goal` (fails the test after limit_s)."""
    started = time.monotonic()
    last: Position | str = "no answer"
    while time.monotonic() - started < limit_s:
        try:
            last = position(target, node)
        except Exception as e:  # a node just restarted refuses connections for a moment
            last = f"{type(e).__name__}: {e}"
        if isinstance(last, Position) and last.version >= goal.version and last.lsn >= goal.lsn:
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{node} not caught up with {goal} after {limit_s}s: {last}")


def all_caught_up(target: PostgresTarget) -> None:
    goal = position(target, PRIMARY)
    for standby in target.standbys:
        wait_caught_up(target, standby, goal, 30)


def network_state(ctx: NemesisContext) -> dict[str, str]:
    """Every node's iptables rules and qdiscs as the kernel lists them."""
    return {
        n: ctx.cluster.remotes[n].run("iptables -w -S; tc qdisc show", timeout=15).stdout
        for n in ctx.cluster.nodes
    }


def ours(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if "schemachaos" in line or f"{QDISC_HANDLE}:" in line
    ]


def server_processes(ctx: NemesisContext, node: str) -> list[str]:
    """`state command` of every process the postgres user runs on the node."""
    out = ctx.cluster.remotes[node].run("ps -u postgres -o stat=,comm= || true", timeout=15).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


# -- acting: DDL on the primary, nemesis steps through the runner ------------------------------


async def _ddl(target: PostgresTarget, stmts: list[str]) -> list[dict[str, Any]]:
    client = await target.client(PRIMARY)
    try:
        return [await client.ddl({"stmt": s}) for s in stmts]
    finally:
        await client.close()


def ddl(target: PostgresTarget, *stmts: str) -> list[dict[str, Any]]:
    return asyncio.run(_ddl(target, list(stmts)))


def add_columns(target: PostgresTarget, table: str, count: int) -> Position:
    """`count` acknowledged DDL on the primary; where the primary is after the last."""
    ddl(target, *(f"ALTER TABLE {table} ADD COLUMN c{i} INT64" for i in range(count)))
    return position(target, PRIMARY)


def step(
    ctx: NemesisContext, recorder: HistoryRecorder, action: str, params: dict[str, Any]
) -> dict[str, Any]:
    event = asyncio.run(apply_step(ctx, NemesisStep(0.0, action, params), recorder))
    assert "error" not in event and "errors" not in event, event
    return event


def fresh_table(target: PostgresTarget, prefix: str) -> str:
    table = f"{prefix}_{uuid.uuid4().hex[:6]}"
    ddl(target, f"CREATE TABLE {table} (c INT32)")
    all_caught_up(target)
    return table


def report(what: str, **numbers: Any) -> None:
    print(f"\n[{what}] " + json.dumps(numbers, sort_keys=True))


# -- lagging: cut, slowed, held -----------------------------------------------------------------


def lag_rules_in_force(mode: str, state: dict[str, str], primary_host: str) -> None:
    """The fault is where it must be, and nowhere else."""
    if mode == "drop":
        (rule,) = ours(state[LAGGED])
        assert f"-s {primary_host}/32" in rule and "--sport 5432" in rule and "DROP" in rule
        assert not ours(state[PRIMARY]) and not ours(state[HEALTHY])
    elif mode == "tbf":
        assert f"qdisc htb {QDISC_HANDLE}: dev eth0 root" in state[PRIMARY]
        assert not ours(state[LAGGED])
    else:
        assert not any(ours(text) for text in state.values())


@pytest.mark.parametrize("mode", ["drop", "tbf", "inhibit"])
def test_a_lagging_standby_falls_behind_keeps_answering_and_catches_up_after_heal(
    nem: tuple[NemesisContext, HistoryRecorder], mode: str
) -> None:
    ctx, recorder = nem
    target: PostgresTarget = ctx.target  # type: ignore[assignment]
    table = fresh_table(target, f"lag_{mode}")
    fault = next(_fault_ids)
    started = step(
        ctx,
        recorder,
        "start-lagging-learner",
        {"fault": fault, "kind": "lagging-learner", "mode": mode, "learners": [LAGGED]},
    )
    lag_rules_in_force(mode, network_state(ctx), ctx.cluster.remotes[PRIMARY].host)
    if mode == "inhibit":
        assert ask(target, LAGGED, "SELECT pg_get_wal_replay_pause_state()") == ("paused",)

    primary = add_columns(target, table, DDL_DURING_FAULT)
    # the lagged standby is measured after the healthy one replayed everything, and it still
    # answers clients (the generic nemesis's cut of port 5432 would refuse this connection)
    healthy_s = wait_caught_up(target, HEALTHY, primary, CATCH_UP_LIMIT_S)
    time.sleep(FAIR_CHANCE_S)
    lagged, healthy = position(target, LAGGED), position(target, HEALTHY)
    if mode == "tbf":  # the WAL stream to the lagged standby went through the bucket
        classes = ctx.cluster.remotes[PRIMARY].run("tc -s class show dev eth0", timeout=15).stdout
        shaped = classes.split(f"class htb {QDISC_HANDLE}:10 ", 1)[1].split("\n\n", 1)[0]
        assert " Sent 0 bytes" not in shaped, classes
    healed = step(
        ctx, recorder, "stop-lagging-learner", {"fault": fault, "kind": "lagging-learner"}
    )
    assert not any(ours(text) for text in network_state(ctx).values())
    catch_up_s = wait_caught_up(target, LAGGED, primary, CATCH_UP_LIMIT_S)

    report(
        f"lagging {mode}",
        primary_version=primary.version,
        lagged_version=lagged.version,
        healthy_version=healthy.version,
        lagged_behind_bytes=primary.lsn - lagged.lsn,
        healthy_behind_bytes=primary.lsn - healthy.lsn,
        healthy_replayed_s=round(healthy_s, 2),
        catch_up_s=round(catch_up_s, 2),
        recorded_at_heal=healed["before"],
    )
    assert healthy.version == primary.version
    assert lagged.version <= primary.version - DDL_DURING_FAULT // 2, (lagged, primary)
    assert lagged.lsn < primary.lsn
    # the runner recorded the lag it healed: the standby's position below the primary's
    at_heal = healed["before"]
    assert at_heal["learners"][LAGGED]["applied_index"] < at_heal["voters_applied_index"]
    assert started["learners"] == [LAGGED]


# -- partition ---------------------------------------------------------------------------------


def test_a_partitioned_standby_falls_behind_and_catches_up_after_heal(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, recorder = nem
    target: PostgresTarget = ctx.target  # type: ignore[assignment]
    table = fresh_table(target, "part")
    grudge = {PRIMARY: [LAGGED], HEALTHY: [LAGGED], LAGGED: [PRIMARY, HEALTHY]}
    fault = next(_fault_ids)
    step(
        ctx,
        recorder,
        "start-partition",
        {"fault": fault, "kind": "partition", "shape": "one", "grudge": grudge},
    )
    state = network_state(ctx)
    for node, sources in grudge.items():  # each node drops exactly the other side, nothing more
        dropped = {rule.split("-s ", 1)[1].split("/32", 1)[0] for rule in ours(state[node])}
        assert dropped == {ctx.cluster.remotes[s].host for s in sources}, state[node]

    primary = add_columns(target, table, DDL_DURING_FAULT)
    healthy_s = wait_caught_up(target, HEALTHY, primary, CATCH_UP_LIMIT_S)
    time.sleep(FAIR_CHANCE_S)
    lagged, healthy = position(target, LAGGED), position(target, HEALTHY)
    step(ctx, recorder, "heal-partition", {"fault": fault, "kind": "partition"})
    assert not any(ours(text) for text in network_state(ctx).values())
    catch_up_s = wait_caught_up(target, LAGGED, primary, CATCH_UP_LIMIT_S)

    report(
        "partition",
        primary_version=primary.version,
        lagged_version=lagged.version,
        healthy_version=healthy.version,
        lagged_behind_bytes=primary.lsn - lagged.lsn,
        healthy_replayed_s=round(healthy_s, 2),
        catch_up_s=round(catch_up_s, 2),
    )
    assert healthy.version == primary.version
    assert lagged.version <= primary.version - DDL_DURING_FAULT, (lagged, primary)
    assert lagged.lsn < primary.lsn


# -- kill and pause -----------------------------------------------------------------------------


def test_a_killed_standby_is_down_and_replays_what_it_missed_after_restart(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, recorder = nem
    target: PostgresTarget = ctx.target  # type: ignore[assignment]
    table = fresh_table(target, "kill")
    fault = next(_fault_ids)
    step(ctx, recorder, "start-kill", {"fault": fault, "kind": "kill", "nodes": [HEALTHY]})
    assert server_processes(ctx, HEALTHY) == []
    with pytest.raises(Exception, match=r"refused|failed"):
        position(target, HEALTHY)
    primary = add_columns(target, table, DDL_DURING_FAULT)  # async: the primary goes on alone
    restarted = step(ctx, recorder, "stop-kill", {"fault": fault, "kind": "kill"})
    assert restarted["answered_ms"].keys() == {HEALTHY}, restarted
    catch_up_s = wait_caught_up(target, HEALTHY, primary, CATCH_UP_LIMIT_S)
    report("kill standby", restart_ms=restarted["healed_ms"], catch_up_s=round(catch_up_s, 2))


def test_a_killed_primary_refuses_ddl_and_serves_it_again_after_restart(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, recorder = nem
    target: PostgresTarget = ctx.target  # type: ignore[assignment]
    table = fresh_table(target, "killp")
    fault = next(_fault_ids)
    step(ctx, recorder, "start-kill", {"fault": fault, "kind": "kill", "nodes": [PRIMARY]})
    assert server_processes(ctx, PRIMARY) == []
    with pytest.raises(ClientError) as refused:
        ddl(target, f"ALTER TABLE {table} ADD COLUMN gone INT32")
    assert refused.value.code == "UNAVAILABLE"
    restarted = step(ctx, recorder, "stop-kill", {"fault": fault, "kind": "kill"})
    target.wait_ready(15)  # both standbys stream from the restarted primary again
    primary = add_columns(target, table, 2)
    for standby in target.standbys:
        wait_caught_up(target, standby, primary, CATCH_UP_LIMIT_S)
    report("kill primary", restart_ms=restarted["healed_ms"])


def test_a_paused_standby_answers_nothing_and_catches_up_after_resume(
    nem: tuple[NemesisContext, HistoryRecorder],
) -> None:
    ctx, recorder = nem
    target: PostgresTarget = ctx.target  # type: ignore[assignment]
    table = fresh_table(target, "pause")
    fault = next(_fault_ids)
    step(ctx, recorder, "start-pause", {"fault": fault, "kind": "pause", "nodes": [LAGGED]})
    states = server_processes(ctx, LAGGED)
    assert states and all(s.startswith("T") for s in states), states  # every one stopped
    primary = add_columns(target, table, DDL_DURING_FAULT)
    with pytest.raises(Exception, match=r"timeout|timed out"):
        position(target, LAGGED)  # connect_timeout: it accepts TCP but never answers
    resumed = step(ctx, recorder, "stop-pause", {"fault": fault, "kind": "pause"})
    assert resumed["answering"] == [LAGGED], resumed
    catch_up_s = wait_caught_up(target, LAGGED, primary, CATCH_UP_LIMIT_S)
    report("pause standby", catch_up_s=round(catch_up_s, 2))
