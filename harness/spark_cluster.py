"""A Spark standalone cluster in containers (`schemachaos spark up/down`): a master, N workers
and optionally a Spark Connect server on a private docker network, for `analyze --spark-master
spark://...` or `--spark-remote sc://...`.

The run store is bind-mounted at the same path in every container: the driver names a run by
its path, and executors (or the Connect server's driver) read and write exactly that path.
Everything is labelled (SPARK_LABEL=cluster name), so `spark down` and `schemachaos clean`
find it without remembering ids.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import py4j
import pyspark

from checker.session import JIT_JAVA_OPTIONS
from harness.images import (
    LABEL,
    ImageBuildError,
    _add_file,
    base_tag,
    build_layer,
    image_exists,
)
from harness.remote_docker import labelled_containers

SPARK_REPO = "schemachaos-spark"
SPARK_LABEL = "schemachaos.spark"  # value: the cluster's name
# The image: the debootstrapped base (imported, never pulled) plus Java 17 from Debian and the
# controller's own pyspark (its jars, bin/ and sbin/: a Spark distribution) with py4j, copied
# from the venv, so master, workers and Connect server run the checker driver's Spark version.
# Kept here rather than under cluster-images/: every file there is part of the base's tag.
SPARK_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \\
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \\
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY rootfs/ /
ENV SPARK_HOME=/opt/pyspark/pyspark PYTHONPATH=/opt/pyspark PYSPARK_PYTHON=python3
LABEL schemachaos=spark
EXPOSE 7077 8080 15002
ENTRYPOINT []
"""
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
CONNECT_PORT = 15002
# Two executors per worker (one for the Connect server's application, one for a driver of
# `analyze --spark-master`): a standalone application otherwise takes every core it finds.
WORKER_CORES = 2
WORKER_MEMORY = "2g"
EXECUTOR_MEMORY = "900m"
READY_TIMEOUT_S = 180.0
Progress = Callable[[str], None]


class SparkClusterError(Exception):
    """The cluster could not be started; the message names the container or step."""


@dataclass(frozen=True)
class SparkCluster:
    """What `spark up` started and the URLs to reach it from this machine."""

    name: str
    network: str
    master_url: str
    master_ui: str
    connect_url: str | None
    containers: tuple[str, ...]


def _pyspark_dirs() -> list[tuple[Path, str]]:
    """The venv's pyspark and py4j packages and where they go in the image."""
    return [
        (Path(pyspark.__file__).parent, "opt/pyspark/pyspark"),
        (Path(py4j.__file__).parent, "opt/pyspark/py4j"),
    ]


def spark_tag(base: str | None = None) -> str:
    """Content hash of the base tag, the Dockerfile and the pyspark version copied in."""
    h = hashlib.sha256()
    h.update(f"{base or base_tag()}\0{pyspark.__version__}\0".encode())
    h.update(SPARK_DOCKERFILE.encode())
    return f"{SPARK_REPO}:{h.hexdigest()[:16]}"


def _context() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(SPARK_DOCKERFILE.encode())
        tar.addfile(info, io.BytesIO(SPARK_DOCKERFILE.encode()))
        for src, dest in _pyspark_dirs():
            for p in sorted(src.rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts and "tests" not in p.parts:
                    mode = 0o755 if p.parent.name in ("bin", "sbin") else 0o644
                    _add_file(tar, p, f"rootfs/{dest}/{p.relative_to(src)}", mode)
    return buf.getvalue()


def ensure_spark_image(client: Any, progress: Progress) -> str:
    """The Spark image's tag, built on the node base when missing (the base must exist:
    `schemachaos images build` makes it)."""
    base = base_tag()
    tag = spark_tag(base)
    if image_exists(client, tag):
        return tag
    if not image_exists(client, base):
        raise ImageBuildError(f"base image {base} is missing: run `schemachaos images build`")
    build_layer(client, _context(), base, tag, progress)
    return tag


def _names(name: str) -> dict[str, str]:
    prefix = f"schemachaos-spark-{name}"
    return {"network": prefix, "master": f"{prefix}-master", "connect": f"{prefix}-connect"}


def spark_up(
    client: Any,
    store: Path,
    workers: int = 2,
    connect: bool = False,
    name: str = "default",
    progress: Progress = print,
) -> SparkCluster:
    """Start the master, `workers` workers and (with `connect`) a Connect server; wait until
    every worker registered and the Connect port answers. On any failure, what was started is
    removed again."""
    if workers < 1:
        raise SparkClusterError(f"--workers: at least 1, got {workers}")
    if labelled_containers(client, f"{SPARK_LABEL}={name}"):
        raise SparkClusterError(f"a Spark cluster named {name!r} is up: `schemachaos spark down`")
    store = store.resolve()
    store.mkdir(parents=True, exist_ok=True)
    image = ensure_spark_image(client, progress)
    n = _names(name)
    labels = {LABEL: "spark", SPARK_LABEL: name}
    started: list[str] = []
    try:
        client.networks.create(n["network"], driver="bridge", labels=labels)
        common: dict[str, Any] = {
            "detach": True,
            "network": n["network"],
            "labels": labels,
            "volumes": {str(store): {"bind": str(store), "mode": "rw"}},
            "working_dir": "/opt/pyspark/pyspark",
        }
        spark_class = "/opt/pyspark/pyspark/bin/spark-class"
        client.containers.run(
            image,
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", n["master"],
             "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)],
            name=n["master"], hostname=n["master"], **common,
        )  # fmt: skip
        started.append(n["master"])
        internal = f"spark://{n['master']}:{MASTER_PORT}"
        for i in range(1, workers + 1):
            wname = f"{n['master'].removesuffix('-master')}-worker{i}"
            client.containers.run(
                image,
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", wname,
                 "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, internal],
                name=wname, hostname=wname, **common,
            )  # fmt: skip
            started.append(wname)
        if connect:
            client.containers.run(
                image,
                [
                    "/opt/pyspark/pyspark/bin/spark-submit",
                    "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                    "--name", "schemachaos-connect",
                    "--master", internal,
                    "--conf", f"spark.driver.host={n['connect']}",
                    "--conf", "spark.driver.bindAddress=0.0.0.0",
                    "--conf", f"spark.connect.grpc.binding.port={CONNECT_PORT}",
                    "--conf", "spark.ui.enabled=false",
                    "--conf", f"spark.driver.extraJavaOptions={JIT_JAVA_OPTIONS}",
                    "--conf", f"spark.executor.extraJavaOptions={JIT_JAVA_OPTIONS}",
                    "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}",
                    "--conf", "spark.executor.cores=1",
                    "--conf", f"spark.cores.max={workers}",
                ],
                name=n["connect"], hostname=n["connect"], **common,
            )  # fmt: skip
            started.append(n["connect"])
        master_ip = _ip(client, n["master"], n["network"])
        _wait_workers(client, n["master"], workers)
        connect_url = None
        if connect:
            connect_ip = _ip(client, n["connect"], n["network"])
            _wait_port(client, n["connect"], connect_ip, CONNECT_PORT)
            connect_url = f"sc://{connect_ip}:{CONNECT_PORT}"
    except BaseException:
        spark_down(client, name)
        raise
    return SparkCluster(
        name=name,
        network=n["network"],
        master_url=f"spark://{master_ip}:{MASTER_PORT}",
        master_ui=f"http://{master_ip}:{MASTER_UI_PORT}",
        connect_url=connect_url,
        containers=tuple(started),
    )


def _ip(client: Any, container: str, network: str) -> str:
    c = client.containers.get(container)
    return str(c.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])


def _wait_workers(client: Any, master: str, workers: int) -> None:
    """Until the master's log shows every worker registered (its own account of it)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        c = client.containers.get(master)
        if c.status == "exited":
            raise SparkClusterError(f"{master} exited: {_tail(c)}")
        log = c.logs().decode("utf-8", "replace")
        if log.count("Registering worker") >= workers:
            return
        time.sleep(1)
    raise SparkClusterError(f"{master}: {workers} worker(s) did not register in time")


def _wait_port(client: Any, container: str, ip: str, port: int) -> None:
    import socket

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        c = client.containers.get(container)
        if c.status == "exited":
            raise SparkClusterError(f"{container} exited: {_tail(c)}")
        try:
            with socket.create_connection((ip, port), timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise SparkClusterError(f"{container}: port {port} did not open in time")


def _tail(container: Any) -> str:
    lines = container.logs(tail=5).decode("utf-8", "replace").strip().splitlines()
    return " | ".join(lines) or "no output"


def spark_down(client: Any, name: str | None = None) -> list[str]:
    """Remove the containers and network of cluster `name` (every Spark cluster of ours when
    None); returns what was removed."""
    label = SPARK_LABEL if name is None else f"{SPARK_LABEL}={name}"
    removed: list[str] = []
    for c in labelled_containers(client, label):
        c.remove(force=True)
        removed.append(f"container {c.name}")
    for net in client.networks.list(filters={"label": label}):
        net.remove()
        removed.append(f"network {net.name}")
    return removed
