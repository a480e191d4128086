"""Log replication: the leader's per-peer append/snapshot streams, group commit and commit
advance, and the follower/learner side that accepts them.

Learners receive and apply the log but never count toward a commit quorum.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from schemasync import errors
from schemasync.errors import SchemaSyncError
from schemasync.raft.replica_state import CANDIDATE, LEADER, ReplicaState
from schemasync.raft.storage import LogEntry, Snapshot
from schemasync.runtime import monotonic

# The logger of the unsplit module, so node logs read as before the split.
log = logging.getLogger("schemasync.raft.node")

MAX_BATCH = 256


class LogReplication(ReplicaState):
    """Moving entries from the leader to every member; elections live in RaftNode."""

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
        horizon = monotonic() - 2 * self.election_timeout_ms[1] / 1000
        alive = 1 + sum(
            1 for p in self.voters if p != self.name and self._last_ack.get(p, 0) >= horizon
        )
        return alive >= self._majority()

    async def _leader_housekeeping(self, term: int) -> None:
        """Idle SyncTime propagation and the quorum check that deposes an isolated leader."""
        while self.role == LEADER and self.term == term:
            until_idle = self._last_append + self.idle_sync_s - monotonic()
            await asyncio.sleep(max(0.001, min(self.heartbeat_s, until_idle)))
            if self.role != LEADER or self.term != term:
                return
            if not self._has_quorum():
                log.warning("raft %s: lost contact with a voter majority", self.name)
                self._step_down(self.term)
                return
            if monotonic() - self._last_append >= self.idle_sync_s:
                self._append_local({"op": "sync_time", "term": term}, self.clock.now())

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
        self._last_append = monotonic()
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
        self._last_ack[peer] = monotonic()
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
        self._last_ack[peer] = monotonic()
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
        self._last_heard = monotonic()
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
                self.replay_through = min(self.replay_through, e.index - 1)
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
        self._last_heard = monotonic()
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
