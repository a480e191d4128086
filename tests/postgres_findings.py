"""What the checker finds on PostgreSQL runs, explained from the run directory itself.

PostgreSQL resolves a table's definition from the newest committed catalog when a statement
runs, not from the transaction's snapshot: a transaction whose snapshot holds schema version v
of a table (read from `schemachaos.table_versions` in that snapshot) and whose first statement
on the table comes after a DDL committed reads rows shaped by the newer version. The clock-free
schema-conformance check reports it (the row has columns version v lacks). These helpers tell
that finding apart from any other schema-conformance, so a test can require exactly it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def columns_by_version(run_dir: Path) -> dict[tuple[str, int], set[str]]:
    """(table, schema version) -> its column names, from catalog.jsonl."""
    out: dict[tuple[str, int], set[str]] = {}
    for line in (run_dir / "catalog.jsonl").read_text().splitlines():
        for name, table in json.loads(line)["tables"].items():
            out[(name, int(table["schema_version"]))] = {c["name"] for c in table["columns"]}
    return out


def read_on_newer_schema(op: dict[str, Any], columns: dict[tuple[str, int], set[str]]) -> bool:
    """A read whose row has exactly the columns of a later version of its table than the one it
    reported (and not those of the reported one)."""
    row, table, version = op.get("result"), op.get("table"), op.get("schema_version")
    if op.get("op") != "r" or not isinstance(row, dict) or version is None:
        return False
    shape = set(row)
    if columns.get((str(table), int(version))) == shape:
        return False
    return any(t == table and v > int(version) and c == shape for (t, v), c in columns.items())


def unexplained_conformance(run_dir: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema-conformance anomalies that are not a read on a newer schema."""
    columns = columns_by_version(run_dir)
    events = {}
    with open(run_dir / "history.jsonl") as f:
        for line in f:
            e = json.loads(line)
            events[e["index"]] = e
    bad = []
    for a in results["anomalies"]:
        if a["class"] != "schema-conformance":
            continue
        ops = (events[a["events"][0]].get("value") or {}).get("ops") or []
        if not any(read_on_newer_schema(op, columns) for op in ops):
            bad.append(a)
    return bad
