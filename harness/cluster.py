"""Cluster lifecycle: signals that must not cut a teardown short, and clean up after crashes.

Provisioning is each backend's (harness.backends).

Everything made here is marked as ours (docker labels, a process environment tag, an iptables
comment) so that teardown, and `schemachaos clean` after a SIGKILLed controller, can find it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from harness.cluster_spec import (
    IPTABLES_COMMENT,
    REMOTE_IPTABLES_CLEAN,
    SSH_ROOT,
    Cluster,
    ClusterSpec,
    ProvisionError,
    node_names,
    split_roles,
)
from harness.remote import RemoteError

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


def remove_iptables_rules(addresses: list[str] | None = None) -> list[str]:
    """Delete host iptables rules commented as ours (only those naming `addresses`, if given)."""
    if os.geteuid() != 0:
        return []
    removed: list[str] = []
    for table in ("filter", "mangle", "nat", "raw"):
        for rule in _iptables_rules(table):
            if not rule.startswith("-A ") or IPTABLES_COMMENT not in rule:
                continue
            if addresses is not None and not any(
                a in rule.replace("/32", " ").split() for a in addresses
            ):
                continue
            args = shlex.split(rule)
            args[0] = "-D"
            proc = subprocess.run(
                ["iptables", "-w", "-t", table, *args], capture_output=True, text=True, timeout=30
            )
            if proc.returncode == 0:
                removed.append(f"iptables -t {table} {rule}")
    return removed


def clean_ssh_hosts(nodes_file: Path) -> list[str]:
    """On the hosts of a nodes file: kill our node processes, delete our iptables rules."""
    from harness.remote_ssh import SshRemote, load_nodes_file

    removed: list[str] = []
    for h in load_nodes_file(nodes_file):
        remote = SshRemote(
            h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
        )
        try:
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
    run_id: str | None = None, store: Path | None = None, nodes_file: Path | None = None
) -> list[str]:
    """Remove everything labelled as ours: containers, networks, tagged processes, iptables
    rules, leftover run keys (and, given a nodes file, our processes and rules on those
    hosts). With run_id, only that run's."""
    from harness.remote_local import kill_tagged

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
    removed += remove_iptables_rules(None)
    from harness.reaper import remove_guards

    removed += remove_guards(run_id)  # the runs' reaper containers and local watchdogs
    if store is not None and store.is_dir():
        for tmp in store.glob("*/*/.tmp"):
            tag = tmp / "RUN_ID"
            owner = tag.read_text().strip() if tag.is_file() else None
            if run_id is None or owner == run_id:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(f"temp area {tmp}")
    if nodes_file is not None:
        removed += clean_ssh_hosts(nodes_file)
    return removed
