"""The registry of backends: the one list of where a run's nodes can live.

The command line's `--backend` choices ("auto" and these), a scenario's `backend`, the nightly
matrix and `repro` all read `BACKENDS`; adding a backend is one module and one line here.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from contract.config_error import ConfigError
from harness.backends.base import Backend, BackendOptionsError
from harness.backends.docker import DockerBackend, docker_answers
from harness.backends.local import LocalBackend
from harness.backends.sim import SimBackend
from harness.backends.ssh import SshBackend
from harness.cluster_spec import Cluster, ClusterSpec, ProvisionError, check_run_id
from workloads.scenario import load_run_options

log = logging.getLogger("schemachaos.cluster")

AUTO = "auto"
BACKENDS: Mapping[str, Backend] = {
    b.name: b for b in (DockerBackend(), LocalBackend(), SshBackend(), SimBackend())
}

__all__ = [
    "AUTO",
    "BACKENDS",
    "Backend",
    "BackendOptionsError",
    "ProvisionError",
    "backend_choices",
    "docker_answers",
    "provision",
    "resolve_backend",
    "scenario_run_options",
]


def backend_choices() -> list[str]:
    """What `--backend` and a scenario's `backend` accept."""
    return [AUTO, *BACKENDS]


def resolve_backend(name: str) -> tuple[Backend, str]:
    """(backend, why): auto picks the first registered backend available here (docker when
    the engine answers, else local)."""
    if name in BACKENDS:
        return BACKENDS[name], f"backend {name} (asked for)"
    if name != AUTO:
        raise ProvisionError(
            f"--backend: unknown backend {name!r} (one of {', '.join(backend_choices())})"
        )
    skipped = ""
    for backend in BACKENDS.values():
        if backend.available():
            return backend, f"backend {backend.name} (auto: {skipped}{backend.name} available)"
        skipped += f"{backend.name} not available, "
    raise ProvisionError("--backend auto: no backend is available on this machine")


def scenario_run_options(path: Path) -> dict[str, Any]:
    """A scenario file's run options (workloads.scenario), its `backend` one of the registry's."""
    fields = load_run_options(path)
    name = fields.get("backend")
    if name is not None and name not in backend_choices():
        allowed = ", ".join(backend_choices())
        raise ConfigError("backend", f"unknown backend {name!r} (allowed: {allowed})", file=path)
    return fields


@contextlib.contextmanager
def provision(
    spec: ClusterSpec, run_id: str, work_dir: Path, backend: Backend | None = None
) -> Iterator[Cluster]:
    """Nodes up on `backend` (a run's, as resolved; else the one `spec.backend` names, for a
    spec made without a run); on exit (normal, exception, signal) everything goes.

    work_dir is the run's temp area: the ssh key pair and local node dirs live there and are
    removed with the cluster.
    """
    from harness.cluster import ignore_signals

    if backend is None:
        backend, _ = resolve_backend(spec.backend)
    try:  # the guard's and clean's filters are built from the id: an odd one must not widen them
        check_run_id(run_id)
    except ValueError as e:
        raise ProvisionError(f"run guard: {e}") from e
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (work_dir / "RUN_ID").write_text(run_id + "\n")
    cleanups: list[Any] = [lambda: shutil.rmtree(work_dir, ignore_errors=True)]
    try:
        # before any node: removes the run's nodes if this controller dies, even by SIGKILL
        cleanups.append(backend.guard(spec, run_id, work_dir).close)
        yield backend.provision(spec, run_id, work_dir, cleanups)
    finally:
        with ignore_signals():
            for cleanup in reversed(cleanups):
                try:
                    cleanup()
                except Exception as e:  # keep tearing down the rest
                    log.warning("teardown step failed: %s", e)
