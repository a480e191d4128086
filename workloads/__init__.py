"""Workloads: seeded op generators, the history recorder, client runner, final reads, scenarios.

`build_generator` is how the harness gets the generator a scenario names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.generator import Generator, Op

ALIASES: Mapping[str, str] = {"schema-txn": "ddl-dml", "default": "ddl-dml"}
WORKLOADS: tuple[str, ...] = ("ddl-dml", "index", *ALIASES)


def build_generator(
    workload: str, seed: int, concurrency: int, options: Mapping[str, Any]
) -> Generator:
    """The generator of a named workload; unknown names and options raise ValueError."""
    workload = ALIASES.get(workload, workload)
    if workload == "ddl-dml":
        from workloads import ddl_dml

        return ddl_dml.build(seed, concurrency, options)
    if workload == "index":
        from workloads import index_workload

        return index_workload.build(seed, concurrency, options)
    raise ValueError(f"unknown workload {workload!r} (known: ddl-dml, index)")


__all__ = ["WORKLOADS", "Generator", "Op", "build_generator"]
