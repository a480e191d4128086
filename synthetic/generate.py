"""The scripted run: a set-up of three tables and an index, a random workload of txns, probes and
DDLs from four workers, then the tail (synthetic.tail) where a requested fault is injected.

`generate_run` writes the run directory the checker's tests assert on, byte for byte;
`write_synthetic_run` adds knobs (monitor samples, stale probes) that draw from a random stream
of their own, so a run with them has the same txns, DDLs and probes as one without.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthetic.extras import ExtraEvents
from synthetic.model import (
    CSMAX_MS,
    DD_MS,
    FAULTS,
    MS,
    NODES,
    RENAME_COLUMN_COMPATIBLE,
    START_WALL_MS,
    ClusterModel,
)
from synthetic.tail import scripted_tail


@dataclass(frozen=True)
class SyntheticRun:
    """What was written: the number of events, and the processes of the probes made stale (each
    an ap-violation: its invoke and ok are that process's two events)."""

    events: int
    stale_probe_processes: tuple[int, ...] = ()


def generate_run(
    run_dir: Path, seed: int, events: int = 400, fault: str | None = None, clock: str = "hlc"
) -> int:
    """Write a run directory of about `events` events (at least the scripted tail's ~150);
    returns the number written."""
    return write_synthetic_run(run_dir, seed, events=events, fault=fault, clock=clock).events


def write_synthetic_run(
    run_dir: Path,
    seed: int,
    *,
    events: int = 400,
    fault: str | None = None,
    clock: str = "hlc",
    monitor_ms: int | None = None,
    stale_probe_rate: float = 0.0,
) -> SyntheticRun:
    """generate_run, with a monitor sample every `monitor_ms` if given (beside the `events`, so
    the model's run is the same) and that share of the workload's probes answering a stale
    catalog version."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
    extras = ExtraEvents(seed, monitor_ms, stale_probe_rate)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Written under temporary names: a history.jsonl present is a complete one (the benchmark
    # reuses an existing history rather than regenerating it).
    names = ("history.jsonl", "catalog.jsonl")
    with (
        open(run_dir / f"{names[0]}.part", "w", encoding="utf-8") as history,
        open(run_dir / f"{names[1]}.part", "w", encoding="utf-8") as catalog,
    ):
        m = ClusterModel(seed, history, catalog)
        t = _setup(m)
        t = _workload(m, t, events, extras)
        t = scripted_tail(m, t, fault)
        extras.samples_before(m, t)
        m.close()
    for name in names:
        os.replace(run_dir / f"{name}.part", run_dir / name)
    (run_dir / "run.json").write_text(json.dumps(_run_json(seed, clock), indent=1) + "\n")
    return SyntheticRun(m.seq, tuple(extras.stale_processes))


def _run_json(seed: int, clock: str) -> dict[str, Any]:
    return {
        "test": "synthetic",
        "seed": seed,
        "backend": "local",
        "target": "synthetic",
        "clock": clock,
        "nodes": list(NODES),
        "voters": list(NODES),
        "learners": [],
        "config": {
            "delay_duration_ms": DD_MS,
            "max_clock_skew_ms": CSMAX_MS,
            "idle_safe_time_interval_ms": 250,
            "toggles": [],
            "rename_column_compatible": RENAME_COLUMN_COMPATIBLE,
        },
        "nemesis": {"kinds": ["partition"]},
        "workload": {"name": "synthetic"},
        "start_wall_ms": START_WALL_MS,
        "harness_version": "synth",
    }


def _setup(m: ClusterModel) -> int:
    t = 10 * MS
    for name in ("t1", "t2", "t3"):
        tables = m.tables_copy()
        tables[name] = {
            "id": m.next_table_id,
            "name": name,
            "schema_version": 1,
            "columns": [
                m.column("c1", "INT32"),
                m.column("c2", "VARCHAR(16)", False, "x"),
                m.column("c3", "DECIMAL(10,2)"),
            ],
            "indexes": [],
        }
        m.next_table_id += 1
        stmt = (
            f"CREATE TABLE {name} (c1 INT32, c2 VARCHAR(16) NOT NULL DEFAULT 'x', c3 DECIMAL(10,2))"
        )
        _, ack, _ = m.ddl(t, stmt, name, "create_table", tables)
        t = ack + MS
    tables = m.tables_copy()
    m.bump(tables, "t1")["indexes"] = [
        {"id": 100, "name": "i1", "columns": ["c1"], "state": "REGISTERED"}
    ]
    _, ack, _ = m.ddl(t, "CREATE INDEX i1 ON t1 (c1)", "t1", "create_index", tables)
    for state in ("BUILDING", "AVAILABLE"):
        tables = m.tables_copy()
        m.bump(tables, "t1")["indexes"][0]["state"] = state
        line = m.add_version(ack, f"ALTER INDEX i1 SET STATE {state}", tables, "index_state", "t1")
        ack = m.time_of(line["activation_ts"]) + MS
    m.emit(
        ack,
        {
            "type": "info",
            "process": "nemesis",
            "f": "start-partition",
            "value": {"groups": [["n1", "n2"], ["n3"]]},
        },
    )
    return ack + MS


def _workload(m: ClusterModel, t: int, events: int, extras: ExtraEvents) -> int:
    """Random txns and probes from 4 workers, a DDL every ~1.5 s, until `events` events (monitor
    samples not counted, so that they leave the run as it is)."""
    rng = m.rng
    workers = [(t + i * MS, m.process()) for i in range(4)]
    next_ddl = t + 300 * MS
    n_added = 0
    healed = False
    budget = max(0, events - 160)
    while m.seq - extras.samples < budget:
        workers.sort()
        start, proc = workers.pop(0)
        # Nothing is emitted before `start` from here on: the other workers resume later, DDLs
        # come at next_ddl or later, the tail after every worker. (The unhealed stop-partition
        # at `t` below is only reached if this loop never ran: each pass adds 2 events after the
        # healing check, so the loop cannot end before crossing budget // 2 there.)
        extras.samples_before(m, min(start, next_ddl))
        m.settle(min(start, next_ddl))
        # DDLs are made ahead of the longest txn, so every op sees the catalog of its ts.
        while next_ddl <= start + 1500 * MS:
            n_added = _random_ddl(m, next_ddl, n_added)
            next_ddl += rng.randint(1200, 1800) * MS
        if not healed and m.seq - extras.samples > budget // 2:
            m.emit(
                start, {"type": "info", "process": "nemesis", "f": "stop-partition", "value": {}}
            )
            healed = True
        node = NODES[rng.randrange(len(NODES))]
        if rng.random() < 0.2:
            table = f"t{rng.randint(1, 3)}"
            passed = bisect.bisect_right(m.acts, m.ts(start)) - 1
            if rng.random() < 0.5 and passed >= 1:
                extras.probe(m, start, node, table, m.acts[passed] + rng.choice((-1, 0, 1)))
            else:
                extras.probe(m, start, node, table, None)
            workers.append((start + 3 * MS, proc))
            continue
        end, proc = _random_txn(m, start, proc, node)
        workers.append((end + MS, proc))
    if not healed:
        m.emit(t, {"type": "info", "process": "nemesis", "f": "stop-partition", "value": {}})
    return max(max(w[0] for w in workers), m.last_ack_t) + 10 * MS


def _random_ddl(m: ClusterModel, t: int, n: int) -> int:
    rng = m.rng
    table = f"t{rng.randint(2, 3)}" if rng.random() < 0.7 else "t1"
    tables = m.tables_copy()
    tbl = tables[table]
    added = [c for c in tbl["columns"] if c["name"].startswith("a")]
    choice = rng.random()
    if not added or (choice < 0.4 and len(added) < 3):  # at most 3 added columns a table
        col = m.column(f"a{n}", "INT32")
        m.bump(tables, table)["columns"].append(col)
        m.ddl(t, f"ALTER TABLE {table} ADD COLUMN a{n} INT32", table, "add_column", tables)
        return n + 1
    c = added[0]
    m.bump(tables, table)
    if choice < 0.55 and c["type"] == "INT32":
        c["type"] = "INT64"
        m.ddl(
            t,
            f"ALTER TABLE {table} ALTER COLUMN {c['name']} SET DATA TYPE INT64",
            table,
            "alter_type",
            tables,
        )
    elif choice < 0.7:
        old = c["name"]
        c["name"] = f"a{n}"
        m.ddl(t, f"ALTER TABLE {table} RENAME COLUMN {old} TO a{n}", table, "rename_column", tables)
        return n + 1
    elif choice < 0.85:
        tbl["columns"] = [x for x in tbl["columns"] if x["id"] != c["id"]]
        m.ddl(t, f"ALTER TABLE {table} DROP COLUMN {c['name']}", table, "drop_column", tables)
    else:
        c2 = next(x for x in tbl["columns"] if x["name"] == "c2")
        c2["default"] = f"d{n}"
        m.ddl(
            t,
            f"ALTER TABLE {table} ALTER COLUMN c2 SET DEFAULT 'd{n}'",
            table,
            "set_default",
            tables,
        )
        return n + 1
    return n


def _random_txn(m: ClusterModel, t: int, proc: int, node: str) -> tuple[int, int]:
    rng = m.rng
    n_ops = rng.randint(1, 3)
    slow = rng.random() < 0.1
    specs = []
    cat0 = m.cat_at(m.ts(t))
    for _ in range(n_ops):
        table = f"t{rng.randint(1, 3)}"
        key = rng.randint(0, 63)
        kind = rng.choices(("r", "w", "d"), (5, 4, 1))[0]
        tbl = cat0["tables"].get(table)
        row = m.row_for(tbl) if (kind == "w" and tbl is not None) else None
        specs.append((kind, table, key, row))
    invoke_ops = [
        {"op": k, "table": tb, "key": ky, **({"row": r} if r is not None else {})}
        for k, tb, ky, r in specs
    ]
    txn = m.begin(t, node, proc, invoke_ops)
    now = t + MS
    for kind, table, key, row in specs:
        now += (rng.randint(50, 400) if slow else 1) * MS
        if not m.op(txn, now, kind, table, key, row):
            return now + MS, proc
    now += MS
    outcome = "info" if rng.random() < 0.01 else "ok"
    m.commit(txn, now, outcome=outcome)
    if outcome == "info":
        proc = m.process()
    return now + MS, proc
