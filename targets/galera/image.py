"""The Galera node image: one layer on the debootstrapped schemachaos base.

The base (bookworm + sshd + iptables + iproute2 + faketime) is the project's own and is built
from nothing by harness/images; the layer installs `mariadb-server galera-4 rsync` from Debian's
mirror and the entrypoint. Its tag hashes the base tag and image_files/, so it is built once
and rebuilt only when those change. The files live beside this module, not in cluster-images/:
everything there feeds the base image's hash, and a new target must not rebuild everyone's base.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from harness.images import (
    CLUSTER_IMAGES,
    Progress,
    _add_file,
    _noop,
    base_tag,
    build_base,
    build_layer,
    ensure_layered,
)

GALERA_IMAGES = Path(__file__).resolve().parent / "image_files"
GALERA_REPO = "schemachaos-galera"
# Where each file goes in the image, with its mode: the sshd config is the node image's own.
GALERA_FILES = {
    CLUSTER_IMAGES / "sshd_config": ("etc/ssh/sshd_config", 0o644),
    GALERA_IMAGES / "entrypoint.sh": ("usr/local/sbin/schemachaos-entrypoint", 0o755),
}


def galera_tag(base: str | None = None) -> str:
    """Content hash of the base tag, the Dockerfile (its package list) and the layer's files."""
    h = hashlib.sha256()
    h.update((base or base_tag()).encode() + b"\0")
    h.update(_read(CLUSTER_IMAGES / "sshd_config"))
    for path in sorted(GALERA_IMAGES.iterdir()):
        h.update(path.name.encode() + b"\0" + _read(path) + b"\0")
    return f"{GALERA_REPO}:{h.hexdigest()[:16]}"


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _context() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_file(tar, GALERA_IMAGES / "Dockerfile", "Dockerfile", 0o644)
        for path, (dest, mode) in GALERA_FILES.items():
            _add_file(tar, path, f"rootfs/{dest}", mode)
    return buf.getvalue()


def ensure_galera_image(
    client: object | None = None, progress: Progress = _noop, force: bool = False
) -> str:
    """Build whatever of the base and the Galera layer is missing; return the image tag."""
    import docker

    docker_client = client or docker.from_env()
    base = base_tag()
    tag = galera_tag(base)
    ensure_layered(
        docker_client,
        base,
        tag,
        build_base=lambda: build_base(docker_client, base, progress),
        build_top=lambda: build_layer(docker_client, _context(), base, tag, progress),
        prune_repos=(GALERA_REPO,),  # the base is the node image's, pruned with it
        progress=progress,
        force=force,
        spare=1,
    )
    return tag
