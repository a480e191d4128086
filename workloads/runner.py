"""The client side of a run: worker tasks that turn generated ops into recorded operations.

Each of `concurrency` workers is one logical process at a time (Jepsen's model): it asks the
generator for an op, records the invoke, calls the TargetClient with an explicit timeout and
records exactly one completion: `ok`, `fail` (the node refused: certainly no effect) or `info`
(timeout, lost connection, anything unknown). After an `info` the worker continues as a fresh
process `p + concurrency` with a fresh client, so no process ever invokes after `info`. Workers
are spread over the nodes; an op with a `node_hint` (a probe) goes to that node instead.
A worker with nothing to do waits until the generator has an op for it: the runner asks on its
behalf after every completion (which can give the generator new work at once: the probes right
after a DDL ack) and every few milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from contract.target import ClientError, TargetClient
from workloads.generator import DONE, Generator, NextOp, Op
from workloads.history import HistoryRecorder

log = logging.getLogger(__name__)

OpenClient = Callable[[str], Awaitable[TargetClient]]

DEFAULT_OP_TIMEOUTS_S: Mapping[str, float] = {
    "ddl": 20.0,
    "txn": 10.0,
    "probe": 5.0,
    "final-read": 30.0,
}
CONNECT_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 2.0
RETRY_CONNECT_S = 1.0
UNREACHABLE_BACKOFF_S = 0.05
IDLE_SLEEP_S = 0.005
ClientCall = Callable[[TargetClient, dict], Awaitable[dict[str, Any]]]
# the history's `f` -> the TargetClient call that performs it (typed: no lookup by name)
_CALLS: dict[str, ClientCall] = {
    "ddl": lambda client, value: client.ddl(value),
    "txn": lambda client, value: client.txn(value),
    "probe": lambda client, value: client.probe(value),
    "final-read": lambda client, value: client.final_read(value),
}


class RunStats:
    """Counts by outcome and by `f`, for the progress display and the run's summary."""

    def __init__(self) -> None:
        self.by_f: dict[str, dict[str, int]] = {}
        self.invoked = 0
        self.processes: set[int] = set()

    def count(self, f: str, outcome: str) -> None:
        per = self.by_f.setdefault(f, {"ok": 0, "fail": 0, "info": 0})
        per[outcome] += 1

    def totals(self) -> dict[str, int]:
        out = {"ok": 0, "fail": 0, "info": 0}
        for per in self.by_f.values():
            for k, v in per.items():
                out[k] += v
        return out

    def summary(self, elapsed_s: float) -> dict[str, Any]:
        totals = self.totals()
        done = sum(totals.values())
        return {
            "invoked": self.invoked,
            **totals,
            "by_f": {f: dict(v) for f, v in sorted(self.by_f.items())},
            "processes": len(self.processes),
            "elapsed_s": round(elapsed_s, 3),
            "ops_per_s": round(done / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        }


class _IdleWorkers:
    """Workers with nothing to do, asked on their behalf for work: every IDLE_SLEEP_S, and at
    once after a completion (which can give the generator new work: the probes right after a
    DDL ack). Asking the generator is a function call; waking a worker is a task switch, so
    only a worker that has an op (or must stop) is woken: idle workers polling on their own
    cost a wakeup each per poll, most of a simulated run's events."""

    def __init__(
        self, generator: Generator, start: float, deadline: float, stopping: asyncio.Event
    ) -> None:
        self._generator = generator
        self._start = start
        self._deadline = deadline
        self._stopping = stopping
        self._waiting: dict[int, asyncio.Future[NextOp]] = {}  # process -> its wakeup, FIFO
        self._timer: asyncio.TimerHandle | None = None

    async def wait(self, process: int) -> NextOp:
        """The op, or DONE, handed to ``process``; None: look again (time is up, or stop)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[NextOp] = loop.create_future()
        self._waiting[process] = waiter
        if self._timer is None:
            self._timer = loop.call_at(loop.time() + IDLE_SLEEP_S, self._tick)
        try:
            return await waiter
        finally:
            if self._waiting.get(process) is waiter:
                del self._waiting[process]

    def poll(self) -> None:
        """Hand each waiting worker, longest waiting first, the op the generator has for it."""
        if not self._waiting:
            return
        now = _now()
        if self._stopping.is_set() or now >= self._deadline:
            woken, self._waiting = self._waiting, {}
            for waiter in woken.values():
                _resolve(waiter, None)
            return
        for process, waiter in list(self._waiting.items()):
            if waiter.done():
                continue
            op = self._generator.next_op(process, now - self._start)
            if op is not None:
                del self._waiting[process]
                _resolve(waiter, op)

    def _tick(self) -> None:
        self._timer = None
        self.poll()
        if self._waiting:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(loop.time() + IDLE_SLEEP_S, self._tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _resolve(waiter: asyncio.Future[NextOp], op: NextOp) -> None:
    if not waiter.done():
        waiter.set_result(op)


class _Worker:
    """One worker thread: its current process id, its home node, its open clients."""

    def __init__(self, thread: int, concurrency: int, home: int, nodes: list[str]) -> None:
        self.process = thread
        self.concurrency = concurrency
        self.home = home
        self.nodes = nodes
        self.clients: dict[str, TargetClient] = {}
        self.refused_until: dict[str, float] = {}  # node -> monotonic time to try again

    def crashed(self) -> None:
        self.process += self.concurrency


async def run_clients(
    generator: Generator,
    open_client: OpenClient,
    nodes: list[str],
    recorder: HistoryRecorder,
    time_limit_s: float,
    concurrency: int,
    progress: Callable[[dict], None] | None = None,
    *,
    op_timeouts_s: Mapping[str, float] | None = None,
    stop: asyncio.Event | None = None,
) -> dict:
    """Run the workload until the time limit (or `stop`, or the generator is done); every op
    that was invoked is completed in the history before this returns. Returns the stats."""
    if not nodes:
        raise ValueError("run_clients needs at least one node")
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    timeouts = {**DEFAULT_OP_TIMEOUTS_S, **(op_timeouts_s or {})}
    stats = RunStats()
    start = _now()
    deadline = start + time_limit_s
    stopping = stop if stop is not None else asyncio.Event()
    idle = _IdleWorkers(generator, start, deadline, stopping)
    last_progress = [0.0]

    def report() -> None:
        if progress is None:
            return
        now = _now()
        if now - last_progress[0] >= 0.25:
            last_progress[0] = now
            progress({"phase": "clients", "elapsed_s": now - start, **stats.totals()})

    async def work(worker: _Worker) -> None:
        try:
            while not stopping.is_set() and (now := _now()) < deadline:
                op = generator.next_op(worker.process, now - start)
                if op is None:
                    op = await idle.wait(worker.process)
                    if op is None:
                        continue
                if op == DONE:
                    return
                assert isinstance(op, Op)
                if op.process != worker.process:
                    raise RuntimeError(f"generator gave process {op.process} to {worker.process}")
                await _perform(worker, op, open_client, recorder, generator, timeouts, stats)
                idle.poll()
                report()
                await asyncio.sleep(0)  # a client that answers at once must not starve the rest
        finally:
            await _close_all(worker)

    workers = [_Worker(i, concurrency, i % len(nodes), nodes) for i in range(concurrency)]
    try:
        async with asyncio.TaskGroup() as tg:
            for w in workers:
                tg.create_task(work(w), name=f"worker-{w.process}")
    finally:
        idle.close()
    summary = stats.summary(_now() - start)
    if progress is not None:
        progress({"phase": "clients-done", **summary})
    return summary


async def _perform(
    worker: _Worker,
    op: Op,
    open_client: OpenClient,
    recorder: HistoryRecorder,
    generator: Generator,
    timeouts: Mapping[str, float],
    stats: RunStats,
) -> None:
    """Invoke, call, complete: exactly one completion per invoke, whatever happens."""
    timeout = op.timeout_s if op.timeout_s is not None else timeouts.get(op.f, 10.0)
    call = _CALLS.get(op.f)
    if call is None:
        raise ValueError(f"no client call for op f={op.f!r}")
    node, client, connect_error = await _client_for(worker, op, open_client)
    recorder.invoke(op.process, op.f, op.value)
    stats.invoked += 1
    stats.processes.add(op.process)
    if client is None:
        # Never sent: the op certainly did not happen.
        error = {"code": "UNAVAILABLE", "message": connect_error, "retriable": True}
        completion = recorder.complete(op.process, "fail", op.f, op.value, node, error)
        stats.count(op.f, "fail")
        generator.observe(op, completion)
        await asyncio.sleep(UNREACHABLE_BACKOFF_S)  # no busy loop on a node that is down
        return
    outcome: str
    value: dict | None
    error_obj: dict | None = None
    try:
        async with asyncio.timeout(timeout):
            result = await call(client, op.value)
        outcome, value = "ok", {**op.value, **result}
    except ClientError as e:
        outcome = "fail" if e.definite else "info"
        value = {**op.value, **e.value} if e.value else dict(op.value)
        error_obj = e.to_error()
    except TimeoutError:
        outcome, value = "info", dict(op.value)
        error_obj = _error("TIMEOUT", f"no reply within {timeout} s", True)
    except asyncio.CancelledError:
        error_obj = {"code": "INTERNAL", "message": "run cancelled mid-op", "retriable": False}
        recorder.complete(op.process, "info", op.f, dict(op.value), client.node, error_obj)
        stats.count(op.f, "info")
        raise
    except (ConnectionError, OSError, EOFError) as e:
        outcome, value = "info", dict(op.value)
        error_obj = {"code": "UNAVAILABLE", "message": f"connection lost: {e}", "retriable": True}
    except Exception as e:  # a client bug must not lose the completion, nor the run
        log.exception("client %s raised on %s", type(client).__name__, op.f)
        outcome, value = "info", dict(op.value)
        error_obj = {"code": "INTERNAL", "message": f"{type(e).__name__}: {e}", "retriable": False}
    completion = recorder.complete(op.process, outcome, op.f, value, client.node or node, error_obj)
    stats.count(op.f, outcome)
    if outcome == "info":
        # Unknown outcome: this process is finished; its client may be mid-request, so drop it.
        worker.crashed()
        stale = worker.clients.pop(node, None)
        if stale is not None:
            await _close(stale)
    generator.observe(op, completion)


def _now() -> float:
    """The event loop's clock: real monotonic time on a real run, virtual time in simulation."""
    return asyncio.get_running_loop().time()


def _error(code: str, message: str, retriable: bool) -> dict:
    return {"code": code, "message": message, "retriable": retriable}


async def _client_for(
    worker: _Worker, op: Op, open_client: OpenClient
) -> tuple[str, TargetClient | None, str]:
    """The client for the op's node: the hinted one, else the worker's home node, failing over
    to the other nodes in order when a node does not accept a connection."""
    n = len(worker.nodes)
    if op.node_hint is not None:
        order = [worker.nodes[op.node_hint % n]]
    else:
        order = [worker.nodes[(worker.home + i) % n] for i in range(n)]
    errors: list[str] = []
    for node in order:
        client = worker.clients.get(node)
        if client is not None:
            return node, client, ""
        if _now() < worker.refused_until.get(node, 0.0):
            errors.append(f"{node}: refused a connection less than {RETRY_CONNECT_S} s ago")
            continue
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                client = await open_client(node)
        except Exception as e:  # connection refused, timeout, node down: try the next node
            errors.append(f"{node}: {type(e).__name__}: {e}")
            worker.refused_until[node] = _now() + RETRY_CONNECT_S
            continue
        worker.clients[node] = client
        if op.node_hint is None:
            worker.home = worker.nodes.index(node)
        return node, client, ""
    return order[0], None, "could not connect: " + "; ".join(errors)


async def _close(client: TargetClient) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await client.close()
    except Exception as e:
        log.debug("closing a client failed: %s", e)


async def _close_all(worker: _Worker) -> None:
    clients, worker.clients = list(worker.clients.values()), {}
    for client in clients:
        await _close(client)
