"""The PostgreSQL node image, made like the schemasync node image: debootstrap, import, one layer.

The base (bookworm + postgresql-15 + sshd + the fault tools) is the slow part and is tagged by
the hash of the suite and the package list, so it is built once; the layer on top carries
cluster-images/postgres/ and rebuilds in seconds when those files change.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from harness.images import (
    CLUSTER_IMAGES,
    LABEL,
    SUITE,
    ImageBuildError,
    Progress,
    _add_file,
    _hash_files,
    _noop,
    _stream_lines,
    apt_mirror,
    build_layer,
    drop_apt_caches,
    ensure_layered,
    import_rootfs,
    remove_rootfs,
)

POSTGRES_IMAGES = CLUSTER_IMAGES / "postgres"
PG_MAJOR = 15
PG_PACKAGES = (
    f"postgresql-{PG_MAJOR}",
    "openssh-server",
    "iproute2",
    "iptables",
    "procps",
)
PG_BASE_REPO = "schemachaos-pgbase"
PG_REPO = "schemachaos-postgres"
PG_BASE_CHANGES = [
    f"LABEL {LABEL}=postgres",
    f"ENV PATH=/usr/lib/postgresql/{PG_MAJOR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
    "/usr/bin:/sbin:/bin",
    "EXPOSE 22 5432",
    'ENTRYPOINT ["/usr/local/sbin/schemachaos-entrypoint"]',
]
# Where each file goes in the image, with its mode: the sshd config is the node image's own.
PG_FILES = {
    CLUSTER_IMAGES / "sshd_config": ("etc/ssh/sshd_config", 0o644),
    POSTGRES_IMAGES / "entrypoint.sh": ("usr/local/sbin/schemachaos-entrypoint", 0o755),
}


def pg_base_tag() -> str:
    """Content hash of what the debootstrap step depends on: the suite and the package list."""
    h = hashlib.sha256()
    h.update(f"{SUITE}\0{' '.join(PG_PACKAGES)}\0{'|'.join(PG_BASE_CHANGES)}\0".encode())
    return f"{PG_BASE_REPO}:{h.hexdigest()[:16]}"


def pg_tag(base: str | None = None) -> str:
    """Content hash of the base tag plus the files of the layer on top."""
    h = hashlib.sha256()
    h.update((base or pg_base_tag()).encode() + b"\0")
    _hash_files(h, CLUSTER_IMAGES, [POSTGRES_IMAGES / "Dockerfile", *PG_FILES])
    return f"{PG_REPO}:{h.hexdigest()[:16]}"


def _debootstrap_pg(rootfs: Path, mirror: str, progress: Progress) -> None:
    progress(f"debootstrap {SUITE} + postgresql-{PG_MAJOR} from {mirror}")
    _stream_lines(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PG_PACKAGES)}",
            "--components=main",
            SUITE,
            str(rootfs),
            mirror,
        ],
        progress,
    )
    # Host keys come from each container at start; the packaged cluster is never used (the
    # target makes its own data directories), so drop it to keep the image small and inert.
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    subprocess.run(["rm", "-rf", str(rootfs / "var/lib/postgresql" / str(PG_MAJOR))], check=True)
    subprocess.run(["rm", "-rf", str(rootfs / "etc/postgresql" / str(PG_MAJOR))], check=True)
    for d in ("run/sshd", "root/.ssh", "var/lib/schemasync"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    drop_apt_caches(rootfs)


def build_pg_base(client: object, tag: str, progress: Progress, mirror: str | None = None) -> None:
    """debootstrap with postgresql + docker import; the rootfs is removed afterwards."""
    if subprocess.run(["which", "debootstrap"], capture_output=True).returncode != 0:
        raise ImageBuildError("debootstrap is not installed (make setup installs it)")
    tmp = Path(tempfile.mkdtemp(prefix="schemachaos-pgrootfs-", dir="/var/tmp"))
    try:
        rootfs = tmp / "rootfs"
        _debootstrap_pg(rootfs, mirror or apt_mirror(), progress)
        import_rootfs(client, rootfs, tag, progress, PG_BASE_CHANGES)
    finally:
        remove_rootfs(tmp, progress)


def _pg_context() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_file(tar, POSTGRES_IMAGES / "Dockerfile", "Dockerfile", 0o644)
        for path, (dest, mode) in PG_FILES.items():
            _add_file(tar, path, f"rootfs/{dest}", mode)
    return buf.getvalue()


def build_pg(client: object, base: str, tag: str, progress: Progress) -> None:
    """The Dockerfile layer on top of the PostgreSQL base."""
    build_layer(client, _pg_context(), base, tag, progress)


def ensure_postgres_image(
    client: object | None = None, progress: Progress = _noop, force: bool = False
) -> str:
    """Build whatever of the PostgreSQL base and image is missing; return the image tag."""
    import docker

    docker_client = client or docker.from_env()
    base = pg_base_tag()
    tag = pg_tag(base)
    ensure_layered(
        docker_client,
        base,
        tag,
        build_base=lambda: build_pg_base(docker_client, base, progress),
        build_top=lambda: build_pg(docker_client, base, tag, progress),
        prune_repos=(PG_REPO, PG_BASE_REPO),
        progress=progress,
        force=force,
        spare=1,
    )
    return tag
