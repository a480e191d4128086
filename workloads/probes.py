"""Schema probes: "which catalog version and table schema do you use at ts?", asked of nodes.

Probes are what let the checker test the Atomicity Property and read-your-DDL directly. Right
after every acknowledged DDL every node is asked at its now (a stale answer there is a
stale-schema-read), then at explicit timestamps just before, at and just after the new
activation_ts (a wrong answer there is an ap-violation). Between DDLs, probes go to random nodes
at random, at now or around a recent activation. Tables the DDL model lost track of (an `info`
DDL) are probed first, and the answer resyncs the model.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from workloads.generator import GeneratorBase, NextOp, Op
from workloads.schema_model import SchemaModel

MS = 1 << 16  # one physical millisecond in HLC units
ACTIVATION_OFFSETS: tuple[int, ...] = (-MS, -1, 0, 1, MS)
MAX_QUEUED = 2000


class ProbeGen(GeneratorBase):
    """Probe ops: urgent read-your-DDL probes, then AP probes around activations, then random."""

    def __init__(
        self,
        model: SchemaModel,
        rng: random.Random,
        node_count: int,
        random_interval_s: float = 0.1,
        offsets: Sequence[int] = ACTIVATION_OFFSETS,
        timeout_s: float | None = None,
    ) -> None:
        self._model = model
        self._rng = rng
        self._nodes = max(1, node_count)
        self._interval = random_interval_s
        self._offsets = tuple(offsets)
        self._timeout = timeout_s
        self._urgent: deque[tuple[dict, int]] = deque()
        self._later: deque[tuple[dict, int]] = deque()
        self._next_random_s = 0.0
        self._resync_asked: dict[str, float] = {}

    def next_op(self, process: int, now_s: float) -> NextOp:
        queue = self._urgent or self._later
        if queue:
            value, hint = queue.popleft()
            return self._op(process, value, hint)
        for table in self._model.uncertain_tables():
            if now_s - self._resync_asked.get(table, -1e9) >= 0.5:
                self._resync_asked[table] = now_s
                return self._op(process, {"table": table, "ts": None}, self._node())
        if now_s < self._next_random_s:
            return None
        self._next_random_s = now_s + self._rng.uniform(0.0, 2.0 * self._interval)
        return self._op(process, self._random_value(), self._node())

    def observe(self, op: Op, completion: Mapping[str, Any]) -> None:
        value = completion.get("value") or {}
        if op.f == "ddl" and completion.get("type") == "ok":
            self._after_ddl(op.value, value)
        elif op.f == "probe" and completion.get("type") == "ok" and op.value.get("ts") is None:
            table = op.value.get("table")
            if isinstance(table, str) and table in self._model.uncertain_tables():
                self._model.resync(table, value.get("columns"))

    def _after_ddl(self, invoke: Mapping[str, Any], ok: Mapping[str, Any]) -> None:
        tables: list[str | None] = [invoke.get("new_table") or invoke.get("table")]
        if invoke.get("new_table"):
            tables.append(invoke.get("table"))
        for n in range(self._nodes):
            for table in tables:
                self._push(self._urgent, {"table": table, "ts": None}, n)
        activation = ok.get("activation_ts")
        if not isinstance(activation, int):
            return
        for delta in self._offsets:
            for n in range(self._nodes):
                self._push(self._later, {"table": tables[0], "ts": activation + delta}, n)

    def _push(self, queue: deque[tuple[dict, int]], value: dict, hint: int) -> None:
        queue.append((value, hint))
        while len(queue) > MAX_QUEUED:
            queue.popleft()

    def _random_value(self) -> dict:
        names = [t.name for t in self._model.usable_tables()]
        table = self._rng.choice(names) if names and self._rng.random() < 0.8 else None
        acked = self._model.acked
        if acked and self._offsets and self._rng.random() < 0.4:
            _, activation, _ = self._rng.choice(acked[-8:])
            return {"table": table, "ts": activation + self._rng.choice(self._offsets)}
        return {"table": table, "ts": None}

    def _node(self) -> int:
        return self._rng.randrange(self._nodes)

    def _op(self, process: int, value: dict, hint: int) -> Op:
        return Op(process, "probe", value, node_hint=hint, timeout_s=self._timeout)
