"""A Raft replica: election among voters, replication to voters and learners, apply loop.

Learners receive and apply the log but never vote, never campaign and never count toward a
commit quorum. Every entry carries the leader's ``safe_ts`` (HLC at append), strictly
increasing in log order, which the Meta Storage turns into safe time.

This module holds the election, proposals and request dispatch; log replication is in
``replication`` and durable state, recovery and the apply loop in ``replica_state``, so
no layer outgrows a file.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from schemasync import errors
from schemasync.errors import SchemaSyncError
from schemasync.raft.replica_state import CANDIDATE, LEADER
from schemasync.raft.replication import LogReplication
from schemasync.runtime import monotonic

log = logging.getLogger(__name__)


class RaftNode(LogReplication):
    """One Meta Storage replica's consensus state; run() owns its background tasks."""

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
            delay = self._election_deadline - monotonic()
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
        if monotonic() - self._last_heard < self.election_timeout_ms[0] / 1000:
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
        now = monotonic()
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
            and monotonic() - self._last_heard < self.election_timeout_ms[0] / 1000
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
