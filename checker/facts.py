"""The small facts of a run the driver holds (collected by checker.run_facts in one job)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ack:
    """One acknowledged DDL (an ok ddl completion paired with its invoke)."""

    index: int
    time: int
    catalog_version: int
    activation_ts: int | None
    stmt: str | None


@dataclass(frozen=True)
class LastWrite:
    """The last acknowledged writes (w or d) to one table name: the greatest commit_ts and the
    completion of its txn, and the last completion (they differ when txns commit in another
    order than they complete)."""

    table: str
    commit_ts: int | None
    commit_index: int | None  # the completion of the txn with the greatest commit_ts
    index: int


@dataclass(frozen=True)
class RunFacts:
    """What the driver knows of a run after the one facts job."""

    invokes: int
    closed: int  # completions paired with their invoke
    ok: int  # paired ok completions
    unpaired: int
    first_unpaired: int | None
    # invokes by a process whose previous op ended in info (history.md forbids them)
    reinvoked: int
    first_reinvoked: int | None
    end_time: int  # greatest time of any event
    workload_start: int | None  # time of the first client invoke
    workload_end: int | None  # time of the last client completion before the final reads
    nemesis: tuple[dict[str, Any], ...]  # index, time, f, value_json; in index order
    # index, type, node, table, index_name, code, ts, invoke_index
    final_reads: tuple[dict[str, Any], ...]
    acks: tuple[Ack, ...]  # in index order
    info_txn_invokes: tuple[int, ...]
    last_writes: tuple[LastWrite, ...]  # one per table name an ok txn wrote (w or d)
    # (txn, table) pairs of ok txns with a participant off tsv(t, commit_ts); 0 without a clock
    off_ok: int

    @property
    def written_ok(self) -> frozenset[str]:
        """The table names an ok txn wrote (w or d)."""
        return frozenset(w.table for w in self.last_writes)
