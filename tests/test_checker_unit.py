"""Pure parts of the checker: the contract's JSON Schema, verdict codes, the synthetic model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.analyze import exit_code
from checker.contract import ContractError, first_problem, validate_history_file, validator
from synthetic import ClusterModel, generate_run

OK_DDL = {
    "index": 0,
    "time": 5,
    "type": "ok",
    "process": 3,
    "f": "ddl",
    "node": "n1",
    "value": {"catalog_version": 2, "activation_ts": 123},
}


def test_schema_accepts_a_ddl_ack_and_names_the_missing_field() -> None:
    assert first_problem("event", OK_DDL) is None
    broken = {**OK_DDL, "value": {"catalog_version": 2}}
    assert first_problem("event", broken) == ("value.activation_ts", "missing")


def test_schema_rejects_unknown_type_and_nemesis_completions() -> None:
    assert first_problem("event", {**OK_DDL, "type": "done"}) is not None
    nemesis = {"index": 1, "time": 1, "type": "ok", "process": "nemesis", "f": "start-kill"}
    assert first_problem("event", nemesis) is not None
    assert first_problem("event", {**nemesis, "type": "info"}) is None


def test_schema_requires_an_error_on_client_fail() -> None:
    fail = {"index": 0, "time": 1, "type": "fail", "process": 0, "f": "probe", "node": "n1"}
    assert first_problem("event", fail) == ("error", "missing")
    assert validator("event").is_valid(
        {**fail, "error": {"code": "TIMEOUT", "message": "x", "retriable": True}}
    )


@pytest.mark.parametrize(("valid", "code"), [(True, 0), (False, 1), ("unknown", 2)])
def test_exit_codes(valid: object, code: int) -> None:
    assert exit_code({"valid": valid}) == code


def test_torn_tail_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(OK_DDL) + "\n" + '{"index": 1, "ti')
    assert validate_history_file(path) == (1, True)
    path.write_text('{"index": 1, "ti\n' + json.dumps(OK_DDL) + "\n")
    with pytest.raises(ContractError, match=r"history.jsonl line 1: not JSON"):
        validate_history_file(path)


def test_model_clock_round_trips_and_activation_floor() -> None:
    m = ClusterModel(1)
    for t in (0, 1, 999_999, 1_000_000, 123_456_789):
        assert m.time_of(m.ts(t)) >= t - 20 and m.ts(m.time_of(m.ts(t))) == m.ts(t)
    line = m.add_version(10_000_000, "CREATE TABLE t (c INT32)", {}, "create_table", "t")
    assert m.cat_at(line["activation_ts"] - 1)["catalog_version"] == 1
    assert m.cat_at(line["activation_ts"])["catalog_version"] == 2


def test_generator_is_deterministic(tmp_path: Path) -> None:
    generate_run(tmp_path / "a", seed=9, events=250)
    generate_run(tmp_path / "b", seed=9, events=250)
    for name in ("history.jsonl", "catalog.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def _kill(f: str, at_s: float, nodes: list[str]) -> dict[str, object]:
    return {"f": f, "time": int(at_s * 1e9), "value_json": json.dumps({"nodes": nodes})}


def test_restarts_measure_service_after_each_restart_and_the_gate_reads_them() -> None:
    """n4 restarted at 3 s serves again at 6.5 s (3.5 s); n5 restarted at 3 s serves at once;
    n4 restarted at 10 s is killed again at 11 s before serving (a lower bound of 1 s)."""
    from checker.stats import restarts
    from reports.expectation import judge

    nemesis = [
        {"f": "start-partition", "time": 0, "value_json": "{}"},
        _kill("start-kill", 1.0, ["n4", "n5"]),
        _kill("stop-kill", 3.0, ["n4", "n5"]),
        _kill("start-kill", 8.0, ["n4"]),
        _kill("stop-kill", 10.0, ["n4"]),
        _kill("start-kill", 11.0, ["n4"]),
        {"f": "stop-kill", "time": 0, "value_json": "not json"},
    ]
    windows = [
        {"node": "n4", "from_s": 0.9, "to_s": 6.5},
        {"node": "n5", "from_s": 0.9, "to_s": 2.9},
        {"node": "n4", "from_s": 7.9, "to_s": 20.0},
    ]
    got = restarts(nemesis, windows, end_s=20.0)
    assert got == [
        {"node": "n4", "at_s": 3.0, "unavailable_s": 3.5, "served": True},
        {"node": "n5", "at_s": 3.0, "unavailable_s": 0.0, "served": True},
        {"node": "n4", "at_s": 10.0, "unavailable_s": 1.0, "served": False},
    ]
    results = {"valid": True, "anomalies": [], "stats": {"restarts": got}}
    assert judge(results, ["unavailability"]).status == "matched"
    assert judge(results, []).status == "matched"  # a liveness fact fails no run not asking
    quick = {**results, "stats": {"restarts": got[1:]}}
    assert judge(quick, ["unavailability"]).missed == ("unavailability",)
