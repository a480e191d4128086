"""`--backend local`: node processes on this host, node i bound to loopback base + i.

All nodes share the host's iptables and qdiscs (`Cluster.shared_host`), which only root may
change: without root the network faults are not available here.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.remote import Remote, RemoteError
from harness.backends.base import (
    BackendOptionsError,
    HostBackend,
    check_voters,
)
from harness.cluster_spec import Cluster, ClusterSpec, ProvisionError, node_names, spec_layout
from harness.options import RunOptions
from harness.reaper import LocalWatchdog, RunGuard
from nemesis.registry import NEMESES

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost

log = logging.getLogger("schemachaos.cluster")
REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT_KINDS = frozenset(k for k, n in NEMESES.items() if n.needs_root)  # iptables/tc on the host


class LocalBackend(HostBackend):
    name = "local"

    def available(self) -> bool:
        return True

    def node_layout(self, opts: RunOptions, hosts: Sequence[SshHost] | None) -> list[str]:
        return node_names(opts.nodes)

    def check_options(self, opts: RunOptions) -> None:
        from harness.remote_local import check_ports_free, local_address

        check_voters(opts)
        needs_root = sorted(set(opts.nemesis) & self.unavailable_kinds())
        if needs_root:
            raise BackendOptionsError(
                f"--nemesis {','.join(needs_root)}: the local backend needs root for "
                "iptables/tc (run as root, or use --backend docker)"
            )
        try:
            addresses = [local_address(i, opts.local_base) for i in range(1, opts.nodes + 1)]
        except ValueError as e:
            raise BackendOptionsError(f"--local-base: {e}") from e
        try:
            check_ports_free(addresses)
        except RemoteError as e:
            raise BackendOptionsError(f"--backend local: {str(e).removeprefix('local: ')}") from e

    def unavailable_kinds(self) -> frozenset[str]:
        return frozenset() if os.geteuid() == 0 else ROOT_KINDS

    def node_image(self, target: object) -> str | None:
        return None

    def guard(self, spec: ClusterSpec, run_id: str, work_dir: Path) -> RunGuard:
        from harness.remote_local import local_address

        count = len(spec_layout(spec).nodes)
        addresses = [local_address(i, spec.local_base) for i in range(1, count + 1)]
        return LocalWatchdog.start(run_id, addresses, work_dir / "watchdog.log")

    def provision(
        self, spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
    ) -> Cluster:
        from harness.cluster import remove_iptables_rules
        from harness.remote_local import LocalRemote, check_ports_free, kill_tagged, local_address

        layout = spec_layout(spec)
        nodes, voters, learners = list(layout.nodes), list(layout.voters), list(layout.learners)
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
        cleanups.append(lambda: remove_iptables_rules(addresses, run_id=run_id))
        node_dirs = {n: str(work_dir / "nodes" / n) for n in nodes}
        for d in node_dirs.values():
            Path(d).mkdir(parents=True, exist_ok=True)
        return Cluster(
            nodes=nodes,
            voters=voters,
            learners=learners,
            remotes=remotes,
            backend=self.name,
            run_id=run_id,
            node_dirs=node_dirs,
            python=sys.executable,
            code_dir=str(REPO_ROOT),
            shared_host=True,
        )
