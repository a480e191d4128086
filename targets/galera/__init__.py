"""MariaDB Galera Cluster: multi-master, DDL by TOI or RSU (docs/galera.md)."""

from targets.galera.target import GaleraTarget

__all__ = ["GaleraTarget"]
