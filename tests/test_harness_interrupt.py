"""Crashes of the controller: Ctrl-C in the middle of `schemachaos run` tears everything down and
leaves a readable history prefix; after a SIGKILL, `schemachaos clean` removes what was left
(on docker, collecting the catalog log first). A SIGKILLed docker run's reaper collecting it is
tests/test_killed_run_judged.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.remote_local import tagged_processes
from tests.conftest import docker_available, require
from tests.test_harness_support import free_local_base, node_image  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent


def _start_run(store: Path, backend: str, name: str, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--backend",
        backend,
        "--time-limit",
        "120",
        "--concurrency",
        "3",
        "--nemesis",
        "none",
        "--no-analyze",
        "--no-progress",
        "--store",
        str(store),
        "--test-name",
        name,
        "--local-base",
        free_local_base(),
        "--delay-ms",
        "100",
        "--max-skew-ms",
        "50",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_events(proc: subprocess.Popen[bytes], history: Path, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"run exited early ({proc.returncode}): {out[-2000:]}")
        if history.exists() and history.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the run recorded no history in 90 s")


def _read_history(path: Path) -> list[dict]:
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["index"] for e in events] == list(range(len(events)))
    return events


def _docker_leftovers(run_id: str) -> list[str]:
    import docker

    client = docker.from_env()
    label = f"schemachaos.run={run_id}"
    return [
        c.name
        for c in client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    ] + [n.name for n in client.networks.list(filters={"label": label})]


@pytest.mark.docker
@pytest.mark.cluster
def test_sigint_mid_run_leaves_nothing_and_a_readable_prefix(
    needs_docker: None,
    node_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    proc = _start_run(store, "docker", "sigint")
    run_dir = (store / "sigint" / "latest").resolve()
    history = store / "sigint" / "latest" / "history.jsonl"
    _wait_for_events(proc, history, 40)
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    assert _docker_leftovers(run_id), "the cluster should be up while the run goes"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out.decode()[-2000:]  # interrupted, as Jepsen exits
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] == "unknown"
    assert any("interrupted" in e for e in results["errors"])
    events = _read_history(run_dir / "history.jsonl")
    assert len(events) >= 40
    assert {e["type"] for e in events} >= {"invoke", "ok"}
    assert _docker_leftovers(run_id) == []
    assert not (run_dir / ".tmp").exists(), "the run's key pair must be gone"
    assert (run_dir / "nodes" / "n1" / "node.log").exists(), "node logs are collected on Ctrl-C"
    assert (run_dir / "catalog.jsonl").read_text(), "the catalog log is collected on Ctrl-C"


def _remove_guard(backend: str, run_id: str) -> None:
    """SIGKILL the run's reaper (docker) or watchdog (local): they act on EOF, not on a kill."""
    from harness.reaper import REAPER_LABEL, watchdog_processes

    if backend == "docker":
        import docker

        label = f"{REAPER_LABEL}={run_id}"
        for c in docker.from_env().containers.list(filters={"label": label}, ignore_removed=True):
            c.remove(force=True)
    for pid in watchdog_processes(run_id):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.cluster
@pytest.mark.parametrize("backend", ["docker", "local"])
def test_clean_after_sigkill_removes_what_the_run_left(
    backend: str, tmp_path: Path, request
) -> None:
    if backend == "docker":
        require(docker_available(), "no Docker engine answers")
        request.getfixturevalue("node_image")
    store = tmp_path / "store"
    proc = _start_run(store, backend, f"sigkill-{backend}")
    run_dir = (store / f"sigkill-{backend}" / "latest").resolve()
    _wait_for_events(proc, run_dir / "history.jsonl", 20)
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    _remove_guard(backend, run_id)  # `clean` is the fallback for when the guard died too
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    if backend == "docker":
        assert _docker_leftovers(run_id), "without its guard, a SIGKILLed controller leaves nodes"
        assert (run_dir / ".tmp" / "ssh" / "id_ed25519").exists()
    else:
        assert tagged_processes(run_id), "a SIGKILLed controller leaves its node processes"
    _read_history(run_dir / "history.jsonl")  # a readable prefix even after SIGKILL

    clean = subprocess.run(
        [sys.executable, "-m", "harness.cli", "clean", "--store", str(store), "--run-id", run_id],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clean.returncode == 0, clean.stderr
    assert "removed" in clean.stdout
    if backend == "docker":
        assert _docker_leftovers(run_id) == []
        # the nodes were still there: clean collected the catalog log the reaper would have
        assert f"run {run_id}: catalog.jsonl: " in clean.stdout, clean.stdout
        assert (run_dir / "catalog.jsonl").read_text()
    deadline = time.monotonic() + 10
    while tagged_processes(run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tagged_processes(run_id) == []
    assert not (run_dir / ".tmp").exists()


@pytest.mark.cluster
def test_sigterm_on_local_tears_down_like_ctrl_c(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = _start_run(store, "local", "sigterm")
    run_dir = (store / "sigterm" / "latest").resolve()
    _wait_for_events(proc, run_dir / "history.jsonl", 20)
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    assert tagged_processes(run_id)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out.decode()[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] == "unknown" and "SIGTERM" in results["errors"][0]
    assert tagged_processes(run_id) == []
    assert not (run_dir / ".tmp").exists()
    _read_history(run_dir / "history.jsonl")
    assert (run_dir / "catalog.jsonl").read_text(), "the catalog log is collected on SIGTERM"


def _ddl_acks(history: Path) -> int:
    """DDLs acknowledged so far (the last line may be half written)."""
    count = 0
    for line in history.read_text().splitlines() if history.exists() else []:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        count += event.get("f") == "ddl" and event.get("type") == "ok"
    return count


@pytest.mark.cluster
@pytest.mark.spark
def test_a_stopped_run_is_judged_by_what_its_prefix_proves(tmp_path: Path) -> None:
    """no-ack-wait acknowledges a DDL before it activates: a probe after the ack sees the old
    version (stale-schema-read) within the first DDLs. A run stopped by SIGTERM after a few
    acks keeps its catalog log, and `analyze` of the prefix reports the anomaly (false), with
    the run's incompleteness in `errors`; before, it said only "catalog.jsonl: missing"."""
    store = tmp_path / "store"
    proc = _start_run(store, "local", "stopped", "--toggle", "no-ack-wait", "--delay-ms", "500")
    run_dir = (store / "stopped" / "latest").resolve()
    history = run_dir / "history.jsonl"
    deadline = time.monotonic() + 120
    while _ddl_acks(history) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert _ddl_acks(history) >= 4, "the run acknowledged too few DDLs in 120 s"
    time.sleep(2.0)  # the probes around the last acks
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 2, out.decode()[-2000:]
    assert (run_dir / "catalog.jsonl").read_text()
    analyzed = subprocess.run(
        [sys.executable, "-m", "harness.cli", "analyze", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = json.loads((run_dir / "results.json").read_text())
    assert analyzed.returncode == 1, analyzed.stdout + analyzed.stderr
    assert results["valid"] is False, results["errors"]
    assert {a["class"] for a in results["anomalies"]} == {"stale-schema-read"}, results
    assert results["errors"], results  # what the prefix lacks


@pytest.mark.cluster
def test_repro_replays_the_same_seed_schedule_and_config(tmp_path: Path) -> None:
    store = tmp_path / "store"
    base = free_local_base()
    first = subprocess.run(
        [
            sys.executable, "-m", "harness.cli", "run", "--backend", "local", "--local-base",
            base, "--time-limit", "6", "--nemesis", "kill,pause", "--nemesis-interval", "1.5",
            "--seed", "7", "--concurrency", "2", "--no-analyze", "--no-progress", "--store",
            str(store), "--test-name", "repro", "--toggle", "no-ack-wait",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    original = (store / "repro" / "latest").resolve()
    again = subprocess.run(
        [sys.executable, "-m", "harness.cli", "repro", str(original), "--no-analyze",
         "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    replay = (store / "repro" / "latest").resolve()
    assert replay != original
    a, b = (json.loads((d / "run.json").read_text()) for d in (original, replay))
    for key in ("seed", "backend", "nodes", "voters", "config", "nemesis", "workload", "options"):
        assert a[key] == b[key], key
    assert a["config"]["toggles"] == ["no-ack-wait"]
    assert [s["action"] for s in a["nemesis"]["schedule"]][:2] == [
        f"start-{a['nemesis']['schedule'][0]['params']['kind']}",
        f"stop-{a['nemesis']['schedule'][0]['params']['kind']}",
    ]
    assert any(e["f"].startswith("start-") for e in _read_history(replay / "history.jsonl"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_sim_run_in_its_hash_seed_child_like_any_run(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A sim run re-executes itself in a child with a fixed hash seed: a signal to the
    command reaches the child, which stops its run as run_test does (the catalog salvaged,
    results.json unknown naming the signal), and the command waits for it and exits as any
    run (130 for Ctrl-C, 2 for SIGTERM). Before, SIGTERM orphaned the child (it simulated on)
    and Ctrl-C killed it with no results.json."""
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--time-limit",
           "3000", "--nemesis", "none", "--no-analyze", "--no-progress", "--store", str(store),
           "--test-name", "simstop"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    history = store / "simstop" / "latest" / "history.jsonl"
    _wait_for_events(proc, history, 200)
    run_dir = (store / "simstop" / "latest").resolve()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    expected = 130 if sig == signal.SIGINT else 2
    assert proc.returncode == expected, out.decode()[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] == "unknown" and sig.name in results["errors"][0], results
    assert (run_dir / "catalog.jsonl").read_text(), "the stopped sim run keeps its catalog"
    _read_history(history)
    size = history.stat().st_size
    time.sleep(2.0)
    assert history.stat().st_size == size, "the child must not simulate on after the command"
