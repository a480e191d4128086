"""A deterministic asyncio event loop on virtual time.

``SimLoop`` is a SelectorEventLoop whose ``time()`` is virtual and which never waits: where a
real loop would sleep in ``select(timeout)`` until its next timer, virtual time jumps to that
timer. With no real I/O and no threads, the order of every callback is a pure function of the
program and its seed. Every callback also runs "as" a process: a context variable names the
node it belongs to, so the simulator can hold a paused node's callbacks (SIGSTOP) and cancel a
killed node's tasks (SIGKILL) while the other nodes run on in the same loop.

The scheduler is asyncio's own ``_run_once``, step for step (so callbacks run in the order
asyncio would run them), minus what a simulation has no use for: the selector poll, the debug
checks, and Python-level ``TimerHandle.__lt__`` calls in the timer heap, which holds
``(when, handle)`` pairs instead of bare handles (the same order: a pair's handle is only
compared when the times are equal, and then both orders are "not less", as for handles).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import gc
import heapq
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVarTuple, Unpack, cast

_Ts = TypeVarTuple("_Ts")
# asyncio's own constants (base_events): when to purge cancelled timers, the longest select()
_PURGE_MIN_TIMERS, _PURGE_FRACTION, _MAX_STEP_S = 100, 0.5, 24 * 3600
_PRUNE_MIN = 256  # tasks a node's list holds before the finished ones are dropped
_GC_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)

# The node whose code a callback or task runs; None: the harness (clients, nemesis).
NODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_node", default=None)


class Deadlock(RuntimeError):
    """Nothing can ever run again: no ready callback, no timer (a simulation bug)."""


class _NoSelector(selectors.SelectSelector):
    """What a SelectorEventLoop registers its self-pipe with; SimLoop never polls it."""

    def select(self, timeout: float | None = None) -> list[Any]:
        raise RuntimeError("SimLoop has no I/O to wait for: nothing may poll its selector")


def _set_up(
    handle: asyncio.Handle,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context | None,
) -> None:
    """What asyncio.Handle.__init__ sets, minus its debug-mode lookup."""
    h: Any = handle
    h._context = context if context is not None else contextvars.copy_context()
    h._loop = loop
    h._callback = callback
    h._args = args
    h._cancelled = False
    h._repr = None
    h._source_traceback = None


class _Handle(asyncio.Handle):
    """asyncio.Handle set up without asking the loop for debug mode (SimLoop never is)."""

    __slots__ = ()

    def __init__(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        _set_up(self, callback, args, loop, context)


class _TimerHandle(asyncio.TimerHandle):
    """asyncio.TimerHandle set up the same way; scheduled from the start."""

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        _set_up(self, callback, args, loop, context)
        self._when = when
        self._scheduled = True


class SimLoop(asyncio.SelectorEventLoop):
    """The one event loop of a simulation; ``time()`` starts at 0 virtual seconds."""

    runs_without_threads = True  # harness.remote.in_thread calls inline on this loop

    # BaseEventLoop's own state, which the scheduler below keeps as asyncio does
    _ready: collections.deque[Any]
    _stopping: bool
    _closed: bool
    _timer_cancelled_count: int
    _clock_resolution: float

    def __init__(self) -> None:
        self._now = 0.0
        self.steps = 0  # callbacks and timers scheduled: the simulator's "events"
        self._timers: list[tuple[float, Any]] = []  # a heap of (when, TimerHandle)
        self._paused: set[str] = set()
        self._held: dict[str, list[tuple[Callable[..., Any], tuple[Any, ...], Any]]] = {}
        self._tasks: dict[str, list[asyncio.Task[Any]]] = {}
        self._prune_at: dict[str, int] = {}
        super().__init__(_NoSelector())
        self.set_task_factory(cast(Any, self._make_task))

    # -- virtual time ----------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    # -- processes -------------------------------------------------------------------------
    def _make_task(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        *,
        context: contextvars.Context | None = None,
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context, **kwargs)
        node = (context.get(NODE) if context is not None else NODE.get()) or None
        if node is not None:
            tasks = self._tasks.get(node)
            if tasks is None:
                tasks = self._tasks[node] = []
            elif len(tasks) >= self._prune_at.get(node, _PRUNE_MIN):
                # forget finished tasks; prune again only when the live ones have doubled
                tasks[:] = [t for t in tasks if not t.done()]
                self._prune_at[node] = max(_PRUNE_MIN, 2 * len(tasks))
            tasks.append(task)
        return task

    def kill_tasks(self, node: str) -> int:
        """Cancel every live task of ``node`` (its process died); how many there were."""
        tasks = [t for t in self._tasks.pop(node, []) if not t.done()]
        for t in tasks:
            t.cancel()
        self._prune_at.pop(node, None)
        self._held.pop(node, None)
        self._paused.discard(node)
        return len(tasks)

    def pause(self, node: str) -> None:
        """From now on ``node``'s callbacks wait (SIGSTOP): its timers fire late, after resume."""
        self._paused.add(node)
        # Callbacks are wrapped only while their node is stopped (the common case runs them
        # bare): those already queued are wrapped now, in place, so they keep their turn.
        for handle in (*self._ready, *(timer for _, timer in self._timers)):
            if handle._cancelled or handle._callback == self._as_process:
                continue
            if handle._context.get(NODE) == node:
                handle._args = (node, handle._callback, handle._args)
                handle._callback = self._as_process

    def resume(self, node: str) -> None:
        self._paused.discard(node)
        for callback, args, context in self._held.pop(node, []):
            super().call_soon(callback, *args, context=context)

    # -- scheduling ------------------------------------------------------------------------
    def _runs_as(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> tuple[Callable[..., object], tuple[Any, ...]]:
        """What a new handle runs: the callback, or, for a paused node's, the wrapper that
        holds it until resume."""
        self.steps += 1
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._paused:
            node = context.get(NODE) if context is not None else NODE.get()
            if node in self._paused:
                return self._as_process, (node, callback, args)
        return callback, args

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        fn, fn_args = self._runs_as(callback, args, context)
        handle = _Handle(fn, fn_args, self, context)
        self._ready.append(handle)
        return handle

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        fn, fn_args = self._runs_as(callback, args, context)
        timer = _TimerHandle(when, fn, fn_args, self, context)
        heapq.heappush(self._timers, (when, timer))
        return timer

    def _run_once(self) -> None:
        """BaseEventLoop._run_once, step for step, where time jumps instead of select()."""
        timers = self._timers
        count = len(timers)
        if count > _PURGE_MIN_TIMERS and self._timer_cancelled_count / count > _PURGE_FRACTION:
            kept = []
            for entry in timers:
                if entry[1]._cancelled:
                    entry[1]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._timers = timers = kept
            self._timer_cancelled_count = 0
        else:
            while timers and timers[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(timers)[1]._scheduled = False
        ready = self._ready
        if not ready and not self._stopping:
            if not timers:
                raise Deadlock("the simulated cluster has nothing left to do and nothing scheduled")
            # the very float steps select(timeout) would have moved the clock by
            timeout = min(max(0, timers[0][0] - self._now), _MAX_STEP_S)
            if timeout > 0:
                self._now += timeout
        end_time = self._now + self._clock_resolution
        while timers and timers[0][0] < end_time:
            timer = heapq.heappop(timers)[1]
            timer._scheduled = False
            ready.append(timer)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            try:  # Handle._run, inline: one Python frame less for every callback
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.call_exception_handler(
                    {
                        "message": f"Exception in callback {handle}",
                        "exception": exc,
                        "handle": handle,
                    }
                )

    def close(self) -> None:
        self._timers.clear()
        super().close()

    def _as_process(self, node: str, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if node in self._paused:
            # runs inside the callback's own context: keep it for the rerun after SIGCONT
            self._held.setdefault(node, []).append((callback, args, contextvars.copy_context()))
            return
        callback(*args)


def run_simulation(main: Coroutine[Any, Any, Any]) -> tuple[Any, SimLoop]:
    """Run ``main`` to completion on a fresh SimLoop; its result and the loop (for stats)."""
    # A simulation allocates a handle or a future for every event: at the default threshold
    # the cyclic collector runs every 700 allocations and walks every module's objects too
    # (5% of a run's wall time). When a collection runs can matter only to a finaliser (a
    # suspended coroutine's `finally`); the baseline's histories came out byte-identical.
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLD, *threshold[1:])
    loop = SimLoop()
    try:
        result = loop.run_until_complete(main)
        # let cancelled node tasks finish their cleanup before the loop closes
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        return result, loop
    finally:
        loop.close()
        gc.set_threshold(*threshold)
        gc.unfreeze()
