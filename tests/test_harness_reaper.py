"""Nothing outlives a run: SIGKILL the controller mid-run and, with no manual command, the run's
containers and network (docker) or node processes (local, ssh hosts) are gone within 15 s; a
normal run leaves no reaper, watchdog or lease agent behind (for local: the run of
tests/test_harness_monitor.py checks it). `clean` collects the catalog log of a dead run only,
on real containers labelled as runs' nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.reaper import REAPER_LABEL, watchdog_processes
from harness.remote_local import tagged_processes
from tests.test_harness_ssh import sshd_hosts  # noqa: F401  (fixture)
from tests.test_harness_support import free_local_base, node_image  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent
GONE_WITHIN_S = 15.0


def _run_cmd(store: Path, backend: str, name: str, limit: float) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "run", "--backend", backend, "--time-limit",
            str(limit), "--concurrency", "2", "--nemesis", "none", "--no-analyze",
            "--no-progress", "--store", str(store), "--test-name", name, "--local-base",
            free_local_base(), "--delay-ms", "100", "--max-skew-ms", "50"]  # fmt: skip


def _docker_things(run_id: str) -> list[str]:
    """The run's containers and networks, and its reaper."""
    import docker

    client = docker.from_env()
    found: list[str] = []
    for label in (f"schemachaos.run={run_id}", f"{REAPER_LABEL}={run_id}"):
        found += [
            c.name
            for c in client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        ]
        found += [f"network {n.name}" for n in client.networks.list(filters={"label": label})]
    return found


def _local_things(run_id: str) -> list[str]:
    return [f"process {p}" for p in tagged_processes(run_id)] + [
        f"watchdog {p}" for p in watchdog_processes(run_id)
    ]


def _wait_until_up(proc: subprocess.Popen[bytes], run_dir_link: Path) -> str:
    """The run id once the workload is recording (so every node is up)."""
    deadline = time.monotonic() + 120
    history = run_dir_link / "history.jsonl"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"run exited early ({proc.returncode}): {out[-2000:]}")
        if history.exists() and history.read_bytes().count(b"\n") >= 10:
            return str(json.loads((run_dir_link / "run.json").read_text())["run_id"])
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the run recorded no history in 120 s")


def _sigkill_and_wait(backend: str, tmp_path: Path, things: Callable[[str], list[str]]) -> None:
    store = tmp_path / "store"
    name = f"reaper-{backend}"
    proc = subprocess.Popen(
        _run_cmd(store, backend, name, 60), cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        run_id = _wait_until_up(proc, store / name / "latest")
        up = things(run_id)
        assert len(up) >= 5, up  # the cluster (and its guard) is there while the run goes
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        left = things(run_id)
        while left and time.monotonic() - killed_at < GONE_WITHIN_S:
            time.sleep(0.2)
            left = things(run_id)
        assert left == [], f"still there {GONE_WITHIN_S} s after SIGKILL: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _normal_run_leaves_nothing(
    backend: str, tmp_path: Path, things: Callable[[str], list[str]]
) -> None:
    store = tmp_path / "store"
    name = f"clean-{backend}"
    done = subprocess.run(
        _run_cmd(store, backend, name, 2), cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = (store / name / "latest").resolve()
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    log = (run_dir / "controller.log").read_text()
    assert "holds run " + run_id in log, "the run had a guard"
    assert things(run_id) == []  # at once: teardown waits for the guard to go


@pytest.mark.docker
@pytest.mark.cluster
def test_sigkilled_docker_run_is_reaped_within_15s(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _sigkill_and_wait("docker", tmp_path, _docker_things)


@pytest.mark.cluster
def test_sigkilled_local_run_is_reaped_within_15s(tmp_path: Path) -> None:
    _sigkill_and_wait("local", tmp_path, _local_things)


@pytest.mark.docker
@pytest.mark.cluster
def test_a_normal_docker_run_leaves_no_reaper(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _normal_run_leaves_nothing("docker", tmp_path, _docker_things)


@pytest.mark.cluster
def test_clean_removes_a_watchdog_whose_controller_lives_on(tmp_path: Path) -> None:
    """What `schemachaos clean --run-id` adds: it ends the run's guard (here one whose pipe is
    held by a process that stays alive, so the guard itself would wait forever). Called
    directly: clean() as a whole would also delete every run's iptables rules on this host."""
    from harness.reaper import LocalWatchdog, remove_guards

    run_id = f"reaper-test-{os.getpid()}-{time.monotonic_ns()}"
    watchdog = LocalWatchdog.start(run_id, [], tmp_path / "watchdog.log")
    try:
        assert watchdog_processes(run_id) != []
        removed = remove_guards(run_id)
        assert any(r.startswith("watchdog ") for r in removed), removed
        deadline = time.monotonic() + 5
        while watchdog_processes(run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watchdog_processes(run_id) == []
    finally:
        watchdog.close()


def _ssh_node_processes(nodes_file: Path) -> list[str]:
    """Node processes and lease agents still running on the hosts of a nodes file."""
    from harness.cluster import SSH_ROOT
    from harness.remote import pgrep_command
    from harness.remote_ssh import SshRemote, load_nodes_file

    found: list[str] = []
    for h in load_nodes_file(nodes_file):
        remote = SshRemote(
            h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
        )
        try:
            for what in (f"schemasync.node --config {SSH_ROOT}/", f"{SSH_ROOT}/lease-"):
                if remote.run(pgrep_command(what), check=False).exit_code == 0:
                    found.append(f"{h.name}: {what}")
        finally:
            remote.close()
    return found


@pytest.mark.docker
@pytest.mark.cluster
def test_sigkilled_ssh_run_is_swept_by_the_hosts_leases(
    sshd_hosts: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    nodes_file, _ = sshd_hosts
    store = tmp_path / "store"
    cmd = [*_run_cmd(store, "ssh", "reaper-ssh", 60), "--nodes-file", str(nodes_file)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(proc, store / "reaper-ssh" / "latest")
        up = _ssh_node_processes(nodes_file)
        assert len(up) == 6, up  # a node and a lease agent on each of the three hosts
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        left = _ssh_node_processes(nodes_file)
        while left and time.monotonic() - killed_at < GONE_WITHIN_S:
            time.sleep(0.5)
            left = _ssh_node_processes(nodes_file)
        assert left == [], f"still there {GONE_WITHIN_S} s after SIGKILL: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.docker
@pytest.mark.cluster
def test_a_normal_ssh_run_leaves_no_lease_agent(
    sshd_hosts: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    nodes_file, _ = sshd_hosts
    store = tmp_path / "store"
    cmd = [*_run_cmd(store, "ssh", "clean-ssh", 2), "--nodes-file", str(nodes_file)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    log = ((store / "clean-ssh" / "latest").resolve() / "controller.log").read_text()
    assert "lease " in log and " holds run " in log, "the run had leases"
    left = _ssh_node_processes(nodes_file)
    deadline = time.monotonic() + 3  # an agent polls its lease every 0.5 s
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _ssh_node_processes(nodes_file)
    assert left == []


# -- `clean`'s collection of a dead run's catalog log, on real containers ------------------

# A one-voter schemasync node in a container, as a run's node runs it (`schemasync.node
# --config PATH`, found by node_catalog through /proc).
ONE_NODE = """cat > /tmp/n1.toml <<'T'
name = "n1"
data_dir = "/tmp/n1"
voters = ["n1"]
[nodes.n1]
host = "127.0.0.1"
client_port = 10800
metastore_port = 10801
peer_port = 10802
T
exec python3 -m schemasync.node --config /tmp/n1.toml"""

ONE_DDL = """import asyncio
from schemasync.client import Client
async def ddl():
    for _ in range(100):  # until the node is up and has elected itself
        try:
            c = await Client.connect(["127.0.0.1:10800"], timeout=2)
            print((await c.ddl("CREATE TABLE t1 (id INT64, v INT32)"))["catalog_version"])
            return await c.close()
        except Exception:
            await asyncio.sleep(0.1)
asyncio.run(ddl())"""


def _run_dir(store: Path, run_id: str) -> Path:
    """The run's directory in the store, with its run.json."""
    run_dir = store / f"test-{run_id}" / "1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "backend": "docker"}))
    return run_dir


def _acknowledge(run_dir: Path, *versions: int) -> None:
    """The run's history: ok DDLs that acknowledged `versions`."""
    ok = [
        {"type": "ok", "f": "ddl", "process": 0, "value": {"catalog_version": v}} for v in versions
    ]
    (run_dir / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ok))


@pytest.mark.docker
def test_clean_collects_the_catalog_of_a_dead_run_only(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A dead run (a node answering, a paused one whose every exec fails, one with no node),
    a run whose reaper is still there, a run outside the store: only the dead run's catalog
    is collected, the paused node costing only its own answer; a log short of what the
    history acknowledged is not written, and the reaper log says why. Then the reaper's own
    path (the Engine API over the socket) collects it once the history asks no more."""
    import docker

    from harness.cluster import collect_dead_catalogs
    from harness.reaper import salvage_plan
    from harness.reaper_agent import exec_in_container, running_nodes, salvage_catalog
    from harness.remote_docker import LABEL, RUN_LABEL, remove_run

    client = docker.from_env()
    tag = os.urandom(4).hex()
    dead, live, stray = f"t{tag}-dead", f"t{tag}-live", f"t{tag}-stray"

    def container(run_id: str, role: str, script: str = "sleep 600", **labels: str) -> Any:
        return client.containers.run(
            node_image, entrypoint=["sh", "-c", script], name=f"schemachaos-{run_id}-{role}",
            labels={LABEL: "1", **labels}, detach=True,
        )  # fmt: skip

    try:
        node = container(dead, "n1", ONE_NODE, **{RUN_LABEL: dead})
        container(dead, "bare", **{RUN_LABEL: dead})
        container(dead, "paused", **{RUN_LABEL: dead}).pause()
        container(live, "n1", **{RUN_LABEL: live})
        container(live, "reaper", **{REAPER_LABEL: live})
        container(stray, "n1", **{RUN_LABEL: stray})
        _, out = node.exec_run(["python3", "-c", ONE_DDL])
        assert out.strip() == b"2", out  # versions 1 (the empty catalog) and 2
        store = tmp_path / "store"
        dead_dir, live_dir = _run_dir(store, dead), _run_dir(store, live)
        _acknowledge(dead_dir, 2, 4)  # the node that applied 3 and 4 is gone

        notes = collect_dead_catalogs(store)
        short = (
            f"catalog.jsonl: not collected (the longest log, from schemachaos-{dead}-n1, ends "
            "at version 2, but history.jsonl acknowledged version 4: the nodes that hold the "
            "rest are down)"
        )
        assert f"run {dead}: {short}" in notes
        assert f"run {live}: catalog.jsonl: not collected (its reaper is still there)" in notes
        assert not any(stray in n for n in notes), notes
        assert not (dead_dir / "catalog.jsonl").exists()
        assert not (live_dir / "catalog.jsonl").exists()
        assert (dead_dir / "reaper.log").read_text() == f"clean {dead}: {short}\n"

        _acknowledge(dead_dir, 1, 2)
        nodes = running_nodes(dead)
        names = [f"schemachaos-{dead}-{role}" for role in ("bare", "n1", "paused")]
        assert sorted(nodes.values()) == names
        note = salvage_catalog(exec_in_container, nodes, salvage_plan(str(dead_dir)))
        assert note == f"catalog.jsonl: 2 versions, from schemachaos-{dead}-n1"
        lines = (dead_dir / "catalog.jsonl").read_text().splitlines()
        assert [json.loads(line)["catalog_version"] for line in lines] == [1, 2]
    finally:
        for run_id in (dead, live, stray):
            remove_run(client, run_id)
        for c in client.containers.list(all=True, filters={"label": f"{REAPER_LABEL}={live}"}):
            c.remove(force=True)
