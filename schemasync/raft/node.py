"""A Raft replica: election among voters, replication to voters and learners, apply loop.

Learners receive and apply the log but never vote, never campaign and never count toward a
commit quorum. Every entry carries the leader's ``safe_ts`` (HLC at append), strictly
increasing in log order, which the Meta Storage turns into safe time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from schemasync import errors
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

log = logging.getLogger(__name__)

FOLLOWER = "follower"
CANDIDATE = "candidate"
LEADER = "leader"
LEARNER = "learner"

MAX_BATCH = 256

RpcCall = Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]]


class StateMachine(Protocol):
    def apply(self, entry: LogEntry, replay: bool) -> Any:
        """Apply one committed entry; the result travels back to the proposer (msgpack-able)."""

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes, replay: bool) -> None: ...


class RaftNode:
    """One Meta Storage replica's consensus state; run() owns its background tasks."""

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
    ) -> None:
        self.name = name
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
        data_dir.mkdir(parents=True, exist_ok=True)
        self.hard = HardStateStore(data_dir / "raft_state")
        self.snapshots = SnapshotStore(data_dir / "snapshot")
        self.marker = CommitMarker(data_dir / "commit_index")
        self.log = RaftLog(data_dir / "raft_log")
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
        self._last_heard = time.monotonic()
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
        self._last_append = time.monotonic()
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
        return time.monotonic() + random.uniform(lo, hi) / 1000

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

    # ---- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self._task_group = tg
            tg.create_task(self._apply_loop())
            tg.create_task(self._flusher())
            if self.is_voter:
                tg.create_task(self._election_timer())

    # ---- elections --------------------------------------------------------------------------

    async def _election_timer(self) -> None:
        while True:
            delay = self._election_deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            if self.role == LEADER:
                self._election_deadline = self._new_deadline()
                continue
            await self._campaign()

    async def _pre_vote(self) -> bool:
        """Ask whether an election could be won before bumping the term (Raft §9.6), so a
        voter cut off for a while does not depose a healthy leader when it comes back."""
        self._election_deadline = self._new_deadline()
        body = {
            "term": self.term + 1,
            "candidate": self.name,
            "last_index": self.log.last_index,
            "last_term": self.log.last_term,
            "pre": True,
        }
        votes = {self.name}
        timeout = self.election_timeout_ms[0] / 1000

        async def ask(peer: str) -> None:
            try:
                reply = await self._rpc(peer, "raft.vote", body, timeout)
            except SchemaSyncError:
                return
            if reply.get("granted"):
                votes.add(peer)

        async with asyncio.TaskGroup() as tg:
            for peer in self.voters:
                if peer != self.name:
                    tg.create_task(ask(peer))
        return len(votes) >= self._majority() and self.role != LEADER

    async def _campaign(self) -> None:
        if not await self._pre_vote():
            return
        if time.monotonic() - self._last_heard < self.election_timeout_ms[0] / 1000:
            return  # a leader showed up while we asked
        self.term += 1
        self.voted_for = self.name
        self._persist_hard_state()
        self.role = CANDIDATE
        self._set_leader(None)
        self._election_deadline = self._new_deadline()
        term = self.term
        log.info("raft %s: campaigning in term %d", self.name, term)
        votes = {self.name}
        body = {
            "term": term,
            "candidate": self.name,
            "last_index": self.log.last_index,
            "last_term": self.log.last_term,
        }
        timeout = self.election_timeout_ms[0] / 1000

        async def ask(peer: str) -> None:
            try:
                reply = await self._rpc(peer, "raft.vote", body, timeout)
            except SchemaSyncError:
                return
            if reply["term"] > self.term:
                self._step_down(reply["term"])
            elif reply.get("granted") and self.term == term and self.role == CANDIDATE:
                votes.add(peer)
                if len(votes) >= self._majority():
                    self._become_leader()

        if len(votes) >= self._majority():
            self._become_leader()
            return
        async with asyncio.TaskGroup() as tg:
            for peer in self.voters:
                if peer != self.name:
                    tg.create_task(ask(peer))

    def _become_leader(self) -> None:
        if self.role == LEADER:
            return
        self.role = LEADER
        self._set_leader(self.name)
        log.info("raft %s: leader of term %d", self.name, self.term)
        now = time.monotonic()
        for peer in self.members:
            if peer != self.name:
                self._next_index[peer] = self.log.last_index + 1
                self._match_index[peer] = 0
                self._last_ack[peer] = now
                self._peer_wakeup[peer] = asyncio.Event()
        self._durable_index = self.log.last_index  # a follower fsyncs every append
        # A no-op of the new term commits every entry of earlier terms.
        self._append_local({"op": "noop"}, self.clock.now())
        assert self._task_group is not None
        self._leader_task = self._task_group.create_task(self._lead(self.term))

    async def handle_vote(self, body: dict[str, Any]) -> dict[str, Any]:
        term = int(body["term"])
        candidate = str(body["candidate"])
        if candidate not in self.voters:
            return {"term": self.term, "granted": False}
        recently_heard = (
            self.leader is not None
            and self.leader != candidate
            and time.monotonic() - self._last_heard < self.election_timeout_ms[0] / 1000
        )
        if recently_heard or (self.role == LEADER and term > self.term and self._has_quorum()):
            # A live leader exists: a rejoining voter must not depose it (Raft §4.2.3).
            return {"term": self.term, "granted": False}
        up_to_date = (body["last_term"], body["last_index"]) >= (
            self.log.last_term,
            self.log.last_index,
        )
        if body.get("pre"):
            # A pre-vote changes nothing here: would we vote in that term?
            return {"term": self.term, "granted": term > self.term and up_to_date}
        if term > self.term:
            self._step_down(term)
        granted = (
            term == self.term
            and self.is_voter
            and self.voted_for in (None, candidate)
            and up_to_date
        )
        if granted:
            self.voted_for = candidate
            self._persist_hard_state()
            self._election_deadline = self._new_deadline()
        return {"term": self.term, "granted": granted}

    # ---- leader ---------------------------------------------------------------------------

    async def _lead(self, term: int) -> None:
        async with asyncio.TaskGroup() as tg:
            for peer in self.members:
                if peer != self.name:
                    tg.create_task(self._replicate(peer, term))
            tg.create_task(self._leader_housekeeping(term))

    def _has_quorum(self) -> bool:
        """Heard from a voter majority lately (twice the longest election timeout, so a
        loaded machine does not depose a healthy leader)."""
        horizon = time.monotonic() - 2 * self.election_timeout_ms[1] / 1000
        alive = 1 + sum(
            1 for p in self.voters if p != self.name and self._last_ack.get(p, 0) >= horizon
        )
        return alive >= self._majority()

    async def _leader_housekeeping(self, term: int) -> None:
        """Idle SyncTime propagation and the quorum check that deposes an isolated leader."""
        while self.role == LEADER and self.term == term:
            until_idle = self._last_append + self.idle_sync_s - time.monotonic()
            await asyncio.sleep(max(0.001, min(self.heartbeat_s, until_idle)))
            if self.role != LEADER or self.term != term:
                return
            if not self._has_quorum():
                log.warning("raft %s: lost contact with a voter majority", self.name)
                self._step_down(self.term)
                return
            if time.monotonic() - self._last_append >= self.idle_sync_s:
                self._append_local({"op": "sync_time", "term": term}, self.clock.now())

    def sm_safe_ts(self) -> int:
        return int(getattr(self.sm, "last_applied_safe_ts", 0))

    def _append_local(self, cmd: dict[str, Any], safe_ts: int) -> LogEntry:
        if safe_ts <= self._last_stamp and self.stamp_before_append_s is None:
            # safe_ts strictly increases in log order, whatever this node's clock says.
            safe_ts = self.clock.update(self._last_stamp)
        self._last_stamp = max(self._last_stamp, safe_ts)
        entry = LogEntry(self.log.last_index + 1, self.term, safe_ts, cmd)
        # Group commit: replicate at once, fsync once for every entry appended meanwhile; the
        # leader counts itself toward the commit only for what is durable (Raft §10.2.1).
        self.log.append([entry], sync=False)
        self._flush_needed.set()
        self._last_append = time.monotonic()
        for event in self._peer_wakeup.values():
            event.set()
        return entry

    async def _flusher(self) -> None:
        while True:
            await self._flush_needed.wait()
            await asyncio.sleep(0)  # let proposals that arrived together join this fsync
            self._flush_needed.clear()
            last = self.log.last_index
            self.log.sync()
            self._durable_index = max(self._durable_index, last)
            self._advance_commit()

    async def _replicate(self, peer: str, term: int) -> None:
        wakeup = self._peer_wakeup[peer]
        while self.role == LEADER and self.term == term:
            next_index = self._next_index[peer]
            try:
                if next_index <= self.log.base_index:
                    await self._send_snapshot(peer, term)
                else:
                    await self._send_append(peer, term, next_index)
            except SchemaSyncError:
                await asyncio.sleep(self.heartbeat_s)
                continue
            if (
                self._next_index[peer] <= self.log.last_index
                or self._sent_commit.get(peer, 0) < self.commit_index
            ):
                continue  # more entries, or a commit index the peer has not heard yet
            wakeup.clear()
            try:
                async with asyncio.timeout(self.heartbeat_s):
                    await wakeup.wait()
            except TimeoutError:
                pass

    async def _send_append(self, peer: str, term: int, next_index: int) -> None:
        prev_index = next_index - 1
        prev_term = self.log.term_at(prev_index)
        entries = self.log.slice(next_index, MAX_BATCH)
        body = {
            "term": term,
            "leader": self.name,
            "prev_index": prev_index,
            "prev_term": prev_term,
            "entries": [e.to_wire() for e in entries],
            "commit": self.commit_index,
        }
        self._sent_commit[peer] = self.commit_index
        timeout = max(self.election_timeout_ms[0] / 1000, 0.2)
        reply = await self._rpc(peer, "raft.append", body, timeout)
        if reply["term"] > self.term:
            self._step_down(reply["term"])
            return
        if self.role != LEADER or self.term != term:
            return
        self._last_ack[peer] = time.monotonic()
        if reply.get("success"):
            match = int(reply["match"])
            self._match_index[peer] = max(self._match_index[peer], match)
            self._next_index[peer] = max(self._next_index[peer], match + 1)
            self._advance_commit()
        elif reply.get("busy"):
            await asyncio.sleep(self.heartbeat_s)
        else:
            hint = int(reply.get("hint", prev_index))
            self._next_index[peer] = max(1, min(next_index - 1, hint))

    async def _send_snapshot(self, peer: str, term: int) -> None:
        snap = self.snapshots.load()
        if snap is None:
            raise SchemaSyncError(errors.INTERNAL, "log compacted without a snapshot")
        body = {
            "term": term,
            "leader": self.name,
            "index": snap.index,
            "last_term": snap.term,
            "data": snap.data,
        }
        reply = await self._rpc(peer, "raft.snapshot", body, 10.0)
        if reply["term"] > self.term:
            self._step_down(reply["term"])
            return
        if self.role != LEADER or self.term != term:
            return
        self._last_ack[peer] = time.monotonic()
        if reply.get("success"):
            log.info("raft %s: sent snapshot at %d to %s", self.name, snap.index, peer)
            self._match_index[peer] = max(self._match_index[peer], snap.index)
            self._next_index[peer] = max(self._next_index[peer], snap.index + 1)
            self._advance_commit()
        else:
            await asyncio.sleep(self.heartbeat_s)

    def _advance_commit(self) -> None:
        if self.role != LEADER:
            return
        matches = sorted(
            (
                min(self._durable_index, self.log.last_index)
                if v == self.name
                else self._match_index.get(v, 0)
            )
            for v in self.voters
        )
        candidate = matches[len(matches) - self._majority()]
        if candidate > self.commit_index and self.log.term_at(candidate) == self.term:
            self.commit_index = candidate
            self._commit_changed.set()
            # Tell followers and learners at once, so their safe time does not wait a heartbeat.
            for event in self._peer_wakeup.values():
                event.set()

    # ---- follower / learner ----------------------------------------------------------------

    async def handle_append(self, body: dict[str, Any]) -> dict[str, Any]:
        term = int(body["term"])
        if term < self.term:
            return {"term": self.term, "success": False, "hint": self.log.last_index + 1}
        if term > self.term or self.role in (CANDIDATE, LEADER):
            self._step_down(term, body["leader"])
        self._set_leader(str(body["leader"]))
        self._last_heard = time.monotonic()
        self._election_deadline = self._new_deadline()
        prev_index = int(body["prev_index"])
        prev_term = body["prev_term"]
        entries = [LogEntry.from_wire(raw) for raw in body["entries"]]
        if prev_index < self.log.base_index:
            # The prefix is inside our snapshot: it is committed, so it matches.
            entries = [e for e in entries if e.index > self.log.base_index]
            prev_index = self.log.base_index
            prev_term = self.log.base_term
        if prev_index > self.log.last_index:
            return {"term": self.term, "success": False, "hint": self.log.last_index + 1}
        local_prev = self.log.term_at(prev_index)
        if local_prev != prev_term:
            # Skip back over the whole conflicting term in one step.
            hint = prev_index
            while hint - 1 > max(self.log.base_index, self.commit_index) and (
                self.log.term_at(hint - 1) == local_prev
            ):
                hint -= 1
            return {"term": self.term, "success": False, "hint": hint}
        new: list[LogEntry] = []
        for i, e in enumerate(entries):
            existing = self.log.term_at(e.index)
            if existing is None:
                new = entries[i:]
                break
            if existing != e.term:
                if e.index <= self.commit_index:
                    raise SchemaSyncError(errors.INTERNAL, f"conflict at committed {e.index}")
                self.log.truncate_from(e.index)
                new = entries[i:]
                break
        self.log.append(new)
        if new:
            self._last_stamp = max(self._last_stamp, new[-1].safe_ts)
        last_new = prev_index + len(entries)
        commit = min(int(body["commit"]), last_new)
        if commit > self.commit_index:
            self.commit_index = commit
            self._commit_changed.set()
        return {"term": self.term, "success": True, "match": last_new}

    async def handle_snapshot(self, body: dict[str, Any]) -> dict[str, Any]:
        term = int(body["term"])
        if term < self.term:
            return {"term": self.term, "success": False}
        if term > self.term or self.role in (CANDIDATE, LEADER):
            self._step_down(term, body["leader"])
        self._set_leader(str(body["leader"]))
        self._last_heard = time.monotonic()
        self._election_deadline = self._new_deadline()
        index, last_term = int(body["index"]), int(body["last_term"])
        if index <= self.applied_index:
            return {"term": self.term, "success": True}
        if not self.apply_gate.is_set():
            return {"term": self.term, "success": False, "busy": True}
        data = bytes(body["data"])
        self.snapshots.save(Snapshot(index, last_term, data))
        self.log.compact(index, last_term)
        self.sm.restore(data, replay=False)
        self._last_stamp = max(self._last_stamp, self.sm_safe_ts())
        self.applied_index = index
        self.commit_index = max(self.commit_index, index)
        self.marker.save(index)
        log.info("raft %s: installed snapshot at %d", self.name, index)
        self._notify_applied()
        self._commit_changed.set()
        return {"term": self.term, "success": True}

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
                    result: Any = self.sm.apply(entry, replay=False)
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

    # ---- proposals -----------------------------------------------------------------------

    async def propose(self, cmd: dict[str, Any]) -> tuple[int, Any]:
        """Replicate ``cmd`` through the leader; (index, apply result). Needs a caller timeout."""
        while True:
            if self.role == LEADER:
                return await self._propose_local(cmd)
            leader = self.leader
            if leader is None or leader == self.name:
                await self._wait_leader_change()
                continue
            try:
                reply = await self._rpc(
                    leader, "raft.forward", {"cmd": cmd}, self.election_timeout_ms[1] / 1000 * 2
                )
            except SchemaSyncError as e:
                # Commands are idempotent (DDL carries a request id), so resending is safe.
                if e.code not in (errors.UNAVAILABLE, errors.TIMEOUT):
                    raise
                if self.leader == leader:
                    await asyncio.sleep(self.heartbeat_s)
                continue
            return int(reply["index"]), reply.get("result")

    async def _wait_leader_change(self) -> None:
        try:
            async with asyncio.timeout(self.heartbeat_s * 2):
                await self._leader_changed.wait()
        except TimeoutError:
            pass

    async def _propose_local(self, cmd: dict[str, Any]) -> tuple[int, Any]:
        term = self.term
        if self.stamp_before_append_s is not None:
            # synctime-reorder: the stamp is taken outside the append, so an idle SyncTime
            # appended meanwhile carries a later timestamp than this write (IGNITE-20290).
            safe_ts = self.clock.now()
            await asyncio.sleep(self.stamp_before_append_s)
            if self.role != LEADER or self.term != term:
                raise errors.unavailable("lost leadership before the append")
        else:
            safe_ts = self.clock.now()
        entry = self._append_local(cmd, safe_ts)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._proposals[entry.index] = (entry.term, fut)
        return entry.index, await fut

    async def handle_forward(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.role != LEADER:
            raise errors.unavailable(f"{self.name} is not the leader", leader=self.leader)
        index, result = await self._propose_local(dict(body["cmd"]))
        return {"index": index, "result": result}

    async def handle(self, req_type: str, body: dict[str, Any]) -> dict[str, Any]:
        """Dispatch a metastore-port request; a malformed body is INVALID_REQUEST."""
        handlers = {
            "raft.append": self.handle_append,
            "raft.vote": self.handle_vote,
            "raft.snapshot": self.handle_snapshot,
            "raft.forward": self.handle_forward,
        }
        handler = handlers.get(req_type)
        if handler is None:
            raise errors.invalid_request(f"unknown metastore request type {req_type!r}")
        try:
            return await handler(body)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise errors.invalid_request(f"malformed {req_type}: {type(e).__name__}: {e}") from None

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "term": self.term,
            "leader": self.leader,
            "commit_index": self.commit_index,
            "applied_index": self.applied_index,
            "log_base_index": self.log.base_index,
            "last_index": self.log.last_index,
        }
