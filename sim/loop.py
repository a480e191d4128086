"""A deterministic asyncio event loop on virtual time.

``SimLoop`` is a SelectorEventLoop whose ``time()`` is virtual and whose selector never blocks:
where a real loop would sleep in ``select(timeout)``, virtual time jumps by ``timeout``. With
no real I/O and no threads, the order of every callback is a pure function of the program and
its seed. Every callback also runs "as" a process: a context variable names the node it belongs
to, so the simulator can hold a paused node's callbacks (SIGSTOP) and cancel a killed node's
tasks (SIGKILL) while the other nodes run on in the same loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVarTuple, Unpack, cast

# The node whose code a callback or task runs; None: the harness (clients, nemesis).
_Ts = TypeVarTuple("_Ts")

NODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_node", default=None)


class Deadlock(RuntimeError):
    """Nothing can ever run again: no ready callback, no timer (a simulation bug)."""


class _VirtualSelector(selectors.SelectSelector):
    """Registers file objects like a select() selector but never waits: it moves the clock."""

    def __init__(self, loop: SimLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise Deadlock("the simulated cluster has nothing left to do and nothing scheduled")
        if timeout > 0:
            self._loop.advance(timeout)
        return []


class SimLoop(asyncio.SelectorEventLoop):
    """The one event loop of a simulation; ``time()`` starts at 0 virtual seconds."""

    def __init__(self) -> None:
        self._now = 0.0
        self.steps = 0  # callbacks and timers scheduled: the simulator's "events"
        self._paused: set[str] = set()
        self._held: dict[str, list[tuple[Callable[..., Any], tuple[Any, ...], Any]]] = {}
        self._tasks: dict[str, list[asyncio.Task[Any]]] = {}
        super().__init__(_VirtualSelector(self))
        self.set_task_factory(cast(Any, self._make_task))

    # -- virtual time ----------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

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
            tasks = self._tasks.setdefault(node, [])
            if len(tasks) > 256:
                tasks[:] = [t for t in tasks if not t.done()]
            tasks.append(task)
        return task

    def kill_tasks(self, node: str) -> int:
        """Cancel every live task of ``node`` (its process died); how many there were."""
        tasks = [t for t in self._tasks.pop(node, []) if not t.done()]
        for t in tasks:
            t.cancel()
        self._held.pop(node, None)
        self._paused.discard(node)
        return len(tasks)

    def pause(self, node: str) -> None:
        """From now on ``node``'s callbacks wait (SIGSTOP): its timers fire late, after resume."""
        self._paused.add(node)

    def resume(self, node: str) -> None:
        self._paused.discard(node)
        for callback, args, context in self._held.pop(node, []):
            super().call_soon(callback, *args, context=context)

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        self.steps += 1
        node = context.get(NODE) if context is not None else NODE.get()
        if node is None:
            return super().call_soon(callback, *args, context=context)
        return super().call_soon(self._as_process, node, callback, args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self.steps += 1
        node = context.get(NODE) if context is not None else NODE.get()
        if node is None:
            return super().call_at(when, callback, *args, context=context)
        return super().call_at(when, self._as_process, node, callback, args, context=context)

    def _as_process(self, node: str, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if node in self._paused:
            # runs inside the callback's own context: keep it for the rerun after SIGCONT
            self._held.setdefault(node, []).append((callback, args, contextvars.copy_context()))
            return
        callback(*args)


def run_simulation(main: Coroutine[Any, Any, Any]) -> tuple[Any, SimLoop]:
    """Run ``main`` to completion on a fresh SimLoop; its result and the loop (for stats)."""
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
