"""`--backend docker`: each node a container of the node image, on a network of its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.remote import RemoteError
from contract.target import DockerImageProvider
from harness.backends.base import (
    BackendOptionsError,
    HostBackend,
    check_voters,
)
from harness.cluster_spec import Cluster, ClusterSpec, ProvisionError, node_names, spec_layout
from harness.options import RunOptions
from harness.reaper import DockerReaper, RunGuard

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost


def docker_answers() -> bool:
    from harness.remote_docker import DockerUnavailable, docker_client

    try:
        docker_client(timeout=5)
    except DockerUnavailable:
        return False
    return True


class DockerBackend(HostBackend):
    name = "docker"

    def available(self) -> bool:
        return docker_answers()

    def node_layout(self, opts: RunOptions, hosts: Sequence[SshHost] | None) -> list[str]:
        return node_names(opts.nodes)

    def check_options(self, opts: RunOptions) -> None:
        check_voters(opts)
        if not docker_answers():
            raise BackendOptionsError("--backend docker: the Docker engine does not answer")

    def unavailable_kinds(self) -> frozenset[str]:
        return frozenset()  # every container is root on its own network namespace

    def node_image(self, target: object) -> str | None:
        """The target's own image when it builds one; else the node image, at provisioning."""
        return target.docker_image() if isinstance(target, DockerImageProvider) else None

    def guard(self, spec: ClusterSpec, run_id: str, work_dir: Path) -> RunGuard:
        return DockerReaper.start(run_id, work_dir)  # the run directory: its catalog if killed

    def provision(
        self, spec: ClusterSpec, run_id: str, work_dir: Path, cleanups: list[Any]
    ) -> Cluster:
        from harness.images import ensure_images
        from harness.remote_docker import DockerNodes, DockerUnavailable, generate_run_key

        layout = spec_layout(spec)
        nodes, voters, learners = list(layout.nodes), list(layout.voters), list(layout.learners)
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
            backend=self.name,
            run_id=run_id,
            node_dirs={n: "/var/lib/schemasync" for n in nodes},
            python="python3",
            code_dir="/opt/schemachaos",
        )
