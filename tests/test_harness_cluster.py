"""A real 5-node cluster (3 voters, 2 learners) on docker and on local processes: it comes up,
answers a DDL and a probe on every node through the client library, and tears down leaving no
container, network, process or key behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from harness.backends import provision
from harness.cluster import Cluster, ClusterSpec
from harness.remote_local import tagged_processes
from schemasync.client import Client
from targets.schemasync import SchemaSyncTarget
from tests.test_harness_support import free_local_base, node_image  # noqa: F401  (fixture)


def _exercise(cluster: Cluster, target: SchemaSyncTarget) -> None:
    assert cluster.voters == ["n1", "n2", "n3"]
    assert cluster.learners == ["n4", "n5"]

    async def go() -> None:
        ddl_client = await target.client("n4")  # a learner: the DDL is forwarded to the leader
        try:
            stmt = "CREATE TABLE accounts (balance INT64, owner VARCHAR(16))"
            ok = await ddl_client.ddl({"stmt": stmt, "table": "accounts", "kind": "create_table"})
        finally:
            await ddl_client.close()
        assert ok["catalog_version"] == 2
        assert ok["activation_ts"] > 0
        for node in cluster.nodes:
            client = await Client.connect([target.client_address(node)], timeout=10)
            try:
                assert client.node == node
                probe = await client.probe("accounts", None)
            finally:
                await client.close()
            # Read-your-DDL on every node, learners included.
            assert probe["catalog_version"] >= 2, (node, probe)
            assert [c["name"] for c in probe["columns"]] == ["balance", "owner"]
        catalog = await target.catalog_log()
        assert [c["catalog_version"] for c in catalog] == [1, 2]
        assert catalog[1]["ddl"] == stmt

    asyncio.run(go())


def _bring_up(spec: ClusterSpec, run_id: str, work: Path) -> tuple[float, Path]:
    started = time.monotonic()
    tmp = work / ".tmp"
    with provision(spec, run_id, tmp) as cluster:
        target = SchemaSyncTarget()
        try:
            target.setup(cluster, {"delay_duration_ms": 200, "max_clock_skew_ms": 100})
            target.start_all()
            target.wait_ready(30)
            ready_s = time.monotonic() - started
            _exercise(cluster, target)
            target.collect_logs("n1", work / "logs" / "n1")
        finally:
            target.teardown()
        if cluster.backend == "docker":
            assert (tmp / "ssh" / "id_ed25519").exists()
    assert (work / "logs" / "n1" / "node.log").stat().st_size > 0
    return ready_s, tmp


@pytest.mark.docker
@pytest.mark.cluster
def test_docker_cluster_up_ddl_probe_teardown(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    import docker

    run_id = f"t-docker-{int(time.time())}"
    spec = ClusterSpec(backend="docker", nodes=5, voters=3, image=node_image)
    ready_s, tmp = _bring_up(spec, run_id, tmp_path)
    assert ready_s < 60
    client = docker.from_env()
    label = f"schemachaos.run={run_id}"
    assert client.containers.list(all=True, filters={"label": label}, ignore_removed=True) == []
    assert client.networks.list(filters={"label": label}) == []
    assert not tmp.exists(), "the run's key pair must be gone"


@pytest.mark.cluster
def test_local_cluster_up_ddl_probe_teardown(tmp_path: Path) -> None:
    run_id = f"t-local-{int(time.time())}"
    spec = ClusterSpec(backend="local", nodes=5, voters=3, local_base=free_local_base())
    _, tmp = _bring_up(spec, run_id, tmp_path)
    assert tagged_processes(run_id) == []
    assert not tmp.exists()


@pytest.mark.cluster
def test_setup_failure_is_unknown_never_a_pass(tmp_path: Path) -> None:
    """A node that cannot start: verdict unknown with the node's own error line, exit 2,
    nothing left running, and the failure found in seconds, not at the ready timeout."""
    import json

    from harness.run import RunOptions, run_test

    opts = RunOptions(
        backend="local",
        nodes=3,
        voters=3,
        time_limit_s=5,
        store=tmp_path,
        test_name="broken",
        local_base=free_local_base(3),
        target_config={"partitions": 0},
        ready_timeout_s=60,
    )
    started = time.monotonic()
    outcome = run_test(opts)
    assert time.monotonic() - started < 30
    assert outcome.exit_code == 2
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert results["valid"] == "unknown"
    assert any(
        e.startswith("setup failed") and "config error" in e and "partitions" in e
        for e in results["errors"]
    ), results["errors"]
    assert json.loads((outcome.run_dir / "run.json").read_text())["nodes"] == ["n1", "n2", "n3"]
    run_id = json.loads((outcome.run_dir / "run.json").read_text())["run_id"]
    assert tagged_processes(run_id) == []
    assert (outcome.run_dir / "nodes" / "n1" / "stdout.log").exists()
