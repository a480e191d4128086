"""The schemasync target: the system under test of this repository, run as node processes."""

from targets.schemasync.config import render_config
from targets.schemasync.target import SchemaSyncTarget

__all__ = ["SchemaSyncTarget", "render_config"]
