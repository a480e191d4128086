"""One node's client-facing behaviour on a real 3-voter + 2-learner cluster: DDL ack timing,
probes agreeing everywhere, errors that leave the node running, the apply inhibitor."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from schemasync.client import Client, SchemaSyncError
from schemasync.hlc import add_ms, ceil_ms, make_ts, wall_ms
from schemasync.localcluster import (
    CLIENT_PORT,
    LIBFAKETIME,
    METASTORE_PORT,
    PEER_PORT,
    REPO,
    LocalCluster,
)
from tests.conftest import require

DD_MS = 150
CSMAX_MS = 150
SETTINGS = {"delay_duration_ms": DD_MS, "max_clock_skew_ms": CSMAX_MS}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("node"), base_addr="127.0.2", config_overrides=SETTINGS
    ) as c:
        asyncio.run(_create(c, "CREATE TABLE t (a INT32)"))
        yield c


async def _create(c: LocalCluster, stmt: str) -> None:
    client = await c.client("n1")
    await client.ddl(stmt)
    await client.close()


async def probe_everywhere(c: LocalCluster, table: str, ts: int) -> list[dict[str, Any]]:
    answers = []
    for name in c.names:
        client = await c.client(name)
        answers.append(await client.probe(table, ts))
        await client.close()
    return answers


@pytest.mark.cluster
def test_ddl_ack_waits_for_activation_plus_skew_and_probes_agree(cluster: LocalCluster) -> None:
    asyncio.run(_ack_timing(cluster))


async def _ack_timing(c: LocalCluster) -> None:
    for i, origin in enumerate(c.names):
        client = await c.client(origin)
        started = time.monotonic()
        reply = await client.ddl(f"ALTER TABLE t ADD COLUMN ack{i} INT32")
        elapsed_ms = (time.monotonic() - started) * 1000
        ack_hlc = client.last_reply_hlc
        await client.close()
        # The node answered only once its HLC passed ceil_ms(Tu + CSmax)...
        assert ack_hlc >= ceil_ms(add_ms(reply["activation_ts"], CSMAX_MS)), (origin, reply)
        # ...which is at least DD + CSmax after the entry was stamped, after we sent the DDL.
        assert elapsed_ms >= DD_MS + CSMAX_MS - 2, (origin, elapsed_ms)
        answers = await probe_everywhere(c, "t", ack_hlc)
        assert {a["catalog_version"] for a in answers} == {reply["catalog_version"]}, answers
        assert len({repr(a["columns"]) for a in answers}) == 1
        assert f"ack{i}" in [col["name"] for col in answers[0]["columns"]]
        # Read-your-DDL: a probe at "now" on any node already sees it.
        for name in c.names:
            other = await c.client(name)
            now_answer = await other.probe("t", None)
            await other.close()
            assert now_answer["catalog_version"] >= reply["catalog_version"], name


@pytest.mark.cluster
def test_ddl_on_missing_table_is_ddl_invalid_and_node_keeps_running(cluster: LocalCluster) -> None:
    asyncio.run(_missing_table(cluster))


async def _missing_table(c: LocalCluster) -> None:
    client = await c.client("n4")
    for stmt, words in [
        ("ALTER TABLE nosuch ADD COLUMN x INT32", "nosuch"),
        ("DROP TABLE nosuch", "nosuch"),
        ("CREATE TABLE t (a INT32)", "t"),
        ("ALTER TABLE t ADD COLUMN", ""),
    ]:
        with pytest.raises(SchemaSyncError) as err:
            await client.ddl(stmt)
        assert err.value.code == "DDL_INVALID" and not err.value.retriable
        assert words in err.value.message
    before = (await client.status())["catalog_version"]
    reply = await client.ddl("CREATE TABLE t_after_errors (a INT32)")
    assert reply["catalog_version"] == before + 1
    with pytest.raises(SchemaSyncError) as err:
        await client.request("no.such.type", {})
    assert err.value.code == "INVALID_REQUEST"
    await client.close()


def _send_raw(host: str, port: int, payload: bytes) -> bytes:
    """Send bytes, return what comes back before the node closes the connection."""
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.cluster
def test_malformed_frames_close_one_connection_and_node_keeps_running(
    cluster: LocalCluster,
) -> None:
    host = cluster.hosts["n2"]
    garbage = [
        b"\xff\xff\xff\xff",  # length beyond 16 MiB
        struct.pack(">I", 4) + b"\xc1\xc1\xc1\xc1",  # not msgpack
        _frame([1, 2, 3]),  # msgpack, but not a map
        struct.pack(">I", 100) + b"short",  # truncated frame
    ]
    for port in (CLIENT_PORT, METASTORE_PORT, PEER_PORT):
        for payload in garbage:
            assert _send_raw(host, port, payload) == b""
    # Well-formed frames with nonsense bodies get error replies, not a crash.
    reply = msgpack.unpackb(
        _send_raw(host, METASTORE_PORT, _frame({"id": 7, "type": "raft.append", "hlc": 0}))[4:]
    )
    assert reply["id"] == 7 and not reply["ok"]
    assert reply["error"]["code"] == "INVALID_REQUEST"
    reply = msgpack.unpackb(_send_raw(host, CLIENT_PORT, _frame({"id": 8, "body": 3}))[4:])
    assert reply["error"]["code"] == "INVALID_REQUEST"
    assert "n2.log" not in cluster.log_text("n2")
    assert "malformed frame" in cluster.log_text("n2")

    async def still_serving() -> None:
        for name in cluster.names:
            assert cluster.alive(name)
            st = await cluster.status(name)
            assert st["leader"] is not None
        client = await cluster.client("n2")
        await client.ddl("ALTER TABLE t ADD COLUMN after_garbage INT32")
        await client.close()

    asyncio.run(still_serving())


@pytest.mark.cluster
def test_apply_inhibitor_makes_a_learner_probe_wait(cluster: LocalCluster) -> None:
    version, answer, waited = asyncio.run(_inhibited_probe(cluster, "inh"))
    assert waited, "the probe answered while the learner's apply was held"
    assert answer["catalog_version"] == version


async def _inhibited_probe(c: LocalCluster, column: str) -> tuple[int, dict[str, Any], bool]:
    """Hold apply on learner n5, DDL through n1, probe n5 at the ack's ts; (version, probe
    answer, whether the probe was still waiting 1 s later, until apply was released)."""
    learner = "n5"
    control = await c.client(learner)
    prober = await c.client(learner)
    writer = await c.client("n1")
    await control.inhibit_apply(True)
    try:
        reply = await writer.ddl(f"ALTER TABLE t ADD COLUMN {column} INT64")
        ts = writer.last_reply_hlc
        async with asyncio.TaskGroup() as tg:
            probe = tg.create_task(prober.probe("t", ts))
            await asyncio.sleep(1.0)
            waited = not probe.done()
            st = await control.status()
            assert st["apply_held"] and st["applied_index"] < st["commit_index"]
            await control.inhibit_apply(False)
        answer = probe.result()
    finally:
        await control.inhibit_apply(False)
    st = await control.status()
    await control.close()
    await prober.close()
    await writer.close()
    if waited:
        assert st["safe_time_waits"]["count"] >= 1 and st["safe_time_waits"]["max_ms"] >= 900
    return reply["catalog_version"], answer, waited


@pytest.mark.cluster
def test_without_safe_time_wait_an_inhibited_learner_answers_the_old_version(
    tmp_path: Path,
) -> None:
    with LocalCluster(
        tmp_path,
        base_addr="127.0.2",
        host_offset=20,
        config_overrides=SETTINGS,
        toggles=["no-safe-time-wait"],
    ) as c:
        asyncio.run(_create(c, "CREATE TABLE t (a INT32)"))
        version, answer, waited = asyncio.run(_inhibited_probe(c, "inh"))
    assert not waited
    assert answer["catalog_version"] == version - 1, "expected the stale (old) version"
    assert "inh" not in [col["name"] for col in answer["columns"]]


@pytest.mark.cluster
def test_no_ack_wait_acknowledges_before_the_floor_and_reads_go_stale(tmp_path: Path) -> None:
    """The ack check above can fail: with ``no-ack-wait`` the same checks catch the bug."""

    async def go(c: LocalCluster) -> None:
        client = await c.client("n4")
        await client.ddl("CREATE TABLE t (a INT32)")
        stale = 0
        for i in range(3):
            reply = await client.ddl(f"ALTER TABLE t ADD COLUMN early{i} INT32")
            assert client.last_reply_hlc < ceil_ms(add_ms(reply["activation_ts"], CSMAX_MS))
            other = await c.client("n5")
            stale += (await other.probe("t", None))["catalog_version"] < reply["catalog_version"]
            await other.close()
        await client.close()
        assert stale >= 1, "an early ack should let a null-ts probe miss the DDL"

    with LocalCluster(
        tmp_path,
        base_addr="127.0.2",
        host_offset=20,
        config_overrides=SETTINGS,
        toggles=["no-ack-wait"],
    ) as c:
        asyncio.run(go(c))


@pytest.mark.cluster
def test_synctime_reorder_and_mutable_delay_break_what_they_name(tmp_path: Path) -> None:
    """``synctime-reorder``: a write lands after a SyncTime stamped later (safe time passed it).
    ``mutable-delay``: a node whose live DD changed computes other activation timestamps for
    the same versions (the AP breaks)."""

    async def go(c: LocalCluster) -> None:
        client = await c.client("n1")
        await client.ddl("CREATE TABLE t (a INT32)")
        for name in c.names:
            setter = await c.client(name)
            await setter.set_delay(60 if name != "n5" else 20)
            await setter.close()
        for i in range(10):
            await asyncio.sleep(0.007 * (i % 3))
            await client.ddl(f"ALTER TABLE t ADD COLUMN r{i} INT32")
        await client.close()
        statuses = [await c.status(n) for n in c.names]
        assert all(s["safe_ts_regressions"] > 0 for s in statuses), statuses
        logs = {}
        for name in c.names:
            reader = await c.client(name)
            logs[name] = {e["catalog_version"]: e for e in await reader.catalog_log()}
            await reader.close()
        last = max(logs["n1"])
        assert logs["n5"][last]["activation_ts"] < logs["n1"][last]["activation_ts"]
        assert logs["n5"][last]["delay_ms"] == 20 and logs["n1"][last]["delay_ms"] == 60

    with LocalCluster(
        tmp_path,
        base_addr="127.0.2",
        host_offset=20,
        config_overrides={
            "delay_duration_ms": 60,
            "max_clock_skew_ms": 10,
            "idle_safe_time_interval_ms": 20,
        },
        toggles=["synctime-reorder", "mutable-delay"],
    ) as c:
        asyncio.run(go(c))


@pytest.mark.cluster
def test_a_learner_clock_ahead_is_counted_and_acks_stay_correct(tmp_path: Path) -> None:
    """libfaketime puts n5's wall clock 2 s ahead: its HLC drags the others, each counts the
    far-ahead timestamps, and DDL acks and probes stay right without waiting out the skew."""
    require(LIBFAKETIME.exists(), "libfaketime is not installed")

    async def go(c: LocalCluster) -> None:
        client = await c.client("n1")
        await client.ddl("CREATE TABLE t (a INT32)")
        started = time.monotonic()
        reply = await client.ddl("ALTER TABLE t ADD COLUMN skewed INT32")
        elapsed_ms = (time.monotonic() - started) * 1000
        ack_hlc = client.last_reply_hlc
        await client.close()
        assert ack_hlc >= ceil_ms(add_ms(reply["activation_ts"], CSMAX_MS))
        assert elapsed_ms < DD_MS + CSMAX_MS + 1000, "the ack waited out the skew"
        answers = await probe_everywhere(c, "t", ack_hlc)
        assert {a["catalog_version"] for a in answers} == {reply["catalog_version"]}
        statuses = [await c.status(n) for n in c.names]
        skewed = statuses[-1]
        assert skewed["wall_ms"] - statuses[0]["wall_ms"] > 1500
        assert sum(s["hlc_ahead_count"] for s in statuses[:-1]) > 0

    with LocalCluster(
        tmp_path,
        base_addr="127.0.2",
        host_offset=20,
        config_overrides=SETTINGS,
        faketime={"n5": "+2s"},
    ) as c:
        asyncio.run(go(c))


@pytest.mark.cluster
def test_timestamp_far_ahead_is_counted_not_rejected(cluster: LocalCluster) -> None:
    host = cluster.hosts["n3"]
    ahead = make_ts(wall_ms() + CSMAX_MS + 200)
    raw = _send_raw(
        host, CLIENT_PORT, _frame({"id": 1, "type": "admin.status", "hlc": ahead, "body": {}})
    )
    reply = msgpack.unpackb(raw[4:])
    assert reply["ok"] and reply["hlc"] > ahead
    assert reply["body"]["hlc_ahead_count"] >= 1


BAD_CONFIGS = [
    ("name", 'data_dir = "/tmp/x"\n[nodes.n1]\nhost = "127.0.0.1"\nclient_port = 1\n'),
    ("toggles", 'name = "n1"\ndata_dir = "D"\ntoggles = ["no-such-toggle"]\n' + "NODES"),
    ("nodes.n1.client_port", 'name = "n1"\ndata_dir = "D"\n[nodes.n1]\nhost = "h"\n'),
    ("voters", 'name = "n1"\ndata_dir = "D"\nvoters = ["n9"]\n' + "NODES"),
    ("delay_duration_ms", 'name = "n1"\ndata_dir = "D"\ndelay_duration_ms = "x"\n' + "NODES"),
    ("<toml>", "name = \n"),
    ("<file>", None),
]
NODES = '[nodes.n1]\nhost = "127.0.0.1"\nclient_port = 1\nmetastore_port = 2\npeer_port = 3\n'


@pytest.mark.parametrize(("key", "text"), BAD_CONFIGS, ids=[k for k, _ in BAD_CONFIGS])
def test_bad_config_is_one_clear_line_and_exit_2(
    tmp_path: Path, key: str, text: str | None
) -> None:
    path = tmp_path / "node.toml"
    if text is not None:
        path.write_text(text.replace("NODES", NODES).replace('"D"', f'"{tmp_path}"'))
    proc = subprocess.run(
        [sys.executable, "-m", "schemasync.node", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"config error: {path}: {key}: ")


def test_client_fails_over_to_the_next_address() -> None:
    async def go() -> None:
        with pytest.raises(SchemaSyncError) as err:
            await Client.connect(["127.0.2.250:1"], timeout=1.0)
        assert err.value.code == "UNAVAILABLE"

    asyncio.run(go())
