"""The target registry: each database the harness can test, by the name `--target` takes.
Another database adds one import and one line here."""

from __future__ import annotations

from harness.target import Target
from harness.target_postgres import PostgresTarget
from harness.target_schemasync import SchemaSyncTarget

TARGETS: dict[str, type] = {
    "schemasync": SchemaSyncTarget,
    "postgres": PostgresTarget,
}


def load_target(name: str) -> Target:
    """A fresh target of that name. A target may also offer `docker_image() -> str`: the image
    the docker backend then runs instead of the schemasync node image."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(sorted(TARGETS))})")
    target: Target = TARGETS[name]()
    return target
