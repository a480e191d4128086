"""The run's one event loop: a blocking call crosses into a thread at one seam and runs to its
end even when the run is cancelled; a signal cancels the run instead of raising out of the
loop, and the run learns which signal it was."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Awaitable

import pytest

from harness.backends.base import own_signals as _own_signals
from harness.remote import in_thread


def _slow(done: threading.Event) -> str:
    time.sleep(0.4)
    done.set()
    return "finished"


async def _cancel_while_waiting(call: Awaitable[str]) -> tuple[bool, float]:
    """Cancel the caller 50 ms into the call: was the call's work done when the cancellation
    reached the caller, and how long after the start."""
    began = time.monotonic()
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return DONE.is_set(), time.monotonic() - began


DONE = threading.Event()


def test_a_cancelled_blocking_call_still_runs_to_its_end_before_the_caller_goes_on() -> None:
    DONE.clear()
    finished, elapsed = asyncio.run(_cancel_while_waiting(in_thread(_slow, DONE)))
    assert finished and elapsed >= 0.4
    # the other way: a bare to_thread lets the caller go on while the thread still works
    DONE.clear()
    finished, elapsed = asyncio.run(_cancel_while_waiting(asyncio.to_thread(_slow, DONE)))
    assert not finished and elapsed < 0.4
    DONE.wait(2)


def test_in_thread_returns_the_result_and_raises_the_error() -> None:
    assert asyncio.run(in_thread(_slow, threading.Event())) == "finished"
    with pytest.raises(ZeroDivisionError):
        asyncio.run(in_thread(lambda: 1 // 0))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_cancels_the_run_and_is_named(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    cleaned: list[str] = []

    async def work() -> None:
        try:
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, os.kill, os.getpid(), sig)
            await asyncio.sleep(10)
        finally:
            cleaned.append("teardown")

    began = time.monotonic()
    assert asyncio.run(_own_signals(work())) == sig.name
    assert time.monotonic() - began < 5 and cleaned == ["teardown"]
    assert signal.getsignal(sig) == before  # the process's own handling is back


def test_without_a_signal_the_run_just_ends() -> None:
    async def work() -> None:
        await asyncio.sleep(0.01)

    assert asyncio.run(_own_signals(work())) is None
