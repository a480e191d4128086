"""Who leads schemasync's Meta Storage, read off what its nodes answer (`admin.status`'s
`term`, `leader` and `role`): the target's `Primaries`. Pure, so each case is a unit test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def leader_of(views: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The Meta Storage leader most answering nodes name at the highest term any of them knows.

    While that term has no leader named, a voter that moved to it is in an election (pre-vote
    keeps a cut-off voter from raising its term alone), and learners still naming the old
    leader at the older term are stale: then only a node that answers as leader itself counts
    (a voter whose campaign failed stays at its newer term with no leader while the old
    leader keeps its quorum). None when there is neither.
    """
    if not views:
        return None
    top = max(int(s.get("term", 0)) for s in views.values())
    votes: dict[str, int] = {}
    for s in views.values():
        if int(s.get("term", 0)) == top and s.get("leader"):
            votes[str(s["leader"])] = votes.get(str(s["leader"]), 0) + 1
    if votes:
        return max(sorted(votes), key=lambda n: votes[n])
    leading = [(int(s.get("term", 0)), n) for n, s in views.items() if s.get("role") == "leader"]
    return max(leading)[1] if leading else None
