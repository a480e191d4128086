"""Nothing outlives a run: SIGKILL the controller mid-run and, with no manual command, the run's
containers and network (docker) or node processes (local, ssh hosts) are gone within 15 s; a
normal run leaves no reaper, watchdog or lease agent behind (for local: the run of
tests/test_harness_monitor.py checks it)."""

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
