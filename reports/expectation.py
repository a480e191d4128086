"""A run against its scenario's `expect`: the one judgement that `run --gate`, the report's
banner, junit.xml and the nightly page all show, so a CI job and a person never disagree.

The rule is the gate's: a judged run (valid true or false) matches iff the set of anomaly
classes found equals `expect` (empty: the run must be valid); an unknown verdict matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["matched", "mismatched", "unknown"]


@dataclass(frozen=True)
class ExpectVerdict:
    """What was expected, what was found, and the difference, each sorted."""

    expect: tuple[str, ...]
    found: tuple[str, ...]
    missed: tuple[str, ...]  # expected, not found
    unexpected: tuple[str, ...]  # found, not expected
    status: Status

    @property
    def passed(self) -> bool:
        return self.status == "matched"

    def describe(self) -> str:
        """One line, the gate's: what matched, or what was missed and what was not expected."""
        if self.status == "unknown":
            return "verdict unknown: the run cannot be held against its expectation"
        if self.status == "matched":
            return f"as expected ({', '.join(self.expect) or 'no anomalies'})"
        return (
            f"missed {list(self.missed) or 'nothing'}, "
            f"unexpected {list(self.unexpected) or 'nothing'}"
        )


def expect_of(run: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The classes run.json says the run expects (harness.run writes the scenario's `expect`
    there); a run.json without the field, a foreign run's, expects a valid run."""
    raw = (run or {}).get("expect") or ()
    if isinstance(raw, str):
        raw = (raw,)
    return tuple(sorted({str(c) for c in raw}))


def found_classes(results: Mapping[str, Any] | None) -> tuple[str, ...]:
    return tuple(sorted({str(a.get("class")) for a in (results or {}).get("anomalies") or []}))


def judge(results: Mapping[str, Any] | None, expect: Sequence[str]) -> ExpectVerdict:
    """results.json against the expected classes (None results: not analyzed, unknown)."""
    expected = tuple(sorted(set(expect)))
    found = found_classes(results)
    missed = tuple(c for c in expected if c not in found)
    unexpected = tuple(c for c in found if c not in expected)
    status: Status
    if results is None or results.get("valid") not in (True, False):
        status = "unknown"
    elif missed or unexpected:
        status = "mismatched"
    else:
        status = "matched"
    return ExpectVerdict(expected, found, missed, unexpected, status)
