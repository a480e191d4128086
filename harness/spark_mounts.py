"""Whether our Spark cluster (`schemachaos spark up`) can read a run directory: its executors see
only the store it bind-mounts, at the same path (docs/spark.md). A run outside it would fail
deep in Spark as "Path does not exist", after a Java stack; it is refused first instead.

A cluster this machine's Docker does not run (a foreign master) is not ours to know: no check.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.spark_cluster import SPARK_LABEL


def outside_mounted_store(url: str, run_dirs: Sequence[Path]) -> str | None:
    """Why the cluster at `url` (spark:// or sc://) cannot read one of `run_dirs`, or None
    (it can, or the URL names no cluster of ours)."""
    if not url.startswith(("spark://", "sc://")):
        return None
    host = urlsplit(url).hostname
    stores = _mounted_stores(host) if host else None
    if stores is None:
        return None
    for run_dir in run_dirs:
        path = Path(run_dir).resolve()
        if not any(path.is_relative_to(store) for store in stores):
            mounted = ", ".join(str(s) for s in sorted(stores)) or "nothing"
            return (
                f"{path} is outside the store the cluster at {url} mounts ({mounted}): its "
                "executors cannot read it (analyze runs under that store, docs/spark.md)"
            )
    return None


def _mounted_stores(host: str) -> set[Path] | None:
    """The paths bind-mounted into the cluster one of whose containers is `host` (an address
    or a name); None when Docker does not answer or no cluster of ours is there."""
    from harness.remote_docker import DockerUnavailable, docker_client, labelled_containers

    try:
        client = docker_client(timeout=5)
        containers = labelled_containers(client, SPARK_LABEL)
    except (DockerUnavailable, OSError):
        return None
    except Exception as e:  # docker.errors.APIError: the engine answered but refused
        if type(e).__module__.startswith("docker"):
            return None
        raise
    cluster = next((_cluster(c) for c in containers if host in _addresses(c)), None)
    if cluster is None:
        return None
    return {
        Path(m["Destination"])
        for c in containers
        if _cluster(c) == cluster
        for m in c.attrs.get("Mounts", [])
        if m.get("Type") == "bind"
    }


def _cluster(container: Any) -> str:
    return str(container.labels.get(SPARK_LABEL, ""))


def _addresses(container: Any) -> set[str]:
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    ips = {str(n.get("IPAddress")) for n in networks.values() if n.get("IPAddress")}
    return ips | {container.name, str(container.attrs.get("Config", {}).get("Hostname", ""))}
