"""Hand-built run directories for the verdict tests: a small complete history on the catalog of
tests/histories/common, and the edits that make it incomplete, anomalous or odd.

Written from history.md alone (no harness code), so the checker is held to the contract, not to
what our own recorder happens to write. The generic pieces (timestamps, numbering, JSON Lines)
are synthetic.handmade's; this module holds the fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from synthetic.handmade import hlc, numbered, write_jsonl

COMMON = Path(__file__).parent / "histories" / "common"


T1_COLUMNS = [
    {"id": 1, "name": "c1", "type": "INT32", "nullable": True, "default": None},
    {"id": 2, "name": "c2", "type": "VARCHAR(4)", "nullable": False, "default": "x"},
]


def complete_events() -> list[dict[str, Any]]:
    """A complete, valid history on catalog version 5 (t1 schema 4, i1 AVAILABLE): a write,
    a partition healed, a probe, a monitor sample and the final reads of t1 and i1."""
    row = {"c1": 1, "c2": "a"}
    events: list[dict[str, Any]] = [
        {"type": "invoke", "process": 0, "f": "txn",
         "value": {"ops": [{"op": "w", "table": "t1", "key": 1, "row": row}]}},
        {"type": "ok", "process": 0, "f": "txn", "node": "n1", "value": {
            "txn_id": "a1", "begin_ts": hlc(4100), "commit_ts": hlc(4102),
            "ops": [{"op": "w", "table": "t1", "key": 1, "row": row, "op_ts": hlc(4101),
                     "node": "n1", "schema_version": 4, "result": None}],
            "tables": {"t1": {"base_ts": hlc(4100), "schema_version": 4}},
            "participants": [{"node": "n1", "table": "t1", "partition": 0,
                              "commit_schema_version": 4}]}},
        {"type": "info", "process": "nemesis", "f": "start-partition",
         "value": {"groups": [["n1"], ["n2", "n3"]]}},
        {"type": "invoke", "process": 1, "f": "probe", "value": {"table": "t1", "ts": None}},
        {"type": "ok", "process": 1, "f": "probe", "node": "n2", "value": {
            "ts": hlc(4200), "catalog_version": 5, "table_schema_version": 4,
            "columns": T1_COLUMNS}},
        {"type": "info", "process": "monitor", "f": "sample",
         "value": {"n1": {"catalog_version": 5, "safe_time_lag_ms": 3}}},
        {"type": "info", "process": "nemesis", "f": "heal-partition", "value": {}},
        {"type": "invoke", "process": 2, "f": "final-read", "value": {"table": "t1"}},
        {"type": "ok", "process": 2, "f": "final-read", "node": "n1", "value": {
            "table": "t1", "ts": hlc(4500), "schema_version": 4,
            "rows": [{"key": 1, "row": row}]}},
        {"type": "invoke", "process": 2, "f": "final-read",
         "value": {"table": "t1", "index": "i1"}},
        {"type": "ok", "process": 2, "f": "final-read", "node": "n1", "value": {
            "table": "t1", "index": "i1", "ts": hlc(4500),
            "entries": [{"key": 1, "values": {"c1": 1}}]}},
    ]  # fmt: skip
    return events


def write_run(
    dest: Path,
    events: list[dict[str, Any]],
    *,
    catalog: list[dict[str, Any]] | None = None,
    run: dict[str, Any] | None = None,
    renumber: bool = True,
) -> Path:
    """A run directory at `dest`: common run.json and catalog.jsonl unless given."""
    dest.mkdir(parents=True, exist_ok=True)
    if run is None:
        shutil.copy(COMMON / "run.json", dest / "run.json")
    else:
        (dest / "run.json").write_text(json.dumps(run))
    if catalog is None:
        shutil.copy(COMMON / "catalog.jsonl", dest / "catalog.jsonl")
    else:
        write_jsonl(dest / "catalog.jsonl", catalog)
    write_jsonl(dest / "history.jsonl", numbered(events) if renumber else events)
    return dest


def common_catalog() -> list[dict[str, Any]]:
    lines = (COMMON / "catalog.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def common_run() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((COMMON / "run.json").read_text())
    return loaded
