"""The default workload: a DDL stream, multi-table transactions and probes, all at once.

A few worker threads issue DDL (every kind of history.md, always valid for the schema model
built from acknowledged DDL), a few probe nodes, and the rest run explicit multi-op
transactions across tables and partitions (reads, writes, deletes, index lookups) and implicit
single ops. Every write carries values unique to it (a global write counter), so the checker
can tell which write a read saw; rows follow the model's schema, the client's view of the table.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.config_error import ConfigError
from workloads.column_types import value_for
from workloads.generator import GeneratorBase, Mix, NextOp, Op, Reserve, Stagger
from workloads.probes import ProbeGen
from workloads.schema_model import DDL_KINDS, ModelLimits, SchemaModel, TableModel

DEFAULT_DDL_WEIGHTS: Mapping[str, float] = {
    "create_table": 1.0,
    "drop_table": 0.6,
    "rename_table": 0.6,
    "add_column": 2.0,
    "drop_column": 1.2,
    "rename_column": 1.0,
    "alter_type": 1.0,
    "set_not_null": 0.8,
    "drop_not_null": 0.8,
    "set_default": 1.0,
    "drop_default": 0.8,
    "create_index": 1.2,
    "drop_index": 0.8,
}
DEFAULT_OP_WEIGHTS: Mapping[str, float] = {"r": 4.0, "w": 4.0, "d": 1.0, "ix": 1.0}


@dataclass(frozen=True)
class DdlDmlOptions:
    """Knobs of the ddl-dml workload; a scenario's `[workload]` table sets them by name."""

    tables: int = 3  # tables created at the start, and the fewest the DDL stream keeps
    max_tables: int = 5
    max_columns: int = 7
    max_indexes: int = 3
    keys_per_table: int = 32
    nodes: int = 5  # how many nodes probes spread over (hints are taken modulo the real count)
    ddl_processes: int = 1
    probe_processes: int = -1  # -1: a quarter of the workers
    ddl_interval_s: float = 1.0  # mean time between DDL statements
    dml_interval_s: float = 0.01  # mean time between DML ops over all workers; 0 = flat out
    probe_interval_s: float = 0.1  # mean time between random probes
    txn_min_ops: int = 2
    txn_max_ops: int = 4
    txn_max_tables: int = 2
    implicit_share: float = 0.3
    null_share: float = 0.1  # share of nullable columns written as NULL
    index_ready_s: float = 2.0  # look up an index this long after its CREATE was acknowledged
    ddl_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_DDL_WEIGHTS))
    op_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_OP_WEIGHTS))
    probe_offsets: tuple[int, ...] = (-(1 << 16), -1, 0, 1, 1 << 16)
    ddl_timeout_s: float | None = None
    txn_timeout_s: float | None = None
    probe_timeout_s: float | None = None

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> DdlDmlOptions:
        """Options by name; an unknown key or a wrong type raises ConfigError naming it."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in known:
                raise ConfigError(key, f"unknown workload option (known: {', '.join(known)})")
            values[key] = _coerce(key, raw, cls.__dataclass_fields__[key].default)
        if "ddl_weights" in values:
            bad = [k for k in values["ddl_weights"] if k not in DDL_KINDS]
            if bad:
                raise ConfigError("ddl_weights", f"unknown DDL kinds {bad}")
            values["ddl_weights"] = {**DEFAULT_DDL_WEIGHTS, **values["ddl_weights"]}
        if "op_weights" in values:
            bad = [k for k in values["op_weights"] if k not in DEFAULT_OP_WEIGHTS]
            if bad:
                raise ConfigError("op_weights", f"unknown micro-op kinds {bad} (r, w, d, ix)")
            values["op_weights"] = {**DEFAULT_OP_WEIGHTS, **values["op_weights"]}
        opts = cls(**values)
        if opts.txn_min_ops < 1 or opts.txn_max_ops < opts.txn_min_ops:
            raise ConfigError("txn_max_ops", "needs 1 <= txn_min_ops <= txn_max_ops")
        if opts.tables < 1 or opts.max_tables < opts.tables:
            raise ConfigError("max_tables", "needs 1 <= tables <= max_tables")
        if opts.keys_per_table < 1:
            raise ConfigError("keys_per_table", "must be >= 1")
        return opts


def _coerce(key: str, raw: Any, default: Any) -> Any:
    if key == "nodes" and isinstance(raw, list | tuple) and raw:
        return len(raw)  # the harness passes the node names
    if isinstance(default, bool):
        if not isinstance(raw, bool):
            raise ConfigError(key, f"must be true or false, got {raw!r}")
        return raw
    if isinstance(default, int) and not isinstance(default, bool):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ConfigError(key, f"must be an integer, got {raw!r}")
        return raw
    if isinstance(default, float) or (default is None and key.endswith("_s")):
        if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
            raise ConfigError(key, f"must be a number >= 0, got {raw!r}")
        return float(raw)
    if key in ("ddl_weights", "op_weights"):
        if not isinstance(raw, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in raw.values()
        ):
            raise ConfigError(key, f"must be a table of weights >= 0, got {raw!r}")
        return {str(k): float(v) for k, v in raw.items()}
    if key == "probe_offsets":
        if not isinstance(raw, list | tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw
        ):
            raise ConfigError(key, f"must be a list of HLC offsets (integers), got {raw!r}")
        return tuple(raw)
    return raw


class DdlGen(GeneratorBase):
    """The DDL stream: the initial tables at once, then one valid DDL every interval."""

    def __init__(
        self, model: SchemaModel, rng: random.Random, opts: DdlDmlOptions, seed_tables: int
    ) -> None:
        self._model = model
        self._rng = rng
        self._opts = opts
        self._seed_tables = seed_tables
        self._next_s: float | None = None

    def next_op(self, process: int, now_s: float) -> NextOp:
        model = self._model
        bootstrapping = len(model.tables) + model.pending_creates() < self._seed_tables
        if not bootstrapping:
            if self._next_s is None:
                self._next_s = now_s + self._rng.uniform(0.0, self._opts.ddl_interval_s)
            if now_s < self._next_s:
                return None
        plan = model.plan(self._rng, now_s, self._opts.ddl_weights)
        if plan is None:
            return None
        if not bootstrapping:
            self._next_s = max(self._next_s or now_s, now_s - self._opts.ddl_interval_s)
            self._next_s += self._rng.uniform(0.0, 2.0 * self._opts.ddl_interval_s)
        op = Op(process, "ddl", plan.value(), timeout_s=self._opts.ddl_timeout_s)
        model.begin(op, plan)
        return op


class DmlGen(GeneratorBase):
    """Transactions over the model's tables: explicit multi-op ones and implicit single ops."""

    def __init__(self, model: SchemaModel, rng: random.Random, opts: DdlDmlOptions) -> None:
        self._model = model
        self._rng = rng
        self._opts = opts
        self._kinds = list(opts.op_weights)
        self._kind_cum = list(itertools.accumulate(float(opts.op_weights[k]) for k in self._kinds))
        self._write_seq = 0

    def next_op(self, process: int, now_s: float) -> NextOp:
        tables = self._model.usable_tables()
        if not tables:
            return None
        rng, opts = self._rng, self._opts
        if rng.random() < opts.implicit_share:
            table = rng.choice(tables)
            micro = self._micro(table, now_s, allow_ix=False)
            value: dict[str, Any] = {"ops": [micro], "implicit": True}
        else:
            chosen = rng.sample(tables, min(len(tables), rng.randint(1, opts.txn_max_tables)))
            n = rng.randint(opts.txn_min_ops, opts.txn_max_ops)
            value = {"ops": [self._micro(rng.choice(chosen), now_s, True) for _ in range(n)]}
        return Op(process, "txn", value, timeout_s=opts.txn_timeout_s)

    def _micro(self, table: TableModel, now_s: float, allow_ix: bool) -> dict:
        rng = self._rng
        # bisect over cumulative weights: what rng.choices does, without its per-call set-up
        kind = self._kinds[bisect.bisect(self._kind_cum, rng.random() * self._kind_cum[-1])]
        key = int(rng.random() * self._opts.keys_per_table)
        if kind == "ix":
            lookup = self._lookup(table, now_s) if allow_ix else None
            if lookup is not None:
                return lookup
            kind = "r"
        if kind == "w":
            return {"op": "w", "table": table.name, "key": key, "row": self._row(table, key)}
        return {"op": kind, "table": table.name, "key": key}

    def _row(self, table: TableModel, key: int) -> dict:
        self._write_seq += 1
        seq = self._write_seq
        null_share = self._opts.null_share
        row = {
            c.name: None
            if c.nullable and not c.no_nulls and null_share and self._rng.random() < null_share
            else value_for(c.type, seq)
            for c in table.columns
        }
        table.rows[key] = dict(row)  # the op keeps its own row: the model edits this one
        return row

    def _lookup(self, table: TableModel, now_s: float) -> dict | None:
        ready = [
            i
            for i in table.indexes.values()
            if len(i.columns) == 1 and now_s - i.acked_s >= self._opts.index_ready_s
        ]
        if not ready or not table.rows:
            return None
        index = self._rng.choice(ready)
        key = self._rng.choice(list(table.rows))
        lookup = table.rows[key].get(index.columns[0])
        if lookup is None:
            return None
        return {"op": "ix", "table": table.name, "key": key, "index": index.name, "lookup": lookup}


class DdlDmlWorkload(GeneratorBase):
    """DDL, probe and DML worker roles over one shared schema model (Jepsen's `reserve`)."""

    def __init__(self, seed: int, concurrency: int, opts: DdlDmlOptions) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.opts = opts
        self.model = SchemaModel(
            ModelLimits(opts.tables, opts.max_tables, opts.max_columns, opts.max_indexes)
        )
        n_ddl = min(opts.ddl_processes, max(0, concurrency - 1))
        n_probe = opts.probe_processes if opts.probe_processes >= 0 else max(1, concurrency // 4)
        # The default leaves DML workers; an explicit probe_processes may take every worker.
        spare = concurrency - n_ddl - (1 if opts.probe_processes < 0 else 0)
        n_probe = min(n_probe, max(0, spare))
        self.roles = {"ddl": n_ddl, "probe": n_probe, "dml": concurrency - n_ddl - n_probe}
        self.ddl = DdlGen(self.model, random.Random(f"{seed}:ddl"), opts, opts.tables)
        self.probes = ProbeGen(
            self.model,
            random.Random(f"{seed}:probe"),
            opts.nodes,
            opts.probe_interval_s,
            opts.probe_offsets,
            opts.probe_timeout_s,
        )
        self.dml = DmlGen(self.model, random.Random(f"{seed}:dml"), opts)
        dml: GeneratorBase = self.dml
        if opts.dml_interval_s > 0:
            dml = Stagger(self.dml, opts.dml_interval_s, random.Random(f"{seed}:dml-rate"))
        if concurrency == 1:  # one worker does the DDL and the DML
            both = Mix([self.ddl, dml], random.Random(f"{seed}:solo"), [1.0, 4.0])
            self._reserve = Reserve(1, [], both)
        else:
            self._reserve = Reserve(concurrency, [(n_ddl, self.ddl), (n_probe, self.probes)], dml)
        self._now_s = 0.0

    def next_op(self, process: int, now_s: float) -> NextOp:
        self._now_s = now_s
        return self._reserve.next_op(process, now_s)

    def observe(self, op: Op, completion: dict) -> None:
        if op.f == "ddl":
            self.model.complete(op, completion, self._now_s)
        self.probes.observe(op, completion)


def build(seed: int, concurrency: int, options: Mapping[str, Any]) -> DdlDmlWorkload:
    return DdlDmlWorkload(seed, concurrency, DdlDmlOptions.from_dict(options))
