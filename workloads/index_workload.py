"""The index workload: writers insert, update and delete rows while indexes come and go.

F1's hazard (seed 004) is a one-step index change racing with writers that still use the old
schema: an entry missing for a row, or an entry left for a row that is gone. So this workload
keeps one or two small tables, a DDL thread that only creates and drops indexes, writers
hammering few keys (updates and deletes of indexed values), and lookups through indexes once
they had time to become AVAILABLE. Final reads then read every index whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.ddl_dml import DdlDmlOptions, DdlDmlWorkload
from workloads.schema_model import DDL_KINDS

INDEX_DEFAULTS: Mapping[str, Any] = {
    "tables": 1,
    "max_tables": 1,
    "max_indexes": 2,
    "keys_per_table": 48,
    "ddl_interval_s": 1.5,
    "dml_interval_s": 0.005,
    "implicit_share": 0.5,
    "null_share": 0.0,
    "index_ready_s": 2.5,
    "ddl_weights": {k: 0.0 for k in DDL_KINDS} | {"create_index": 1.0, "drop_index": 0.7},
    "op_weights": {"r": 1.0, "w": 5.0, "d": 2.0, "ix": 3.0},
}


def build(seed: int, concurrency: int, options: Mapping[str, Any]) -> DdlDmlWorkload:
    """The ddl-dml machinery with index-centred defaults; `options` override them by name."""
    merged = dict(INDEX_DEFAULTS)
    for key, value in options.items():
        if key in ("ddl_weights", "op_weights") and isinstance(value, Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return DdlDmlWorkload(seed, concurrency, DdlDmlOptions.from_dict(merged))
