"""A run against its scenario's `expect` and `allow`: the one judgement that `run --gate`, the
report's banner, junit.xml and the nightly page all show, so a CI job and a person never disagree.

The rule is the gate's: a judged run (valid true or false) matches iff every class in `expect`
is found and every class found is in `expect` or `allow` (empty both: the run must be valid); an
unknown verdict matches nothing. `allow` names the known findings of the system under test that
a gate tolerates, each with its reason (PostgreSQL's standbys' schema-conformance, say): found
or not, they fail nothing, and the verdict lists the ones found.
`unavailability` is a liveness finding, not an anomaly class: where `expect` names it, it is
found when a node the kill nemesis restarted then served nothing for UNAVAILABLE_AFTER_RESTART_S
(results.json `stats.restarts`); a run that does not expect it is not failed for it (a slow
restart on a loaded machine is not a bug the run was asked about).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from checker.anomaly_classes import UNAVAILABILITY

Status = Literal["matched", "mismatched", "unknown"]
# the statistics' own window threshold (checker.stats, docs/anomalies.md)
UNAVAILABLE_AFTER_RESTART_S = 2.0


@dataclass(frozen=True)
class ExpectVerdict:
    """What was expected, what was found, and the difference, each sorted."""

    expect: tuple[str, ...]
    found: tuple[str, ...]
    missed: tuple[str, ...]  # expected, not found
    unexpected: tuple[str, ...]  # found, neither expected nor allowed
    status: Status
    allowed: tuple[str, ...] = ()  # found, not expected, and allowed

    @property
    def passed(self) -> bool:
        return self.status == "matched"

    def describe(self) -> str:
        """One line, the gate's: what matched, or what was missed and what was not expected."""
        if self.status == "unknown":
            return "verdict unknown: the run cannot be held against its expectation"
        if self.status == "matched":
            known = f"; allowed: {', '.join(self.allowed)}" if self.allowed else ""
            return f"as expected ({', '.join(self.expect) or 'no anomalies'}{known})"
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


def unavailable_after_restart(results: Mapping[str, Any] | None) -> bool:
    """Whether some restarted node served nothing for UNAVAILABLE_AFTER_RESTART_S after it."""
    stats = (results or {}).get("stats")
    restarts = stats.get("restarts") if isinstance(stats, Mapping) else None
    return any(
        isinstance(r, Mapping)
        and isinstance(r.get("unavailable_s"), int | float)
        and r["unavailable_s"] >= UNAVAILABLE_AFTER_RESTART_S
        for r in restarts or ()
    )


def allow_of(run: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The classes run.json says the run tolerates (`allow`: class -> reason); none when the
    field is absent or not a table."""
    raw = (run or {}).get("allow")
    return tuple(sorted(str(c) for c in raw)) if isinstance(raw, Mapping) else ()


def judge(
    results: Mapping[str, Any] | None, expect: Sequence[str], allow: Sequence[str] = ()
) -> ExpectVerdict:
    """results.json against the expected and allowed classes (None results: not analyzed,
    unknown)."""
    expected = tuple(sorted(set(expect)))
    found = found_classes(results)
    if UNAVAILABILITY in expected and unavailable_after_restart(results):
        found = tuple(sorted((*found, UNAVAILABILITY)))
    missed = tuple(c for c in expected if c not in found)
    allowed = tuple(c for c in found if c not in expected and c in allow)
    unexpected = tuple(c for c in found if c not in expected and c not in allow)
    status: Status
    if results is None or results.get("valid") not in (True, False):
        status = "unknown"
    elif missed or unexpected:
        status = "mismatched"
    else:
        status = "matched"
    return ExpectVerdict(expected, found, missed, unexpected, status, allowed)
