"""Pure, seeded generators of client ops, after Jepsen's generator model.

A generator answers one question for the runner: "process p is free at time t: what should it
do?" with an `Op`, `None` (nothing now, ask again soon) or `"done"` (never again). Completions
are fed back through `observe`, so a generator can react (a DDL stream that tracks the schema
it created, probes after an acknowledged DDL). Nothing here reads a clock or a global random
state: time comes in as `now_s` and every choice comes from a `random.Random` seeded by the
caller, so the same seed and the same calls give the same ops.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

DONE: Final = "done"


@dataclass(frozen=True)
class Op:
    """One client operation for one process. `node_hint` routes it to `nodes[hint % n]`
    instead of the worker's own node; `timeout_s` overrides the runner's timeout for `f`."""

    process: int
    f: str
    value: dict = field(hash=False)
    node_hint: int | None = None
    timeout_s: float | None = None


NextOp = Op | None | Literal["done"]


class Generator(Protocol):
    def next_op(self, process: int, now_s: float) -> NextOp: ...

    def observe(self, op: Op, completion: dict) -> None: ...


class GeneratorBase:
    """A generator that ignores completions; subclasses override `next_op`."""

    def next_op(self, process: int, now_s: float) -> NextOp:
        raise NotImplementedError

    def observe(self, op: Op, completion: dict) -> None:
        return None


def thread_of(process: int, concurrency: int) -> int:
    """The worker slot of a process: a process that crashed is replaced by `p + concurrency`."""
    return process % concurrency


class FnGen(GeneratorBase):
    """Ops from a function of (process, now_s); the function owns its seeded state."""

    def __init__(self, make: Callable[[int, float], NextOp]) -> None:
        self._make = make

    def next_op(self, process: int, now_s: float) -> NextOp:
        return self._make(process, now_s)


class Seq(GeneratorBase):
    """A fixed list of (f, value) ops handed out in order, then done."""

    def __init__(self, ops: Sequence[tuple[str, dict]]) -> None:
        self._ops = list(ops)
        self._i = 0

    def next_op(self, process: int, now_s: float) -> NextOp:
        if self._i >= len(self._ops):
            return DONE
        f, value = self._ops[self._i]
        self._i += 1
        return Op(process, f, dict(value))


class Mix(GeneratorBase):
    """Each request goes to one child chosen at random by weight; done when all are done."""

    def __init__(
        self, children: Sequence[Generator], rng: random.Random, weights: Sequence[float] | None
    ) -> None:
        self._children = list(children)
        self._weights = list(weights) if weights is not None else [1.0] * len(self._children)
        if len(self._weights) != len(self._children):
            raise ValueError("Mix needs one weight per child")
        self._rng = rng

    def next_op(self, process: int, now_s: float) -> NextOp:
        while self._children:
            i = self._rng.choices(range(len(self._children)), self._weights)[0]
            op = self._children[i].next_op(process, now_s)
            if op != DONE:
                return op
            del self._children[i]
            del self._weights[i]
        return DONE

    def observe(self, op: Op, completion: dict) -> None:
        for child in self._children:
            child.observe(op, completion)


class Stagger(GeneratorBase):
    """Paces a child to one op every `mean_interval_s` on average (uniform in [0, 2*mean])."""

    def __init__(self, child: Generator, mean_interval_s: float, rng: random.Random) -> None:
        self._child = child
        self._mean = mean_interval_s
        self._rng = rng
        self._next_s: float | None = None

    def next_op(self, process: int, now_s: float) -> NextOp:
        if self._next_s is not None and now_s < self._next_s:
            return None
        op = self._child.next_op(process, now_s)
        if isinstance(op, Op):
            base = now_s if self._next_s is None else max(self._next_s, now_s - self._mean)
            self._next_s = base + self._rng.uniform(0.0, 2.0 * self._mean)
        return op

    def observe(self, op: Op, completion: dict) -> None:
        self._child.observe(op, completion)


class TimeLimit(GeneratorBase):
    """Done `limit_s` after the first request it sees."""

    def __init__(self, child: Generator, limit_s: float) -> None:
        self._child = child
        self._limit = limit_s
        self._start: float | None = None

    def next_op(self, process: int, now_s: float) -> NextOp:
        if self._start is None:
            self._start = now_s
        if now_s - self._start >= self._limit:
            return DONE
        return self._child.next_op(process, now_s)

    def observe(self, op: Op, completion: dict) -> None:
        self._child.observe(op, completion)


class Limit(GeneratorBase):
    """At most `n` ops, then done."""

    def __init__(self, child: Generator, n: int) -> None:
        self._child = child
        self._left = n

    def next_op(self, process: int, now_s: float) -> NextOp:
        if self._left <= 0:
            return DONE
        op = self._child.next_op(process, now_s)
        if isinstance(op, Op):
            self._left -= 1
        return op

    def observe(self, op: Op, completion: dict) -> None:
        self._child.observe(op, completion)


class Phases(GeneratorBase):
    """Children one after the other; the next starts once the current is done and every op
    it handed out has completed (Jepsen's `phases`: a barrier between stages)."""

    def __init__(self, *children: Generator) -> None:
        self._children = list(children)
        self._outstanding: set[int] = set()  # ids of ops of the current phase not yet observed
        self._ops: dict[int, Op] = {}

    def next_op(self, process: int, now_s: float) -> NextOp:
        while self._children:
            op = self._children[0].next_op(process, now_s)
            if isinstance(op, Op):
                self._outstanding.add(id(op))
                self._ops[id(op)] = op  # keeps the id alive until observed
                return op
            if op is None or self._outstanding:
                return None
            self._children.pop(0)
        return DONE

    def observe(self, op: Op, completion: dict) -> None:
        if id(op) in self._outstanding and self._ops.get(id(op)) is op:
            self._outstanding.discard(id(op))
            del self._ops[id(op)]
        if self._children:
            self._children[0].observe(op, completion)


class Reserve(GeneratorBase):
    """Jepsen's `reserve`: the first n1 worker threads run gen1, the next n2 gen2, ..., the
    rest run `default`. Threads are `process % concurrency`, so a replacement process keeps its
    predecessor's role."""

    def __init__(
        self,
        concurrency: int,
        ranges: Sequence[tuple[int, Generator]],
        default: Generator | None,
    ) -> None:
        self._concurrency = concurrency
        self._by_thread: list[Generator | None] = []
        for count, gen in ranges:
            self._by_thread.extend([gen] * count)
        self._by_thread.extend([default] * max(0, concurrency - len(self._by_thread)))
        self._children: list[Generator] = []
        for gen in [g for _, g in ranges] + ([default] if default is not None else []):
            if all(gen is not c for c in self._children):
                self._children.append(gen)

    def next_op(self, process: int, now_s: float) -> NextOp:
        thread = process % self._concurrency
        gen = self._by_thread[thread] if thread < len(self._by_thread) else None
        if gen is None:
            return DONE
        op = gen.next_op(process, now_s)
        return op

    def observe(self, op: Op, completion: dict) -> None:
        for child in self._children:
            child.observe(op, completion)


class EachThread(GeneratorBase):
    """A generator per worker thread, made on first use by `make(thread)`."""

    def __init__(self, concurrency: int, make: Callable[[int], Generator]) -> None:
        self._concurrency = concurrency
        self._make = make
        self._gens: dict[int, Generator] = {}

    def next_op(self, process: int, now_s: float) -> NextOp:
        thread = process % self._concurrency
        gen = self._gens.get(thread)
        if gen is None:
            gen = self._gens[thread] = self._make(thread)
        return gen.next_op(process, now_s)

    def observe(self, op: Op, completion: dict) -> None:
        gen = self._gens.get(op.process % self._concurrency)
        if gen is not None:
            gen.observe(op, completion)


def ops_of(
    gen: Generator,
    processes: Sequence[int],
    times: Sequence[float],
    observe: Callable[[Op], dict | None] | None = None,
) -> list[Op]:
    """Drive a generator through a fixed schedule of (process, time) requests without a
    cluster: what a run would ask, for replay, printing and determinism tests. `observe`
    turns an op into a completion to feed back (or None to feed nothing)."""
    out: list[Op] = []
    for process, now_s in zip(processes, times, strict=True):
        op = gen.next_op(process, now_s)
        if isinstance(op, Op):
            out.append(op)
            if observe is not None:
                completion = observe(op)
                if completion is not None:
                    gen.observe(op, completion)
    return out


def describe(op: Op) -> dict[str, Any]:
    """An op as plain data (for printing and storing a generated sequence)."""
    return {
        "process": op.process,
        "f": op.f,
        "value": op.value,
        "node_hint": op.node_hint,
        "timeout_s": op.timeout_s,
    }
