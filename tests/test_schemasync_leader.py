"""schemasync's Primaries: who leads its Meta Storage, read off what the nodes answer, at the
newest term any of them knows (a stale learner's leader is no answer)."""

from __future__ import annotations

from typing import Any

from targets.schemasync.leader import leader_of


def _view(term: int, leader: str | None) -> dict[str, Any]:
    return {"term": term, "leader": leader}


def test_the_leader_is_the_one_named_at_the_newest_term() -> None:
    learners_stale = {"n4": _view(5, "n2"), "n5": _view(5, "n2")}
    # voters moved to term 6 and are still electing: the learners' n2 is no answer
    assert leader_of({**learners_stale, "n1": _view(6, None), "n3": _view(6, None)}) is None
    assert leader_of({**learners_stale, "n1": _view(6, "n1"), "n3": _view(6, None)}) == "n1"
    # all at one term: most named wins, ties to the smaller name
    assert leader_of({**learners_stale, "n1": _view(5, "n1")}) == "n2"
    assert leader_of({"n1": _view(3, "n1"), "n3": _view(3, "n3")}) == "n1"
    assert leader_of({}) is None
    assert leader_of({"n1": {}, "n2": _view(0, None)}) is None


def test_a_failed_campaign_leaves_the_leader_that_answers_as_one() -> None:
    """n3 moved to term 6 by a vote it granted in a campaign that failed, then lost touch with
    n1, which kept its quorum at term 5: no one names a leader at 6, and n1 says it leads."""
    views: dict[str, dict[str, Any]] = {
        "n1": {"term": 5, "leader": "n1", "role": "leader"},
        "n2": {"term": 5, "leader": "n1", "role": "follower"},
        "n3": {"term": 6, "leader": None, "role": "follower"},
    }
    assert leader_of(views) == "n1"
    assert leader_of({"n3": views["n3"], "n4": _view(5, "n2")}) is None
