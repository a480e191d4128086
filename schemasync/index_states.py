"""The pure part of the index state machine (seed 004, Ignite's states).

CREATE INDEX makes an index REGISTERED (writers maintain it, nobody reads it), then BUILDING
(backfill of the rows committed before BUILDING activated), then AVAILABLE (readable). DROP
INDEX makes an AVAILABLE index STOPPING (new transactions no longer read it), then it is removed.
Each move is an internal DDL (`ALTER INDEX i SET STATE s`, `ALTER INDEX i REMOVE`) that the
driver issues only when every read-write transaction that began before the current state
activated has finished, so at most two adjacent states are ever in use (F1's rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schemasync.catalog import AVAILABLE, BUILDING, REGISTERED, STOPPING, Catalog, Index

# Writers maintain every index of the catalog at their begin_ts, STOPPING included: a reader
# that began before STOPPING activated may still read it.
MAINTAINED_STATES: frozenset[str] = frozenset({REGISTERED, BUILDING, AVAILABLE, STOPPING})
READABLE_STATES: frozenset[str] = frozenset({AVAILABLE})


@dataclass(frozen=True)
class IndexStep:
    """The next internal statement for one index, and the state it leaves."""

    table: str
    index: str
    from_state: str
    stmt: str


def next_statement(index: Index) -> str | None:
    """The internal DDL that moves `index` on, or None when it rests (AVAILABLE)."""
    if index.state == REGISTERED:
        return f"ALTER INDEX {index.name} SET STATE BUILDING"
    if index.state == BUILDING:
        return f"ALTER INDEX {index.name} SET STATE AVAILABLE"
    if index.state == STOPPING:
        return f"ALTER INDEX {index.name} REMOVE"
    return None


def pending_steps(catalog: Catalog) -> list[IndexStep]:
    """Every index of `catalog` that still has a move to make, with its statement."""
    steps: list[IndexStep] = []
    for table in catalog.tables.values():
        for index in table.indexes:
            stmt = next_statement(index)
            if stmt is not None:
                steps.append(IndexStep(table.name, index.name, index.state, stmt))
    return steps


def state_activation_ts(catalogs: Sequence[Catalog], index_name: str) -> int | None:
    """When the index's current state (in catalogs[-1]) activated: the activation_ts of the
    first version of the trailing run of versions where the index (same id) has that state.
    `catalogs` are consecutive versions, oldest first. None if the latest has no such index."""
    if not catalogs:
        return None
    found = catalogs[-1].index(index_name)
    if found is None:
        return None
    _, current = found
    since = catalogs[-1].activation_ts
    for cat in reversed(catalogs[:-1]):
        hit = cat.index(index_name)
        if hit is None or hit[1].id != current.id or hit[1].state != current.state:
            break
        since = cat.activation_ts
    return since


def may_advance(state_activation: int, running_rw_begin_ts: Iterable[int]) -> bool:
    """The gate of every move: no read-write transaction that began before the current state
    activated is still running (one that began at the activation ts already sees the state)."""
    return all(begin_ts >= state_activation for begin_ts in running_rw_begin_ts)


def maintained(index: Index) -> bool:
    """Must a writer (on the catalog at its begin_ts) keep this index's entries up to date?"""
    return index.state in MAINTAINED_STATES


def readable(index: Index) -> bool:
    """May a transaction (on the catalog at its begin_ts) look rows up through this index?"""
    return index.state in READABLE_STATES
