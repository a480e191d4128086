"""Key locks of a primary: shared/exclusive two-phase locking with wait-die, so nothing deadlocks.

An older transaction (smaller begin_ts) may wait for a younger holder; a younger one dies at
once (LockConflict). Waits only ever go from older to younger, so no cycle can form; every wait
is also bounded by the caller's timeout.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Hashable
from dataclasses import dataclass, field

from schemasync.deadline import within


class LockMode(enum.Enum):
    SHARED = "S"
    EXCLUSIVE = "X"


@dataclass(frozen=True, order=True)
class LockOwner:
    """A transaction as the lock table sees it; ordering by (begin_ts, txn_id) = age."""

    begin_ts: int
    txn_id: str


class LockConflict(Exception):
    """The requester must abort: it is younger than a conflicting holder, or waited too long."""

    def __init__(self, resource: Hashable, holders: list[str], waited: bool) -> None:
        verb = "timed out waiting for" if waited else "conflicts with"
        super().__init__(f"lock on {resource!r} {verb} {', '.join(sorted(holders))}")
        self.resource = resource
        self.holders = holders


@dataclass
class _Lock:
    holders: dict[str, tuple[LockOwner, LockMode]] = field(default_factory=dict)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def conflicting(self, owner: LockOwner, mode: LockMode) -> list[LockOwner]:
        out = []
        for txn_id, (holder, held) in self.holders.items():
            if txn_id == owner.txn_id:
                continue
            if mode is LockMode.EXCLUSIVE or held is LockMode.EXCLUSIVE:
                out.append(holder)
        return out


class LockTable:
    """Locks on hashable resources (e.g. (table_id, partition, key)) for many transactions."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, _Lock] = {}
        self._held: dict[str, set[Hashable]] = {}
        self.conflicts = 0
        self.waits = 0

    async def acquire(
        self, owner: LockOwner, resource: Hashable, mode: LockMode, max_wait_s: float
    ) -> None:
        """Take (or upgrade to) ``mode`` on ``resource``; raises LockConflict under wait-die."""
        waited = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        while True:
            lock = self._locks.get(resource)
            if lock is None:
                lock = self._locks[resource] = _Lock()
            conflicts = lock.conflicting(owner, mode)
            if not conflicts:
                break
            if any(holder < owner for holder in conflicts):
                self.conflicts += 1
                self._forget_if_free(resource, lock)
                raise LockConflict(resource, [h.txn_id for h in conflicts], waited)
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.conflicts += 1
                self._forget_if_free(resource, lock)
                raise LockConflict(resource, [h.txn_id for h in conflicts], True)
            waited = True
            self.waits += 1
            lock.released.clear()
            try:
                async with within(remaining):
                    await lock.released.wait()
            except TimeoutError:
                pass
        held = lock.holders.get(owner.txn_id)
        if held is None or held[1] is LockMode.SHARED:
            lock.holders[owner.txn_id] = (owner, mode)
        self._held.setdefault(owner.txn_id, set()).add(resource)

    def grant(self, owner: LockOwner, resource: Hashable, mode: LockMode) -> None:
        """Take a lock without checking (restart recovery re-locks the keys of in-doubt txns)."""
        lock = self._locks.get(resource)
        if lock is None:
            lock = self._locks[resource] = _Lock()
        lock.holders[owner.txn_id] = (owner, mode)
        self._held.setdefault(owner.txn_id, set()).add(resource)

    def holds(self, txn_id: str, resource: Hashable, mode: LockMode) -> bool:
        lock = self._locks.get(resource)
        if lock is None or txn_id not in lock.holders:
            return False
        return mode is LockMode.SHARED or lock.holders[txn_id][1] is LockMode.EXCLUSIVE

    def holders(self, resource: Hashable) -> list[str]:
        lock = self._locks.get(resource)
        return sorted(lock.holders) if lock else []

    def release_all(self, txn_id: str) -> None:
        """Release every lock of a transaction (at commit or abort) and wake the waiters."""
        for resource in self._held.pop(txn_id, set()):
            lock = self._locks.get(resource)
            if lock is None:
                continue
            lock.holders.pop(txn_id, None)
            lock.released.set()
            self._forget_if_free(resource, lock)

    def _forget_if_free(self, resource: Hashable, lock: _Lock) -> None:
        if not lock.holders and self._locks.get(resource) is lock:
            # Waiters hold a reference to this object and re-check on wake-up; a new
            # requester gets a fresh lock, which is equally free.
            lock.released.set()
            del self._locks[resource]

    def active_count(self) -> int:
        return len(self._locks)
