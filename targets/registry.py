"""The target registry: each database the harness can test, by the name `--target` takes.
Another database adds one import and one line here."""

from __future__ import annotations

from collections.abc import Callable

from contract.target import Target
from targets.galera import GaleraTarget
from targets.postgres import PostgresTarget
from targets.schemasync import SchemaSyncTarget

TARGETS: dict[str, Callable[[], Target]] = {
    "schemasync": SchemaSyncTarget,
    "postgres": PostgresTarget,
    "galera": GaleraTarget,
}


def load_target(name: str) -> Target:
    """A fresh target of that name; its optional capabilities are the protocols of
    `contract.target` (e.g. `DockerImageProvider`: the image the docker backend runs)."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(sorted(TARGETS))})")
    return TARGETS[name]()
