"""The gate's rule (reports.expectation): `expect` must all be found, and nothing outside
`expect` and `allow` may be; an allowed class fails nothing whether it is found or not."""

from __future__ import annotations

from typing import Any

from reports.expectation import allow_of, judge


def _results(*classes: str, valid: Any = None) -> dict[str, Any]:
    anomalies = [{"class": c, "events": [1], "nodes": ["n1"]} for c in classes]
    return {"valid": (not classes) if valid is None else valid, "anomalies": anomalies}


def test_an_allowed_finding_passes_and_is_named() -> None:
    verdict = judge(_results("schema-conformance"), [], ["schema-conformance"])
    assert verdict.passed and verdict.allowed == ("schema-conformance",)
    assert verdict.describe() == "as expected (no anomalies; allowed: schema-conformance)"


def test_an_allowed_class_not_found_fails_nothing() -> None:
    assert judge(_results(), [], ["schema-conformance"]).passed
    verdict = judge(_results("lost-write"), ["lost-write"], ["schema-conformance"])
    assert verdict.passed and verdict.allowed == ()


def test_a_class_neither_expected_nor_allowed_still_fails() -> None:
    verdict = judge(_results("schema-conformance", "lost-write"), [], ["schema-conformance"])
    assert verdict.status == "mismatched"
    assert verdict.unexpected == ("lost-write",) and verdict.allowed == ("schema-conformance",)


def test_allow_never_stands_for_an_expected_class() -> None:
    verdict = judge(_results(), ["lost-write"], ["lost-write"])
    assert verdict.status == "mismatched" and verdict.missed == ("lost-write",)


def test_an_unknown_verdict_matches_nothing_whatever_is_allowed() -> None:
    assert judge(_results(valid="unknown"), [], ["lost-write"]).status == "unknown"


def test_run_json_allow_is_a_table_of_reasons() -> None:
    assert allow_of({"allow": {"schema-conformance": "standbys", "lost-write": "x"}}) == (
        "lost-write",
        "schema-conformance",
    )
    assert allow_of({"allow": ["lost-write"]}) == ()  # not the contract's shape: nothing allowed
    assert allow_of(None) == ()
