"""A Raft replica's durable state, crash recovery and apply loop: the base the replication
and election layers build on, kept apart so each layer stays readable on its own.

Every entry carries the leader's ``safe_ts`` (HLC at append), strictly increasing in log
order, which the Meta Storage turns into safe time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from schemasync import errors
from schemasync.disk import LOCAL_DISK, Disk
from schemasync.errors import SchemaSyncError
from schemasync.hlc import HybridClock
from schemasync.raft.storage import (
    CommitMarker,
    HardState,
    HardStateStore,
    LogEntry,
    RaftLog,
    Snapshot,
    SnapshotStore,
)
from schemasync.runtime import monotonic

# The logger of the unsplit module, so node logs read as before the split.
log = logging.getLogger("schemasync.raft.node")

FOLLOWER = "follower"
CANDIDATE = "candidate"
LEADER = "leader"
LEARNER = "learner"

RpcCall = Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]]


class StateMachine(Protocol):
    def apply(self, entry: LogEntry, replay: bool) -> Any:
        """Apply one committed entry; the result travels back to the proposer (msgpack-able)."""

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes, replay: bool) -> None: ...


class ReplicaState:
    """Consensus state and the state machine side; RaftNode adds replication and elections."""

    def __init__(
        self,
        name: str,
        voters: tuple[str, ...],
        members: tuple[str, ...],
        data_dir: Path,
        clock: HybridClock,
        rpc: RpcCall,
        state_machine: StateMachine,
        *,
        election_timeout_ms: tuple[int, int] = (300, 600),
        heartbeat_interval_ms: int = 50,
        idle_sync_interval_ms: int = 250,
        snapshot_threshold: int = 1000,
        stamp_before_append_ms: int | None = None,
        disk: Disk = LOCAL_DISK,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        # The election jitter: seeded under simulation, so a run repeats exactly.
        self._rng = rng if rng is not None else random.Random()
        self.voters = voters
        self.members = members
        self.is_voter = name in voters
        self.clock = clock
        self._rpc = rpc
        self.sm = state_machine
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.idle_sync_s = idle_sync_interval_ms / 1000
        self.snapshot_threshold = snapshot_threshold
        # synctime-reorder: writes take their stamp this long before they are appended.
        self.stamp_before_append_s = (
            None if stamp_before_append_ms is None else stamp_before_append_ms / 1000
        )
        disk.mkdir(data_dir)
        self.hard = HardStateStore(data_dir / "raft_state", disk)
        self.snapshots = SnapshotStore(data_dir / "snapshot", disk)
        self.marker = CommitMarker(data_dir / "commit_index", disk)
        self.log = RaftLog(data_dir / "raft_log", disk)
        hs = self.hard.load()
        self.term = hs.term
        self.voted_for = hs.voted_for
        self.role = FOLLOWER if self.is_voter else LEARNER
        self.leader: str | None = None
        self.commit_index = 0
        self.applied_index = 0
        self.apply_gate = asyncio.Event()
        self.apply_gate.set()
        self._commit_changed = asyncio.Event()
        self._last_heard = monotonic()
        self._election_deadline = self._new_deadline()
        self._leader_task: asyncio.Task[None] | None = None
        self._task_group: asyncio.TaskGroup | None = None
        self._next_index: dict[str, int] = {}
        self._match_index: dict[str, int] = {}
        self._last_ack: dict[str, float] = {}
        self._sent_commit: dict[str, int] = {}
        self._peer_wakeup: dict[str, asyncio.Event] = {}
        self._proposals: dict[int, tuple[int, asyncio.Future[Any]]] = {}
        self._applied_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_seq = itertools.count()
        self._last_append = monotonic()
        self._leader_changed = asyncio.Event()
        self._last_stamp = 0  # greatest safe_ts in the log (or the snapshot under it)
        self._flush_needed = asyncio.Event()
        self._recover()

    # ---- recovery -------------------------------------------------------------------------

    def _recover(self) -> None:
        snap = self.snapshots.load()
        if snap is not None:
            self.sm.restore(snap.data, replay=True)
            self.commit_index = self.applied_index = snap.index
            if self.log.base_index < snap.index:
                self.log.compact(snap.index, snap.term)
        self._last_stamp = max([e.safe_ts for e in self.log.entries[-1:]] + [self.sm_safe_ts()])
        if self._last_stamp:
            # A node whose clock is behind must still stamp after every entry it holds.
            self.clock.update(self._last_stamp)
        target = min(self.marker.load(), self.log.last_index)
        while self.applied_index < target:
            entry = self.log.entry(self.applied_index + 1)
            self.sm.apply(entry, replay=True)
            self.applied_index = entry.index
        self.commit_index = max(self.commit_index, self.applied_index)
        self._durable_index = self.log.last_index
        # What the log held at the restart is replayed when applied, whether the commit marker
        # survived (applied here) or the leader repeats the commit index first (the apply loop).
        self.replay_through = self.log.last_index
        log.info(
            "raft %s recovered: term %d, snapshot %d, log up to %d, applied %d",
            self.name,
            self.term,
            self.log.base_index,
            self.log.last_index,
            self.applied_index,
        )

    # ---- helpers --------------------------------------------------------------------------

    def _new_deadline(self) -> float:
        lo, hi = self.election_timeout_ms
        return monotonic() + self._rng.uniform(lo, hi) / 1000

    def _persist_hard_state(self) -> None:
        self.hard.save(HardState(self.term, self.voted_for))

    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    def _set_leader(self, leader: str | None) -> None:
        if leader != self.leader:
            self.leader = leader
            if leader is not None:
                log.info("raft %s: leader is %s in term %d", self.name, leader, self.term)
                self._leader_changed.set()
                self._leader_changed = asyncio.Event()

    def _step_down(self, term: int, leader: str | None = None) -> None:
        """Adopt a newer term (or lose leadership): persist, become follower/learner."""
        if term > self.term:
            self.term = term
            self.voted_for = None
            self._persist_hard_state()
        was_leader = self.role == LEADER
        self.role = FOLLOWER if self.is_voter else LEARNER
        self._set_leader(leader)
        if was_leader:
            log.info("raft %s: stepping down in term %d", self.name, self.term)
            if self._leader_task is not None:
                self._leader_task.cancel()
                self._leader_task = None
        self._election_deadline = self._new_deadline()

    def sm_safe_ts(self) -> int:
        return int(getattr(self.sm, "last_applied_safe_ts", 0))

    # ---- apply ----------------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        while True:
            await self._commit_changed.wait()
            self._commit_changed.clear()
            applied_any = False
            while self.applied_index < self.commit_index:
                if not self.apply_gate.is_set():
                    await self.apply_gate.wait()
                    continue
                index = self.applied_index + 1
                if index <= self.log.base_index or index > self.log.last_index:
                    break
                entry = self.log.entry(index)
                try:
                    result: Any = self.sm.apply(entry, replay=index <= self.replay_through)
                    failure: SchemaSyncError | None = None
                except Exception as e:
                    log.exception("raft %s: applying %d failed", self.name, index)
                    result, failure = None, SchemaSyncError(errors.INTERNAL, str(e))
                self.applied_index = index
                applied_any = True
                waiter = self._proposals.pop(index, None)
                if waiter is not None and not waiter[1].done():
                    if waiter[0] != entry.term:
                        waiter[1].set_exception(
                            errors.unavailable(f"entry {index} was replaced after a leader change")
                        )
                    elif failure is not None:
                        waiter[1].set_exception(failure)
                    else:
                        waiter[1].set_result(result)
                self._notify_applied()
                if index % 64 == 0:
                    await asyncio.sleep(0)
            if applied_any:
                self.marker.save(self.applied_index)
                self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        if self.applied_index - self.log.base_index < self.snapshot_threshold:
            return
        index = self.applied_index
        term = self.log.term_at(index)
        assert term is not None
        self.snapshots.save(Snapshot(index, term, self.sm.snapshot()))
        self.log.compact(index, term)
        log.info("raft %s: snapshot at %d, log compacted", self.name, index)

    def _notify_applied(self) -> None:
        while self._applied_waiters and self._applied_waiters[0][0] <= self.applied_index:
            _, _, fut = heapq.heappop(self._applied_waiters)
            if not fut.done():
                fut.set_result(None)

    async def wait_applied(self, index: int) -> None:
        """Return once this replica applied ``index`` (callers bound it with a timeout)."""
        if self.applied_index >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._applied_waiters, (index, next(self._waiter_seq), fut))
        await fut
