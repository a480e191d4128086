"""Docker backend: one labelled network and one container per node, reached over SSH.

Containers get NET_ADMIN (iptables inside) and nothing privileged. The controller logs in with
an ed25519 key pair made for this run and pins the host key each container generated at start,
read through the Docker API, so no connection ever trusts an unknown key.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contract.remote import RemoteError
from harness.cluster_spec import check_run_id
from harness.remote_ssh import SshRemote

LABEL = "schemachaos"
RUN_LABEL = "schemachaos.run"
HOST_KEY_PATH = "/etc/ssh/ssh_host_ed25519_key.pub"


class DockerUnavailable(Exception):
    """No Docker engine answers."""


@dataclass(frozen=True)
class RunKey:
    private_path: Path
    public_line: str


def docker_client(timeout: float = 60.0) -> Any:
    """A Docker SDK client that answered a ping, or DockerUnavailable."""
    import docker

    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as e:
        raise DockerUnavailable(f"docker engine unreachable: {e}") from e
    return client


def generate_run_key(key_dir: Path) -> RunKey:
    """A fresh ed25519 key pair for this run, private half 0600 in key_dir (a temp area)."""
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = Ed25519PrivateKey.generate()
    private_path = key_dir / "id_ed25519"
    private_path.touch(mode=0o600)
    private_path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    public_line = (
        private.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + " schemachaos-run"
    )
    (key_dir / "id_ed25519.pub").write_text(public_line + "\n")
    return RunKey(private_path=private_path, public_line=public_line)


def _host_key(container: Any, timeout: float) -> paramiko.PKey:
    """Wait for the container's entrypoint to make its host key, then read it via docker exec."""
    deadline = time.monotonic() + timeout
    while True:
        code, out = container.exec_run(["cat", HOST_KEY_PATH])
        if code == 0 and out.strip():
            kind, data, *_ = out.decode().split()
            import base64

            return paramiko.PKey.from_type_string(kind, base64.b64decode(data))
        if time.monotonic() >= deadline:
            raise RemoteError(container.name, "container produced no ssh host key")
        time.sleep(0.1)


class DockerNodes:
    """The network and containers of one run: `remotes` after `up()`, nothing after `down()`."""

    def __init__(self, run_id: str, nodes: list[str], image: str, key: RunKey) -> None:
        self.run_id = run_id
        self.nodes = nodes
        self.image = image
        self.key = key
        self.client = docker_client()
        self.network: Any = None
        self.containers: dict[str, Any] = {}
        self.remotes: dict[str, SshRemote] = {}

    def _labels(self) -> dict[str, str]:
        return {LABEL: "1", RUN_LABEL: self.run_id}

    def _start_container(self, node: str) -> Any:
        container = self.client.containers.run(
            self.image,
            name=f"schemachaos-{self.run_id}-{node}",
            hostname=node,
            labels=self._labels(),
            network=self.network.name,
            cap_add=["NET_ADMIN"],
            environment={"SCHEMACHAOS_AUTHORIZED_KEY": self.key.public_line},
            init=True,
            detach=True,
        )
        self.containers[node] = container
        return container

    def _remote_for(self, node: str, timeout: float) -> SshRemote:
        container = self.containers[node]
        host_key = _host_key(container, timeout)
        container.reload()
        address = container.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]
        remote = SshRemote(
            node,
            address,
            user="root",
            key_file=str(self.key.private_path),
            host_keys=[host_key],
        )
        remote.wait_reachable(timeout)
        return remote

    def up(self, timeout: float = 60.0) -> dict[str, SshRemote]:
        """Create the network, start all containers in parallel, connect to each over SSH."""
        self.network = self.client.networks.create(
            f"schemachaos-{self.run_id}", driver="bridge", labels=self._labels()
        )
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(self._start_container, self.nodes))
            remotes = list(pool.map(lambda n: self._remote_for(n, timeout), self.nodes))
        self.remotes = {r.name: r for r in remotes}
        return self.remotes

    def down(self) -> None:
        """Close connections, remove containers and the network (also after a partial up())."""
        for remote in self.remotes.values():
            remote.close()
        remove_run(self.client, self.run_id)


def labelled_containers(client: Any, label: str) -> list[Any]:
    """Every container, running or not, that carries `label`. One removed while it is listed
    (by a reaper, or another clean) is left out instead of failing the listing."""
    return list(client.containers.list(all=True, filters={"label": label}, ignore_removed=True))


def run_filter(run_id: str | None) -> str:
    """The label filter of one run's things (Docker matches `key=value` exactly, so run X
    never takes X1's), or of all of ours when run_id is None; an empty or malformed id is
    refused (ValueError), never read as "all"."""
    if run_id is None:
        return LABEL
    return f"{RUN_LABEL}={check_run_id(run_id)}"


def remove_run(client: Any, run_id: str | None) -> list[str]:
    """Remove every container and network labelled as ours (of one run, or of all runs)."""
    label = run_filter(run_id)
    removed: list[str] = []
    containers = labelled_containers(client, label)

    def kill(c: Any) -> None:
        try:
            c.remove(force=True, v=True)
            removed.append(f"container {c.name}")
        except Exception as e:
            if "No such container" not in str(e) and "already in progress" not in str(e):
                raise

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(containers)))) as pool:
        list(pool.map(kill, containers))
    for network in client.networks.list(filters={"label": label}):
        try:
            network.remove()
            removed.append(f"network {network.name}")
        except Exception as e:
            if "not found" not in str(e).lower():
                raise
    return removed
