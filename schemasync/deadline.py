"""``within(seconds)``: ``asyncio.timeout`` for the paths every request takes.

A client txn passes five nested timeouts (client, dispatch, txn service, peer RPC, lock wait),
about 100,000 in a simulated minute. asyncio's ``Timeout`` keeps a state machine for
``reschedule`` and ``when``, which nothing here uses; this one only arms a timer on entry and
cancels it on exit, with the same semantics otherwise: on expiry the task is cancelled, and
the cancellation it caused (and only that one) leaves the block as ``TimeoutError``. The same
timers fire at the same times, so a simulated run's history is unchanged (measured: 4% fewer
instructions per simulated second).
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    __slots__ = ("_cancelling", "_delay", "_expired", "_task", "_timer")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._timer: asyncio.Handle | None = None
        self._expired = False

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline is set inside a task")
        self._task = task
        # cancellations already pending when the block began are not ours to turn into
        # TimeoutError (asyncio.timeout counts them the same way)
        self._cancelling = task.cancelling()
        loop = asyncio.get_running_loop()
        when = loop.time() + self._delay
        if when <= loop.time():  # already due: at once, after what is ready (as asyncio does)
            self._timer = loop.call_soon(self._expire)
        else:
            self._timer = loop.call_at(when, self._expire)
        return self

    def _expire(self) -> None:
        self._timer = None
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    @property
    def expired(self) -> bool:
        return self._expired


def within(seconds: float) -> Deadline:
    """``async with within(s):`` raises TimeoutError if the block runs longer than ``s``."""
    return Deadline(seconds)
