"""The detection matrix, proven both ways: each bug toggle's scenario, toggle on, finds one of
its anomaly classes and nothing outside them; the same scenario with every toggle off (its
control) is valid; the baseline (every nemesis, every toggle off) is valid.

One run per case, on the scenario's own seed (1): no retry over seeds, so a toggle whose race a
short run does not win every time fails here. Real docker clusters with the matrix's short
time limits; the cluster parts run three at a time in worker processes, and every run is
analyzed in the test session's one Spark session. The matrix, its time limits and its judgment
are `benchmarks/detection.py`, which runs the same cases over more seeds.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import docker_available, require
from tests.spark_session import spark  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parent.parent
PARALLEL = 3


def _detection() -> Any:
    spec = importlib.util.spec_from_file_location("detection", REPO / "benchmarks/detection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("detection", module)
    spec.loader.exec_module(module)
    return module


detection = _detection()
# seed 1 (every scenario's own) of the benchmark: each toggle on, its control, the baseline
CASES = {c.label: c for c in detection.cases(list(detection.MATRIX), [1], True, True)}


def _selected_cases(request: pytest.FixtureRequest) -> set[str]:
    """The case labels the session will run (`-k` may pick a few): only those are provisioned."""
    labels = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "originalname", None) == "test_detection" and callspec is not None:
            labels.add(str(callspec.params["label"]))
    return labels


@pytest.fixture(scope="module")
def matrix(
    spark: Any,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Any]]:
    """Every selected case run and analyzed once for the whole module: label -> Outcome."""
    require(docker_available(), "no Docker engine answers")
    require(shutil.which("java") is not None, "Spark needs a Java runtime")
    store = tmp_path_factory.mktemp("detection-store")
    selected = _selected_cases(request)
    todo = detection.longest_first([c for label, c in CASES.items() if label in selected])
    outcomes = detection.run_matrix(todo, store, None, PARALLEL, spark=spark)
    yield {o.case.label: o for o in outcomes}


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.timeout(2400)  # the first case also pays for the whole matrix (module fixture)
@pytest.mark.parametrize("label", list(CASES))
def test_detection(matrix: dict[str, Any], label: str) -> None:
    outcome = matrix[label]
    why = detection.failure(outcome)
    assert why is None, why
    if outcome.case.toggles_on and not outcome.passed:
        # complete and clean of anything outside its list, and nothing found: this proves no
        # false positive and nothing about detection, so it is reported as such, not passed
        assert outcome.case.unprovokable
        pytest.xfail(outcome.case.unprovokable)


# -- the judgment the matrix relies on: what passes, what is outside, what is xfail ----------


@pytest.mark.parametrize(
    ("label", "valid", "classes", "passed", "fails_with"),
    [
        # one listed class is enough; an implied one beside it is allowed
        ("local-schema-at-commit-on", False, ["mixed-schema-commit", "ap-violation"], True, None),
        # an implied class alone is not a detection
        ("local-schema-at-commit-on", False, ["ap-violation"], False, "none of"),
        # anything else beside a listed class is outside the list
        ("no-ack-wait-on", False, ["stale-schema-read", "lost-write"], False, "outside"),
        ("no-ack-wait-on", True, [], False, "none of"),
        # an incomplete history is no verdict, for a toggle-on run and a control alike
        ("no-ack-wait-on", "unknown", [], False, "unknown"),
        ("no-ack-wait-off", "unknown", [], False, "unknown"),
        # a control must be valid: even a class of the toggle's own list fails it
        ("no-ack-wait-off", False, ["stale-schema-read"], False, "every toggle off"),
        ("no-ack-wait-off", True, [], True, None),
        ("baseline", True, [], True, None),
        # a toggle a run cannot provoke: complete and clean is all it must be (the test xfails)
        ("hlc-no-round-up-on", True, [], False, None),
        ("hlc-no-round-up-on", False, ["ap-violation"], False, "outside"),
        ("hlc-no-round-up-on", False, ["stale-schema-read"], True, None),
    ],
)
def test_judgment_of_a_case(
    tmp_path: Path,
    label: str,
    valid: Any,
    classes: list[str],
    passed: bool,
    fails_with: str | None,
) -> None:
    """`judge` and `failure` on results.json as the checker writes it: the rule the matrix test
    and the benchmark apply, without a cluster."""
    import json

    event = {"index": 0, "time": 10**9, "type": "invoke", "process": 0, "f": "probe", "value": {}}
    (tmp_path / "history.jsonl").write_text(json.dumps(event) + "\n")
    anomalies = [
        {"class": c, "events": [0], "nodes": ["n1"], "explanation": f"why {c}"} for c in classes
    ]
    results = {"valid": valid, "anomalies": anomalies, "errors": [], "stats": {}}
    outcome = detection.judge(CASES[label], tmp_path, results)
    assert outcome.passed is passed
    why = detection.failure(outcome)
    if fails_with is None:
        assert why is None
    else:
        assert why is not None and fails_with in why, why
    if fails_with == "outside":  # the run directory dies with a CI machine; its witness stays
        assert outcome.outside and all(f"witness {c}: why {c}" in why for c in outcome.outside)


# -- the schedule the matrix relies on: pure, seeded, within the scenario's options ---------

NODES = ["n1", "n2", "n3", "n4", "n5"]


def _schedule(kinds: list[str], options: dict[str, Any], seed: int = 3) -> list[Any]:
    from nemesis.schedule import build_schedule

    return build_schedule(
        kinds, 2.0, 120.0, seed, NODES, NODES[:3], NODES[3:], max_skew_s=0.5, options=options
    )


def test_schedule_honours_nemesis_options() -> None:
    opts = {
        "clock_modes": ["skew"],
        "lagging_modes": ["inhibit"],
        "process_targets": ["one"],
        "partition_shapes": ["halves"],
    }
    steps = _schedule(["clock", "lagging-learner", "kill", "pause", "partition"], opts)
    starts = [s.params for s in steps if s.action.startswith("start-")]
    assert {p["kind"] for p in starts} == {"clock", "lagging-learner", "kill", "pause", "partition"}
    for p in starts:
        if p["kind"] == "clock":
            assert p["mode"] == "skew"
            assert max(p["offsets"].values()) - min(p["offsets"].values()) <= 0.5
        elif p["kind"] == "lagging-learner":
            assert p["mode"] == "inhibit"
        elif p["kind"] in ("kill", "pause"):
            assert p["target"] == "one" and len(p["nodes"]) == 1
        else:
            assert p["shape"] == "halves"
    with pytest.raises(ValueError, match="clock_modes"):
        _schedule(["clock"], {"clock_modes": ["sundial"]})


def test_default_clock_modes_stay_within_csmax() -> None:
    from nemesis.schedule import parse_kinds

    for seed in range(20):
        for step in _schedule(parse_kinds("all"), {}, seed):
            if step.params.get("kind") == "clock" and step.action == "start-clock":
                assert step.params["mode"] in ("skew", "bump", "strobe")
    beyond = _schedule(["clock"], {"clock_modes": ["skew-beyond"]})
    offsets = beyond[0].params["offsets"]
    assert max(offsets.values()) - min(offsets.values()) > 0.5
    edge = _schedule(["clock"], {"clock_modes": ["skew-edge"]})[0].params["offsets"]
    assert max(edge.values()) - min(edge.values()) == pytest.approx(0.5)


def test_delay_nemesis_schedule_is_data_that_replays() -> None:
    import json

    from nemesis.schedule import parse_kinds, schedule_from_json, schedule_to_json

    assert "delay" not in parse_kinds("all") and parse_kinds("all,delay")[-1] == "delay"
    opts = {"delay_ms": 1000, "delay_values_ms": [1000, 250]}
    steps = _schedule(["delay"], opts)
    starts = [s.params for s in steps if s.action == "start-delay"]
    assert [p["mode"] for p in starts[:4]] == ["all", "split", "all", "split"]
    assert starts[0]["delays_ms"] == {n: 250 for n in NODES}
    assert set(starts[1]["delays_ms"].values()) == {250, 1000}
    assert all(p["restore_ms"] == 1000 for p in starts)
    assert [s.action for s in steps[:2]] == ["start-delay", "stop-delay"]
    again = schedule_from_json(json.loads(json.dumps(schedule_to_json(steps))))
    assert again == _schedule(["delay"], opts)


# -- liveness: how long a restarted node stayed unavailable ----------------------------------


def _restart_history(second_kill_s: float, refusals: bool) -> list[dict[str, Any]]:
    """n4 killed at 2 s, restarted at 4 s, killed again at `second_kill_s`, restarted 2 s later;
    probes on n4 succeed at 1 s and 12 s only, one on n1 at 14 s ends the client ops. With
    `refusals`, probes sent to n4 at 4.5 s and 9 s fail (a node asked that does not serve)."""
    steps = [
        (1.0, "ok", 0, "probe", "n4", {}),
        (2.0, "info", "nemesis", "start-kill", None, {"nodes": ["n4"]}),
        (4.0, "info", "nemesis", "stop-kill", None, {"nodes": ["n4"]}),
        (second_kill_s, "info", "nemesis", "start-kill", None, {"nodes": ["n4"]}),
        (second_kill_s + 2, "info", "nemesis", "stop-kill", None, {"nodes": ["n4"]}),
        (12.0, "ok", 0, "probe", "n4", {}),
        (14.0, "ok", 1, "probe", "n1", {}),
    ]
    if refusals:
        steps += [
            (4.5, "invoke", 2, "probe", None, {}),
            (4.6, "fail", 2, "probe", "n4", {}),
            (9.0, "invoke", 3, "probe", None, {}),
            (9.5, "info", 3, "probe", "n4", {}),
        ]
    return [
        {"index": i, "time": int(t * 1e9), "type": typ, "process": p, "f": f, "node": n, "value": v}
        for i, (t, typ, p, f, n, v) in enumerate(sorted(steps, key=lambda x: x[0]))
    ]


@pytest.mark.parametrize(
    ("second_kill_s", "expected"),
    [
        # unavailable from 4 s until killed again at 8 s: at least 4 s, asked at 4.5 s; then
        # 10 s -> 12 s, not asked in between (the probe at 9 s went to the killed node)
        (8.0, [(4.0, 4.0, True, 1), (10.0, 2.0, False, 0)]),
        # killed again 1 s after the restart: too short to tell, left out; then 7 s -> 12 s
        (5.0, [(7.0, 5.0, False, 1)]),
    ],
)
@pytest.mark.parametrize("refusals", [True, False])
def test_unavailability_after_restart_keeps_a_cut_window_as_a_lower_bound(
    tmp_path: Path,
    second_kill_s: float,
    expected: list[tuple[float, float, bool, int]],
    refusals: bool,
) -> None:
    """A span after a restart counts for a detection only when the node was asked in it and
    did not serve; a control fails on any such span, asked or not."""
    import json

    events = _restart_history(second_kill_s, refusals)
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    results = {"stats": {"unavailability": [{"node": "n4", "from_s": 1.0, "to_s": 12.0}]}}
    restarts = detection.recovery_after_restart(tmp_path, results)
    got = [(r["restart_s"], r["unavailable_s"], r["at_least"], r["asked"]) for r in restarts]
    assert got == [(a, b, c, d if refusals else 0) for a, b, c, d in expected]
    first = expected[0][0] + 2.0 - 1.0  # from the first client op
    unasked = detection.unavailability_after_restart(tmp_path, restarts, asked=False)
    assert unasked == pytest.approx(first)
    asked = detection.unavailability_after_restart(tmp_path, restarts)
    assert asked == (pytest.approx(first) if refusals else None)


# -- the checker judges what the real runs showed it misjudging (false positives) -------------

MS = 1 << 16  # one millisecond of HLC


def _catalog() -> list[dict[str, Any]]:
    def table(name: str, sv: int, nullable: bool) -> dict[str, Any]:
        col = {"id": 1, "name": "c1", "type": "INT32", "nullable": nullable, "default": 5}
        return {name: {"id": 1, "schema_version": sv, "columns": [col], "indexes": []}}

    steps = [
        ("", {}),
        ("CREATE TABLE t1 (c1 INT32 DEFAULT 5)", table("t1", 1, True)),
        ("ALTER TABLE t1 RENAME TO t2", table("t2", 2, True)),
        ("ALTER TABLE t2 ALTER COLUMN c1 SET NOT NULL", table("t2", 3, False)),
    ]
    return [
        {
            "catalog_version": v + 1,
            "activation_ts": v * 1000 * MS,
            "safe_ts": max(0, v * 1000 - 500) * MS,
            "delay_ms": 500,
            "ddl": ddl,
            "tables": tables,
        }
        for v, (ddl, tables) in enumerate(steps)
    ]


def _history(stale_op_version: int, final_c1: int) -> list[dict[str, Any]]:
    """A null written into t1.c1; a txn that enlisted t1 and whose op after the RENAME to t2
    failed (the primary found the table, by id, at version 2); c1 then became NOT NULL, so
    the final read shows the default for the stored null."""
    w = {"op": "w", "table": "t1", "key": 1, "row": {"c1": None}}
    r = {"op": "r", "table": "t1", "key": 1}
    written = {
        "txn_id": "a",
        "begin_ts": 1100 * MS,
        "commit_ts": 1200 * MS,
        "tables": {"t1": {"base_ts": 1100 * MS, "schema_version": 1}},
        "ops": [{**w, "op_ts": 1150 * MS, "node": "n1", "schema_version": 1, "result": None}],
        "participants": [{"node": "n1", "table": "t1", "partition": 0, "commit_schema_version": 1}],
    }
    error = {"code": "INCOMPATIBLE_SCHEMA", "message": "t2 is at version 2", "retriable": True}
    crossed = {
        "txn_id": "b",
        "begin_ts": 1500 * MS,
        "commit_ts": None,
        "tables": {"t1": {"base_ts": 1500 * MS, "schema_version": 1}},
        "ops": [
            {**r, "op_ts": 1600 * MS, "node": "n1", "schema_version": 1, "result": {"c1": None}},
            {**r, "op_ts": 2500 * MS, "node": "n2", "schema_version": stale_op_version},
        ],
        "participants": [],
    }
    final = {"table": "t2", "ts": 4000 * MS, "schema_version": 3}
    rows = [{"key": 1, "row": {"c1": final_c1}}]
    events: list[dict[str, Any]] = [
        {"type": "invoke", "process": 0, "f": "txn", "value": {"ops": [w]}},
        {"type": "ok", "process": 0, "f": "txn", "node": "n1", "value": written},
        {"type": "invoke", "process": 1, "f": "txn", "value": {"ops": [r, r]}},
        {"type": "fail", "process": 1, "f": "txn", "node": "n2", "value": crossed, "error": error},
        {"type": "invoke", "process": 2, "f": "final-read", "value": {"table": "t2", "ts": None}},
        {
            "type": "ok",
            "process": 2,
            "f": "final-read",
            "node": "n1",
            "value": {**final, "rows": rows},
        },
    ]
    return [{"index": i, "time": (i + 1) * 10**9, **e} for i, e in enumerate(events)]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("stale_op_version", "final_c1", "fires"),
    [(2, 5, set()), (1, 5, {"ap-violation"}), (2, 7, {"lost-write"})],
)
def test_checker_follows_a_renamed_table_and_a_null_read_as_default(
    spark: Any,  # noqa: F811
    tmp_path: Path,
    stale_op_version: int,
    final_c1: int,
    fires: set[str],
) -> None:
    import json

    from checker.analyze import AnalyzeOptions, analyze_run

    shutil.copy(REPO / "tests/histories/common/run.json", tmp_path / "run.json")
    lines = {"catalog.jsonl": _catalog(), "history.jsonl": _history(stale_op_version, final_c1)}
    for name, rows in lines.items():
        (tmp_path / name).write_text("".join(json.dumps(x) + "\n" for x in rows))
    results = analyze_run(tmp_path, spark=spark, options=AnalyzeOptions(with_stats=False))
    assert results["errors"] == []
    assert {a["class"] for a in results["anomalies"]} == fires, results["anomalies"]


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.parametrize("toggles_on", [True, False], ids=["on", "off"])
def test_the_gate_sees_unavailability_as_the_matrix_does(
    matrix: dict[str, Any], toggles_on: bool
) -> None:
    """`run --gate` on the no-safe-time-recovery scenario (expect = ["unavailability"]) matches
    with the toggle on and misses it with the toggle off: the gate reads results.json's
    `stats.restarts`, the matrix its own reading of the history, and they agree."""
    import json

    from reports.expectation import judge

    label = "no-safe-time-recovery-" + ("on" if toggles_on else "off")
    if label not in matrix:
        pytest.skip(f"{label} not selected")
    outcome = matrix[label]
    results = json.loads((Path(outcome.run_dir) / "results.json").read_text())
    assert results["stats"]["restarts"], "the kill nemesis restarted no node"
    verdict = judge(results, ["unavailability"])
    if toggles_on:
        assert verdict.status == "matched", verdict.describe()
    else:
        assert verdict.missed == ("unavailability",), verdict.describe()
