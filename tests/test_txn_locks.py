"""Key locks: shared/exclusive compatibility, wait-die (old waits, young dies), no deadlock."""

from __future__ import annotations

import asyncio
import random

import pytest

from schemasync.locks import LockConflict, LockMode, LockOwner, LockTable

S, X = LockMode.SHARED, LockMode.EXCLUSIVE


def test_shared_locks_coexist_and_exclusive_excludes() -> None:
    async def main() -> None:
        locks = LockTable()
        old, young = LockOwner(1, "old"), LockOwner(2, "young")
        await locks.acquire(old, "k", S, 0)
        await locks.acquire(young, "k", S, 0)
        with pytest.raises(LockConflict):
            await locks.acquire(young, "k", X, 0)  # upgrade blocked by the other reader
        locks.release_all("old")
        await locks.acquire(young, "k", X, 0)  # sole reader upgrades
        assert locks.holds("young", "k", X)
        locks.release_all("young")
        assert locks.active_count() == 0

    asyncio.run(main())


def test_young_dies_old_waits_for_the_release() -> None:
    async def main() -> None:
        locks = LockTable()
        old, young = LockOwner(1, "old"), LockOwner(2, "young")
        await locks.acquire(old, "k", X, 1)
        with pytest.raises(LockConflict):
            await locks.acquire(young, "k", X, 5)  # dies immediately despite a long budget
        locks.release_all("old")
        await locks.acquire(young, "k", X, 1)
        waiter = asyncio.create_task(locks.acquire(old, "k", X, 5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        locks.release_all("young")
        async with asyncio.timeout(1):
            await waiter
        assert locks.holds("old", "k", X)

    asyncio.run(main())


def test_an_old_waiter_gives_up_after_its_budget() -> None:
    async def main() -> None:
        locks = LockTable()
        await locks.acquire(LockOwner(5, "young"), "k", X, 0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(LockConflict):
            await locks.acquire(LockOwner(1, "old"), "k", X, 0.1)
        assert 0.09 <= loop.time() - start < 1

    asyncio.run(main())


def test_random_contention_never_deadlocks_and_never_shares_an_exclusive() -> None:
    async def main() -> None:
        locks = LockTable()
        rng = random.Random(7)
        inside: dict[int, str] = {}
        done = 0

        async def txn(i: int) -> None:
            nonlocal done
            owner = LockOwner(rng.randrange(1000), f"t{i}")
            keys = rng.sample(range(4), 3)
            try:
                for k in keys:
                    await locks.acquire(owner, k, X, 2.0)
                    assert k not in inside, "two holders of an exclusive lock"
                    inside[k] = owner.txn_id
                    await asyncio.sleep(rng.random() / 200)
                    inside.pop(k, None)
                done += 1
            except LockConflict:
                pass
            finally:
                locks.release_all(owner.txn_id)

        async with asyncio.timeout(20), asyncio.TaskGroup() as tg:
            for i in range(200):
                tg.create_task(txn(i))
        assert done > 0
        assert locks.active_count() == 0

    asyncio.run(main())
