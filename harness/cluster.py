"""Cluster lifecycle: provision nodes on a backend, always tear them down, clean up after crashes.

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
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from harness.cluster_spec import (
    REMOTE_IPTABLES_CLEAN,
    SSH_ROOT,
    ClusterSpec,
    ProvisionError,
    check_run_id,
    rule_is_runs,
)
from harness.remote import Remote, RemoteError

log = logging.getLogger("schemachaos.cluster")

BACKENDS = ("auto", "docker", "local", "ssh")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Cluster:
    """The nodes of one run and how to reach them."""

    nodes: list[str]
    voters: list[str]
    learners: list[str]
    remotes: dict[str, Remote]
    backend: str
    run_id: str = ""
    node_dirs: dict[str, str] = field(default_factory=dict)  # per-node root for data, config, log
    python: str = "python3"  # interpreter on the nodes
    code_dir: str | None = None  # PYTHONPATH on the nodes; None: upload the code there
    upload_code_to: str | None = None
    ports: dict[str, int] = field(
        default_factory=lambda: {"client_port": 10800, "metastore_port": 10900, "peer_port": 11000}
    )

    @property
    def hosts(self) -> dict[str, str]:
        return {n: self.remotes[n].host for n in self.nodes}


def node_names(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


def split_roles(nodes: list[str], voters: int) -> tuple[list[str], list[str]]:
    if not 1 <= voters <= len(nodes):
        raise ProvisionError(f"--voters must be between 1 and the node count ({len(nodes)})")
    return nodes[:voters], nodes[voters:]


def docker_answers() -> bool:
    from harness.remote_docker import DockerUnavailable, docker_client

    try:
        docker_client(timeout=5)
    except DockerUnavailable:
        return False
    return True


def resolve_backend(backend: str) -> tuple[str, str]:
    """(backend, why): auto picks docker when the engine answers, else local."""
    if backend not in BACKENDS:
        raise ProvisionError(
            f"--backend: unknown backend {backend!r} (one of {', '.join(BACKENDS)})"
        )
    if backend != "auto":
        return backend, f"backend {backend} (asked for)"
    if docker_answers():
        return "docker", "backend docker (auto: the Docker engine answers)"
    return "local", "backend local (auto: no Docker engine answers)"


@contextlib.contextmanager
def provision(spec: ClusterSpec, run_id: str, work_dir: Path) -> Iterator[Cluster]:
    """Nodes up on the chosen backend; on exit (normal, exception, signal) everything goes.

    work_dir is the run's temp area: the ssh key pair and local node dirs live there and are
    removed with the cluster.
    """
    backend, _ = resolve_backend(spec.backend)
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (work_dir / "RUN_ID").write_text(run_id + "\n")
    cleanups: list[Any] = [lambda: shutil.rmtree(work_dir, ignore_errors=True)]
    try:
        from harness.reaper import start_run_guard

        # before any node: removes the run's nodes if this controller dies, even by SIGKILL
        cleanups.append(start_run_guard(backend, spec, run_id, work_dir).close)
        if backend == "docker":
            cluster = _provision_docker(spec, run_id, work_dir, cleanups)
        elif backend == "local":
            cluster = _provision_local(spec, run_id, work_dir, cleanups)
        else:
            cluster = _provision_ssh(spec, run_id, cleanups)
        yield cluster
    finally:
        with ignore_signals():
            for cleanup in reversed(cleanups):
                try:
                    cleanup()
                except Exception as e:  # keep tearing down the rest
                    log.warning("teardown step failed: %s", e)


def _provision_docker(
    spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
) -> Cluster:
    from harness.images import ensure_images
    from harness.remote_docker import DockerNodes, DockerUnavailable, generate_run_key

    nodes = node_names(spec.nodes)
    voters, learners = split_roles(nodes, spec.voters)
    try:
        image = spec.image or ensure_images().node
        key = generate_run_key(work_dir / "ssh")
        docker_nodes = DockerNodes(run_id, nodes, image, key)
    except DockerUnavailable as e:
        raise ProvisionError(str(e)) from e
    cleanups.append(docker_nodes.down)
    try:
        remotes = docker_nodes.up(timeout=spec.ready_timeout_s)
    except RemoteError as e:
        raise ProvisionError(f"docker node {e}") from e
    return Cluster(
        nodes=nodes,
        voters=voters,
        learners=learners,
        remotes=dict(remotes),
        backend="docker",
        run_id=run_id,
        node_dirs={n: "/var/lib/schemasync" for n in nodes},
        python="python3",
        code_dir="/opt/schemachaos",
    )


def _provision_local(
    spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
) -> Cluster:
    from harness.remote_local import LocalRemote, check_ports_free, kill_tagged, local_address

    nodes = node_names(spec.nodes)
    voters, learners = split_roles(nodes, spec.voters)
    addresses = [local_address(i, spec.local_base) for i in range(1, len(nodes) + 1)]
    try:
        check_ports_free(addresses)
    except RemoteError as e:
        raise ProvisionError(str(e).removeprefix("local: ")) from e
    if os.geteuid() != 0:
        log.warning("local backend without root: network faults (iptables) are unavailable")
    remotes: dict[str, Remote] = {
        n: LocalRemote(n, a, run_id) for n, a in zip(nodes, addresses, strict=True)
    }
    cleanups.append(lambda: kill_tagged(run_id))
    cleanups.append(lambda: remove_iptables_rules(addresses))
    node_dirs = {n: str(work_dir / "nodes" / n) for n in nodes}
    for d in node_dirs.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    return Cluster(
        nodes=nodes,
        voters=voters,
        learners=learners,
        remotes=remotes,
        backend="local",
        run_id=run_id,
        node_dirs=node_dirs,
        python=sys.executable,
        code_dir=str(REPO_ROOT),
    )


def _provision_ssh(spec: ClusterSpec, run_id: str, cleanups: list[Any]) -> Cluster:
    from contract.config_error import ConfigError
    from harness.remote_ssh import SshRemote, load_nodes_file

    if spec.nodes_file is None:
        raise ProvisionError("--nodes-file is required with --backend ssh")
    try:
        hosts = load_nodes_file(spec.nodes_file)
    except ConfigError as e:
        raise ProvisionError(str(e)) from e
    nodes = [h.name for h in hosts]
    voters, learners = split_roles(nodes, min(spec.voters, len(nodes)))
    remotes: dict[str, Remote] = {}
    for h in hosts:
        remote: Remote = SshRemote(
            h.name, h.host, port=h.port, user=h.user, key_file=h.key, known_hosts=h.known_hosts
        )
        remotes[h.name] = remote
        cleanups.append(remote.close)
    for remote in remotes.values():
        try:
            remote.run("true", timeout=15)
        except RemoteError as e:
            raise ProvisionError(f"ssh host {e}") from e
    root = SSH_ROOT
    return Cluster(
        nodes=nodes,
        voters=voters,
        learners=learners,
        remotes=remotes,
        backend="ssh",
        run_id=run_id,
        node_dirs={n: f"{root}/{n}" for n in nodes},
        python="python3",
        code_dir=f"{root}/code",
        upload_code_to=f"{root}/code",
    )


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


def recorded_addresses(store: Path | None, run_id: str) -> list[str]:
    """The host addresses of a local run's nodes, from its run.json in the store (none for a
    run of another backend, or one the store does not hold): what host rules of that run
    without a run comment name. Any run directory of the store: store/<test>/<run>/."""
    from harness.remote_local import local_address

    if store is None or not store.is_dir():
        return []
    for path in sorted(store.glob("*/*/run.json")):
        try:
            run = json.loads(path.read_text())
            if not isinstance(run, dict) or run.get("run_id") != run_id:
                continue
            if run.get("backend") != "local":
                return []
            base = str((run.get("options") or {}).get("local_base", "127.0.0.10"))
            return [local_address(i, base) for i in range(1, len(run.get("nodes") or []) + 1)]
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # a run directory that cannot be read names no addresses
    return []


def _other_leases(remote: Remote, run_id: str) -> list[str]:
    """The runs other than `run_id` that hold a lease on an ssh host (their nodes live there)."""
    out = remote.run(f"ls -1 {SSH_ROOT} 2>/dev/null || true", timeout=30).stdout.split()
    held = {n.removeprefix("lease-") for n in out if n.startswith("lease-")}
    return sorted(r for r in held if not r.endswith(".log") and r != run_id)


def clean_ssh_hosts(nodes_file: Path, run_id: str | None = None) -> list[str]:
    """On the hosts of a nodes file: kill our node processes, delete our iptables rules.

    A host holds one run's nodes at a time (their directories are fixed), so with `run_id` a
    host another run holds a lease on is left alone and named."""
    from harness.remote_ssh import SshRemote, load_nodes_file

    removed: list[str] = []
    for h in load_nodes_file(nodes_file):
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
    run_id: str | None = None, store: Path | None = None, nodes_file: Path | None = None
) -> list[str]:
    """Remove what schemachaos left: containers, networks, tagged processes, iptables rules,
    reapers and watchdogs, temp areas (and, given a nodes file, our processes and rules on
    those hosts). run_id None means every run's (and the Spark cluster); a run id means only
    that run's, matched exactly; an empty or malformed id is refused (ValueError)."""
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
    if nodes_file is not None:
        removed += clean_ssh_hosts(nodes_file, run_id)
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
