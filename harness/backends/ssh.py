"""`--backend ssh`: nodes on hosts named by a nodes file, reached over ssh as root."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.config_error import ConfigError
from contract.remote import Remote, RemoteError
from harness.backends.base import BackendOptionsError, HostBackend
from harness.cluster_spec import (
    SSH_ROOT,
    Cluster,
    ClusterSpec,
    ProvisionError,
    SshHosts,
    spec_layout,
)
from harness.options import RunOptions
from harness.reaper import NoGuard, RunGuard, SshLeases
from harness.remote_ssh import SshHost, SshRemote, load_nodes_file


class SshBackend(HostBackend):
    name = "ssh"

    def available(self) -> bool:
        return False  # needs a nodes file: never picked by auto

    def node_layout(self, opts: RunOptions, hosts: Sequence[SshHost] | None) -> list[str]:
        if hosts is None:
            raise ProvisionError("--nodes-file: required with --backend ssh")
        return [h.name for h in hosts]

    def check_options(self, opts: RunOptions) -> None:
        """The nodes file decides the node count, so --voters is capped by it, not refused
        (the file itself was read and checked as the run was resolved)."""
        if opts.nodes_file is None:
            raise BackendOptionsError("--nodes-file: required with --backend ssh")

    def unavailable_kinds(self) -> frozenset[str]:
        return frozenset()

    def node_image(self, target: object) -> str | None:
        return None

    def guard(self, spec: ClusterSpec, run_id: str, work_dir: Path) -> RunGuard:
        if spec.hosts is None and spec.nodes_file is None:
            return NoGuard()  # provisioning refuses this case with its own message
        return SshLeases.start(run_id, self._hosts(spec))

    def provision(
        self, spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
    ) -> Cluster:
        hosts = self._hosts(spec)
        layout = spec_layout(spec, [h.name for h in hosts])
        nodes, voters, learners = list(layout.nodes), list(layout.voters), list(layout.learners)
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
        return Cluster(
            nodes=nodes,
            voters=voters,
            learners=learners,
            remotes=remotes,
            backend=self.name,
            run_id=run_id,
            node_dirs={n: f"{SSH_ROOT}/{n}" for n in nodes},
            python="python3",
            code_dir=f"{SSH_ROOT}/code",
            upload_code_to=f"{SSH_ROOT}/code",
        )

    @staticmethod
    def _hosts(spec: ClusterSpec) -> SshHosts:
        """The run's hosts as it read them; a spec made without a run has its file read here."""
        if spec.hosts is not None:
            return spec.hosts
        if spec.nodes_file is None:
            raise ProvisionError("--nodes-file is required with --backend ssh")
        try:
            return tuple(load_nodes_file(spec.nodes_file))
        except ConfigError as e:
            raise ProvisionError(str(e)) from e
