"""schemasync.deadline.within behaves as asyncio.timeout: expiry is TimeoutError, a
cancellation from outside stays CancelledError, nested limits each answer for their own."""

from __future__ import annotations

import asyncio

import pytest

from schemasync.deadline import within


def test_a_block_that_overruns_raises_timeout_error_and_one_in_time_does_not() -> None:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        async with within(1.0) as limit:
            await asyncio.sleep(0.01)
        assert not limit.expired
        start = loop.time()
        with pytest.raises(TimeoutError):
            async with within(0.05) as limit:
                await asyncio.sleep(10)
        # the task is not left cancelled: it goes on and can sleep again
        await asyncio.sleep(0)
        return limit.expired, loop.time() - start

    expired, took = asyncio.run(main())
    assert expired and 0.04 <= took < 1.0


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def body() -> None:
        async with within(10.0):
            await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.create_task(body())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_nested_limits_each_raise_for_their_own_expiry() -> None:
    async def main() -> list[str]:
        seen = []
        async with within(5.0):
            try:
                async with within(0.02):
                    await asyncio.sleep(10)
            except TimeoutError:
                seen.append("inner")
            await asyncio.sleep(0.01)  # the outer block goes on
            seen.append("outer still running")
        try:
            async with asyncio.timeout(0.02):
                async with within(5.0):
                    await asyncio.sleep(10)
        except TimeoutError:
            seen.append("asyncio's outer")
        return seen

    assert asyncio.run(main()) == ["inner", "outer still running", "asyncio's outer"]


def test_a_limit_already_due_fires_at_once() -> None:
    async def main() -> None:
        async with within(0.0):
            await asyncio.sleep(1)

    with pytest.raises(TimeoutError):
        asyncio.run(main())
