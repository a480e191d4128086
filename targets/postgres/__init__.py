"""PostgreSQL as a target: a primary and hot standbys by streaming replication."""

from targets.postgres.target import PostgresTarget

__all__ = ["PostgresTarget"]
