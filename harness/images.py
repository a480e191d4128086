"""Node images built from scratch: debootstrap a Debian rootfs, import it, layer the code on top.

No registry can be pulled from, so the base is made with debootstrap from the mirror apt already
uses. Tags are content hashes, so an unchanged tree never rebuilds.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Package data of harness, so a plain (non-editable) `pip install .` can build images too: in a
# checkout harness/cluster-images links to the top-level cluster-images/, a wheel holds the files.
CLUSTER_IMAGES = Path(str(resources.files("harness").joinpath("cluster-images")))
SCHEMASYNC_DIR = REPO_ROOT / "schemasync"
SUITE = "bookworm"
PACKAGES = (
    "python3",
    "python3-msgpack",
    "openssh-server",
    "iproute2",
    "iptables",
    "faketime",
    "procps",
)
BASE_REPO = "schemachaos-base"
NODE_REPO = "schemachaos-node"
LABEL = "schemachaos"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

Progress = Callable[[str], None]


class ImageBuildError(Exception):
    """The node image could not be built; the message names the step."""


@dataclass(frozen=True)
class ImageTags:
    base: str
    node: str


def _noop(_: str) -> None:
    pass


def apt_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses on this machine (sources.list or deb822 *.sources)."""
    candidates: list[str] = []
    one_line = sources_dir / "sources.list"
    files = [one_line] if one_line.exists() else []
    files += sorted((sources_dir / "sources.list.d").glob("*.list"))
    files += sorted((sources_dir / "sources.list.d").glob("*.sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (m.group(1).lower(), m.group(2).strip())
                    for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M)
                )
                if (
                    SUITE in fields.get("suites", "").split()
                    and "deb" in fields.get("types", "").split()
                ):
                    candidates += fields.get("uris", "").split()
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                    candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri:
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _hash_files(h: hashlib._Hash, root: Path, files: list[Path]) -> None:
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")


def _schemasync_sources() -> list[Path]:
    return [
        p
        for p in SCHEMASYNC_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in {".py", ".toml", ".json"}
    ]


def base_tag() -> str:
    """Content hash of what goes into the base: the suite, the package list, the image
    metadata set at import, cluster-images/."""
    h = hashlib.sha256()
    h.update(f"{SUITE}\0{' '.join(PACKAGES)}\0{chr(0).join(BASE_CHANGES)}\0".encode())
    _hash_files(h, CLUSTER_IMAGES, [p for p in CLUSTER_IMAGES.rglob("*") if p.is_file()])
    return f"{BASE_REPO}:{h.hexdigest()[:16]}"


def node_tag(base: str | None = None) -> str:
    """Content hash of the base tag plus the schemasync sources."""
    h = hashlib.sha256()
    h.update((base or base_tag()).encode() + b"\0")
    _hash_files(h, SCHEMASYNC_DIR, _schemasync_sources())
    return f"{NODE_REPO}:{h.hexdigest()[:16]}"


def image_exists(client: object, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return False
    return True


def _stream_lines(cmd: list[str], progress: Progress) -> list[str]:
    """Run cmd, report each output line, keep the tail for the error message."""
    tail: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            progress(line)
            tail = [*tail[-19:], line]
    if proc.wait() != 0:
        raise ImageBuildError(f"{cmd[0]} failed (exit {proc.returncode}): " + " | ".join(tail[-5:]))
    return tail


def _debootstrap(rootfs: Path, mirror: str, progress: Progress) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (make setup installs it)")
    progress(f"debootstrap {SUITE} from {mirror}")
    _stream_lines(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            "--components=main",
            SUITE,
            str(rootfs),
            mirror,
        ],
        progress,
    )
    # Host keys come from each container at start, never from the shared image.
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for d in ("run/sshd", "root/.ssh", "var/lib/schemasync", "opt/schemachaos"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    (rootfs / "root/.ssh").chmod(0o700)
    drop_apt_caches(rootfs)


def drop_apt_caches(rootfs: Path) -> None:
    """Remove the downloaded packages and lists: they only make the image bigger."""
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (rootfs / junk).glob("*"):
            if p.is_file():
                p.unlink()


def import_rootfs(
    client: object,
    rootfs: Path,
    tag: str,
    progress: Progress,
    changes: list[str],
) -> None:
    """`docker import` of a debootstrapped tree as `tag`, with Dockerfile `changes`."""
    repo, _, version = tag.partition(":")
    progress(f"docker import {tag}")
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None
    try:
        client.api.import_image(  # type: ignore[attr-defined]
            src=tar.stdout,
            stream_src=True,
            repository=repo,
            tag=version,
            changes=changes,
        )
    finally:
        tar.stdout.close()
        err = tar.stderr.read().decode() if tar.stderr else ""
        if tar.wait() != 0:
            raise ImageBuildError(f"tar of the rootfs failed: {err.strip()}")


def build_base(client: object, tag: str, progress: Progress, mirror: str | None = None) -> None:
    """debootstrap + docker import; the rootfs lives in a temp dir removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="schemachaos-rootfs-", dir="/var/tmp"))
    try:
        rootfs = tmp / "rootfs"
        _debootstrap(rootfs, mirror or apt_mirror(), progress)
        import_rootfs(client, rootfs, tag, progress, BASE_CHANGES)
    finally:
        remove_rootfs(tmp, progress)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)


def remove_rootfs(root: Path, progress: Progress = _noop) -> None:
    """Unmount whatever a failed debootstrap left mounted inside (proc, a bind-mounted /dev)
    before deleting: rmtree would otherwise walk into the host's own /dev."""
    for point in _mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
    left = _mounts_under(root)
    if left:
        progress(f"left {root} in place: still mounted: {', '.join(left)}")
        return
    shutil.rmtree(root, ignore_errors=True)


# Where each cluster-images/ file goes in the node image, with its mode.
NODE_FILES = {
    "sshd_config": ("etc/ssh/sshd_config", 0o644),
    "entrypoint.sh": ("usr/local/sbin/schemachaos-entrypoint", 0o755),
}
BASE_CHANGES = [
    f"LABEL {LABEL}=node",
    "ENV PYTHONPATH=/opt/schemachaos PYTHONDONTWRITEBYTECODE=1",
    "EXPOSE 22 10800 10900 11000",
    'ENTRYPOINT ["/usr/local/sbin/schemachaos-entrypoint"]',
]


def _add_file(tar: tarfile.TarFile, path: Path, arcname: str, mode: int) -> None:
    info = tar.gettarinfo(str(path), arcname=arcname)
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    with path.open("rb") as f:
        tar.addfile(info, f)


def _node_context() -> bytes:
    """The build context tar: the Dockerfile and a rootfs/ tree copied onto the base in one step."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_file(tar, CLUSTER_IMAGES / "Dockerfile", "Dockerfile", 0o644)
        for name, (dest, mode) in NODE_FILES.items():
            _add_file(tar, CLUSTER_IMAGES / name, f"rootfs/{dest}", mode)
        for p in sorted(_schemasync_sources()):
            rel = p.relative_to(SCHEMASYNC_DIR)
            _add_file(tar, p, f"rootfs/opt/schemachaos/schemasync/{rel}", 0o644)
    return buf.getvalue()


def build_node(client: object, base: str, tag: str, progress: Progress) -> None:
    """The Dockerfile layer with the project's code on top of the base."""
    build_layer(client, _node_context(), base, tag, progress)


def build_layer(client: object, context: bytes, base: str, tag: str, progress: Progress) -> None:
    """`docker build` of a tar context whose Dockerfile starts FROM $BASE_IMAGE; streams the
    builder's output as progress (shared by every image built on a debootstrapped base)."""
    progress(f"docker build {tag}")
    stream: Iterator[dict] = client.api.build(  # type: ignore[attr-defined]
        fileobj=io.BytesIO(context),
        custom_context=True,
        tag=tag,
        rm=True,
        forcerm=True,
        buildargs={"BASE_IMAGE": base},
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}")
        text = str(chunk.get("stream", "")).strip()
        if text:
            progress(text)


def ensure_images(
    client: object | None = None, progress: Progress = _noop, force: bool = False
) -> ImageTags:
    """Build whatever of base and node image is missing; return both tags."""
    import docker

    docker_client = client or docker.from_env()
    base = base_tag()
    node = node_tag(base)
    ensure_layered(
        docker_client,
        base,
        node,
        build_base=lambda: build_base(docker_client, base, progress),
        build_top=lambda: build_node(docker_client, base, node, progress),
        prune_repos=(NODE_REPO, BASE_REPO),
        progress=progress,
        force=force,
    )
    return ImageTags(base=base, node=node)


def ensure_layered(
    client: object,
    base: str,
    tag: str,
    *,
    build_base: Callable[[], None],
    build_top: Callable[[], None],
    prune_repos: tuple[str, ...] = (),
    progress: Progress = _noop,
    force: bool = False,
    spare: int = 2,
) -> None:
    """Build `base` and then `tag` on it, each only where missing (or `force`); after a new
    `tag`, remove the superseded tags of `prune_repos`."""
    if force or not image_exists(client, base):
        build_base()
    else:
        progress(f"{base} is up to date")
    if force or not image_exists(client, tag):
        build_top()
        if prune_repos:
            prune_old_images(client, {base, tag}, progress, spare, prune_repos)
    else:
        progress(f"{tag} is up to date")


def prune_old_images(
    client: object,
    keep: set[str],
    progress: Progress = _noop,
    spare: int = 2,
    repos: tuple[str, ...] = (NODE_REPO, BASE_REPO),
) -> None:
    """Remove superseded tags of `repos`, sparing the newest few (another run may still use
    one)."""
    import docker.errors

    for repo in repos:
        images = client.images.list(name=repo)  # type: ignore[attr-defined]
        images.sort(key=lambda i: i.attrs.get("Created", ""), reverse=True)
        old = [i for i in images if not set(i.tags) & keep][spare:]
        for image in old:
            for tag in image.tags:
                try:
                    client.images.remove(tag, noprune=False)  # type: ignore[attr-defined]
                    progress(f"removed old image {tag}")
                except docker.errors.APIError:
                    pass  # in use by a container: keep it
