"""Cluster lifecycle: signals that must not cut a teardown short, and clean up after crashes.

Provisioning is each backend's (harness.backends).

Everything made here is marked as ours (docker labels, a process environment tag, an iptables
comment) so that teardown, and `schemachaos clean` after a SIGKILLed controller, can find it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from contract.remote import Remote, RemoteError
from contract.rundir import CATALOG
from harness.cluster_spec import (
    REMOTE_IPTABLES_CLEAN,
    SSH_ROOT,
    Cluster,
    ClusterSpec,
    ProvisionError,
    check_run_id,
    node_names,
    rule_is_runs,
    split_roles,
)

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost

log = logging.getLogger("schemachaos.cluster")

__all__ = [  # the cluster's values live in harness.cluster_spec, provisioning in harness.backends
    "Cluster",
    "ClusterSpec",
    "ProvisionError",
    "Terminated",
    "clean",
    "ignore_signals",
    "node_names",
    "split_roles",
    "teardown_on_signals",
]


# -- signals -------------------------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP turned into an interrupt so the same teardown path runs as for Ctrl-C."""


@contextlib.contextmanager
def teardown_on_signals() -> Iterator[None]:
    """Make SIGTERM and SIGHUP raise like SIGINT does, so `finally` blocks tear down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, _frame: FrameType | None) -> None:
        raise Terminated(f"signal {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def ignore_signals() -> Iterator[None]:
    """Teardown must finish: a second Ctrl-C does not interrupt it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# -- clean ---------------------------------------------------------------------------------


def _iptables_rules(table: str) -> list[str]:
    if shutil.which("iptables") is None:
        return []
    proc = subprocess.run(
        ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, timeout=30
    )
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def remove_iptables_rules(
    addresses: list[str] | None = None, run_id: str | None = None
) -> list[str]:
    """Delete host iptables rules of ours: with neither argument every one; otherwise only
    the run's (carrying its run comment, or naming one of its node `addresses`)."""
    if os.geteuid() != 0:
        return []
    removed: list[str] = []
    for table in ("filter", "mangle", "nat", "raw"):
        for rule in _iptables_rules(table):
            if not rule.startswith("-A ") or not rule_is_runs(rule, run_id, addresses):
                continue
            args = shlex.split(rule)
            args[0] = "-D"
            proc = subprocess.run(
                ["iptables", "-w", "-t", table, *args], capture_output=True, text=True, timeout=30
            )
            if proc.returncode == 0:
                removed.append(f"iptables -t {table} {rule}")
    return removed


def recorded_run(store: Path | None, run_id: str) -> tuple[Path, dict] | None:
    """The run directory of the store (store/<test>/<run>/) whose run.json names `run_id`,
    and that run.json; None when the store holds no such run (or it cannot be read)."""
    if store is None or not store.is_dir():
        return None
    for path in sorted(store.glob("*/*/run.json")):
        if not path.is_file():
            continue  # a FIFO would block the read forever: not a run.json anyway
        try:
            run = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a run directory that cannot be read names no run
        if isinstance(run, dict) and run.get("run_id") == run_id:
            return path.parent, run
    return None


def recorded_addresses(store: Path | None, run_id: str) -> list[str]:
    """The host addresses of a local run's nodes, from its run.json in the store (none for a
    run of another backend, or one the store does not hold): what host rules of that run
    without a run comment name."""
    from harness.remote_local import local_address

    found = recorded_run(store, run_id)
    if found is None or found[1].get("backend") != "local":
        return []
    run = found[1]
    try:
        base = str((run.get("options") or {}).get("local_base", "127.0.0.10"))
        return [local_address(i, base) for i in range(1, len(run.get("nodes") or []) + 1)]
    except (ValueError, TypeError, AttributeError):
        return []  # a run.json that breaks the contract names no addresses


def collect_dead_catalogs(store: Path | None, run_id: str | None = None) -> list[str]:
    """`clean` first, while a dead run's nodes still answer: its catalog log, collected into
    its run directory as its reaper would have (harness.reaper_agent), for each run (or the
    one named) whose node containers still run, whose reaper is gone (the run is dead, and
    no one else collects) and whose directory in the store has none. One line per run saying
    what came of it; none without a Docker engine."""
    from harness.reaper import reaper_exists, salvage_with_sdk
    from harness.remote_docker import RUN_LABEL, DockerUnavailable, docker_client

    try:
        client = docker_client(timeout=10)
    except DockerUnavailable:
        return []
    label = RUN_LABEL if run_id is None else f"{RUN_LABEL}={check_run_id(run_id)}"
    nodes = client.containers.list(filters={"label": label})  # running ones: they can answer
    running = {c.labels.get(RUN_LABEL, "") for c in nodes}
    notes: list[str] = []
    for rid in sorted(r for r in running if r):
        found = recorded_run(store, rid)
        if found is None or (found[0] / CATALOG).exists():
            continue
        try:
            if reaper_exists(client, rid):
                notes.append(f"run {rid}: {CATALOG}: not collected (its reaper is still there)")
                continue
            notes.append(f"run {rid}: {salvage_with_sdk(client, rid, found[0])}")
        except Exception as e:  # the clean goes on: removing the run matters more
            notes.append(f"run {rid}: {CATALOG}: not collected ({type(e).__name__}: {e})")
    return notes


def _other_leases(remote: Remote, run_id: str) -> list[str]:
    """The runs other than `run_id` that hold a lease on an ssh host (their nodes live there)."""
    out = remote.run(f"ls -1 {SSH_ROOT} 2>/dev/null || true", timeout=30).stdout.split()
    held = {n.removeprefix("lease-") for n in out if n.startswith("lease-")}
    return sorted(r for r in held if not r.endswith(".log") and r != run_id)


def clean_ssh_hosts(hosts: Sequence[SshHost], run_id: str | None = None) -> list[str]:
    """On the hosts of a nodes file: kill our node processes, delete our iptables rules.

    A host holds one run's nodes at a time (their directories are fixed), so with `run_id` a
    host another run holds a lease on is left alone and named."""
    from harness.remote_ssh import SshRemote

    removed: list[str] = []
    for h in hosts:
        remote = SshRemote(
            h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
        )
        try:
            others = _other_leases(remote, run_id) if run_id is not None else []
            if others:
                removed.append(f"{h.name}: not cleaned: held by run {', '.join(others)}")
                continue
            remote.signal(f"schemasync.node --config {SSH_ROOT}/", "KILL")
            out = remote.run(REMOTE_IPTABLES_CLEAN, timeout=60)
            removed.append(
                f"{h.name}: node processes; {out.stdout.count('removed')} iptables rules"
            )
        except RemoteError as e:
            removed.append(f"{h.name}: not cleaned: {e}")
        finally:
            remote.close()
    return removed


def clean(
    run_id: str | None = None, store: Path | None = None, hosts: Sequence[SshHost] = ()
) -> list[str]:
    """Remove what schemachaos left: containers, networks, tagged processes, iptables rules,
    reapers and watchdogs, temp areas (and, given the hosts of a nodes file, our processes
    and rules on those hosts). run_id None means every run's (and the Spark cluster); a run
    id means only that run's, matched exactly; an empty or malformed id is refused
    (ValueError)."""
    from harness.reaper import remove_guards
    from harness.remote_local import kill_tagged

    if run_id is not None:
        check_run_id(run_id)
    removed: list[str] = []
    try:
        from harness.remote_docker import docker_client, remove_run
        from harness.spark_cluster import spark_down

        removed += remove_run(docker_client(timeout=10), run_id)
        if run_id is None:  # a Spark cluster belongs to no run: only a full clean removes it
            removed += spark_down(docker_client(timeout=10))
    except Exception as e:
        if "unreachable" not in str(e):
            raise
    removed += [f"process {pid}" for pid in kill_tagged(run_id)]
    if run_id is None:
        removed += remove_iptables_rules()
    else:  # read before the run's temp area goes; its run.json stays
        removed += remove_iptables_rules(recorded_addresses(store, run_id), run_id=run_id)
    removed += remove_guards(run_id)  # the runs' reaper containers and local watchdogs
    removed += _remove_temp_areas(store, run_id)
    if hosts:
        removed += clean_ssh_hosts(hosts, run_id)
    return removed


def _remove_temp_areas(store: Path | None, run_id: str | None) -> list[str]:
    """The runs' `.tmp` areas (of one run: the one whose RUN_ID tag is exactly that id)."""
    removed: list[str] = []
    if store is None or not store.is_dir():
        return removed
    for tmp in store.glob("*/*/.tmp"):
        tag = tmp / "RUN_ID"
        try:
            owner = tag.read_text().strip() if tag.is_file() else None
        except OSError:
            owner = None
        if run_id is None or owner == run_id:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(f"temp area {tmp}")
    return removed
