"""Generator combinators, determinism of the seeded workloads, and generator throughput."""

from __future__ import annotations

import random
import time

import pytest

from workloads import build_generator
from workloads.generator import (
    DONE,
    EachThread,
    FnGen,
    Limit,
    Mix,
    Op,
    Phases,
    Reserve,
    Seq,
    Stagger,
    TimeLimit,
    describe,
    ops_of,
)


def counter(f: str) -> FnGen:
    n = iter(range(10**9))
    return FnGen(lambda p, t: Op(p, f, {"n": next(n)}))


def test_seq_limit_and_done() -> None:
    gen = Limit(Seq([("ddl", {"a": 1}), ("probe", {"b": 2}), ("txn", {})]), 2)
    assert gen.next_op(0, 0.0) == Op(0, "ddl", {"a": 1})
    assert gen.next_op(1, 0.0) == Op(1, "probe", {"b": 2})
    assert gen.next_op(0, 0.0) == DONE


def test_mix_follows_weights_and_finishes_when_children_do() -> None:
    gen = Mix([counter("a"), counter("b")], random.Random(1), [9.0, 1.0])
    fs = [op.f for op in (gen.next_op(0, 0.0) for _ in range(2000)) if isinstance(op, Op)]
    assert 0.85 < fs.count("a") / len(fs) < 0.95
    done = Mix([Seq([("x", {})]), Seq([("y", {})])], random.Random(2), None)
    got = {done.next_op(0, 0.0), done.next_op(0, 0.0)}
    assert {op.f for op in got if isinstance(op, Op)} == {"x", "y"}
    assert done.next_op(0, 0.0) == DONE


def test_stagger_paces_to_the_mean_interval() -> None:
    gen = Stagger(counter("a"), 0.1, random.Random(3))
    emitted = 0
    for step in range(100_000):  # 100 s of requests every ms
        if isinstance(gen.next_op(0, step / 1000), Op):
            emitted += 1
    assert 900 <= emitted <= 1100


def test_time_limit_counts_from_the_first_request() -> None:
    gen = TimeLimit(counter("a"), 5.0)
    assert isinstance(gen.next_op(0, 100.0), Op)
    assert isinstance(gen.next_op(0, 104.9), Op)
    assert gen.next_op(0, 105.0) == DONE


def test_phases_wait_for_the_outstanding_ops_of_the_previous_phase() -> None:
    gen = Phases(Seq([("w", {})]), Seq([("final-read", {})]))
    first = gen.next_op(0, 0.0)
    assert isinstance(first, Op) and first.f == "w"
    assert gen.next_op(1, 0.0) is None  # phase 1 is done but its op has not completed
    gen.observe(first, {"type": "ok"})
    second = gen.next_op(1, 0.0)
    assert isinstance(second, Op) and second.f == "final-read"
    gen.observe(second, {"type": "ok"})
    assert gen.next_op(1, 0.0) == DONE


def test_reserve_keeps_a_role_across_replacement_processes() -> None:
    gen = Reserve(5, [(1, counter("ddl")), (2, counter("probe"))], counter("txn"))
    roles: dict[int, set[str]] = {}
    for p in range(15):  # p, p + 5, p + 10 are the same worker thread
        op = gen.next_op(p, 0.0)
        assert isinstance(op, Op)
        roles.setdefault(p % 5, set()).add(op.f)
    assert roles == {0: {"ddl"}, 1: {"probe"}, 2: {"probe"}, 3: {"txn"}, 4: {"txn"}}


def test_each_thread_makes_one_generator_per_thread() -> None:
    made: list[int] = []

    def make(thread: int) -> FnGen:
        made.append(thread)
        return FnGen(lambda p, t: Op(p, "txn", {"thread": thread}))

    gen = EachThread(3, make)
    ops = [gen.next_op(p, 0.0) for p in (0, 1, 3, 4, 2, 5)]
    assert [op.value["thread"] for op in ops if isinstance(op, Op)] == [0, 1, 0, 1, 2, 2]
    assert made == [0, 1, 2]


def _ok_ddl() -> object:
    version = [1]

    def complete(op: Op) -> dict | None:
        if op.f != "ddl":
            return None
        version[0] += 1
        activation = (1_000_000 + version[0]) << 16
        value = {**op.value, "catalog_version": version[0], "activation_ts": activation}
        return {"type": "ok", "value": value}

    return complete


def run_workload(workload: str, seed: int, n_requests: int, concurrency: int = 8) -> list[dict]:
    gen = build_generator(workload, seed, concurrency, {"dml_interval_s": 0.0})
    processes = [i % concurrency for i in range(n_requests)]
    times = [i * 0.001 for i in range(n_requests)]
    return [describe(op) for op in ops_of(gen, processes, times, _ok_ddl())]  # type: ignore[arg-type]


@pytest.mark.parametrize("workload", ["ddl-dml", "index"])
def test_same_seed_same_op_sequence(workload: str) -> None:
    a = run_workload(workload, 42, 8_000)
    b = run_workload(workload, 42, 8_000)
    c = run_workload(workload, 43, 8_000)
    assert len(a) > 2_000
    assert a == b
    assert a != c
    assert {op["f"] for op in a} == {"ddl", "txn", "probe"}


def test_generator_alone_exceeds_20000_ops_per_second() -> None:
    concurrency = 16
    gen = build_generator("ddl-dml", 7, concurrency, {"dml_interval_s": 0.0})
    complete = _ok_ddl()
    # CPU time of this process: the generator's own cost, not the load of a shared machine.
    n, now, start = 0, 0.0, time.process_time()
    while n < 40_000:
        for p in range(concurrency):
            now += 0.0002
            op = gen.next_op(p, now)
            if isinstance(op, Op):
                n += 1
                completion = complete(op)  # type: ignore[operator]
                if completion is not None:
                    gen.observe(op, completion)
    rate = n / (time.process_time() - start)
    assert rate >= 20_000, f"{rate:.0f} ops/s"
