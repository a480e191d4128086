"""The detection matrix, once: each bug toggle's scenario produces its anomaly class, and the
baseline (every nemesis, every toggle off) is valid.

Real docker clusters with short time limits; the cluster parts run three at a time in worker
processes, and every run is analyzed in the test session's one Spark session. The matrix and
its judgment are `benchmarks/detection.py` (the benchmark runs it over seeds, with controls).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import docker_available, require
from tests.spark_session import spark  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parent.parent
PARALLEL = 3
# seconds of workload per case: enough for the scenario's first fault to start and end, and
# for its anomaly to be witnessed well inside the median measured by the benchmark
TIME_LIMIT_S: dict[str, float] = {
    "no-safe-time-recovery": 15.0,
    "mutable-delay": 14.0,
    "local-schema-at-commit": 14.0,
    "no-safe-time-wait": 12.0,
    "synctime-reorder": 14.0,
    "baseline": 20.0,
}
DEFAULT_TIME_LIMIT_S = 12.0
# toggles whose anomaly a short run does not provoke reliably: the run must still be clean of
# anything else (no false positive beside the rare true one). hlc-no-round-up's window is under
# one millisecond after the clock furthest ahead enters the acknowledging millisecond, shorter
# than the controller's fastest ack-to-probe round trip (see scenarios/hlc-no-round-up.toml).
RARE = {"hlc-no-round-up"}
# toggles whose anomaly is a race a short run provokes most of the time, not always: a run that
# did not provoke it is followed by runs on the next seeds, up to this many runs in all. The
# final index reads catch skip-index-states only when an index that lasts to the end was raced
# by a txn begun before it existed: 3 of 4 seeds at 12 s alone (2026-11-24; a miss dropped its
# newest indexes before the end), fewer beside the rest of the matrix (seeds 1-3 all missed
# once in the full suite), so up to five runs.
RACY: dict[str, int] = {"skip-index-states": 5}


def _detection() -> Any:
    spec = importlib.util.spec_from_file_location("detection", REPO / "benchmarks/detection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("detection", module)
    spec.loader.exec_module(module)
    return module


detection = _detection()
CASES = [*detection.MATRIX, "baseline"]


def _selected_cases(request: pytest.FixtureRequest) -> set[str]:
    """The case names the session will run (`-k` may pick a few): only those are provisioned."""
    names = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "originalname", None) == "test_detection" and callspec is not None:
            names.add(str(callspec.params["name"]))
    return names


@pytest.fixture(scope="module")
def matrix(
    spark: Any,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Any]]:
    """Every selected case run and analyzed once for the whole module: name -> Outcome."""
    require(docker_available(), "no Docker engine answers")
    require(shutil.which("java") is not None, "Spark needs a Java runtime")
    store = tmp_path_factory.mktemp("detection-store")
    selected = _selected_cases(request)
    todo = [
        replace(c, time_limit_s=TIME_LIMIT_S.get(c.name, DEFAULT_TIME_LIMIT_S))
        for c in detection.cases(list(detection.MATRIX), [1], controls=False, baseline=True)
        if c.name in selected
    ]
    todo.sort(key=lambda c: -c.time_limit_s)  # the long ones first: they bound the wall time
    outcomes = detection.run_matrix(todo, store, None, PARALLEL, spark=spark)
    yield {o.case.name: o for o in outcomes}


def _found(outcome: Any) -> bool:
    # any class the toggle is listed with counts (skip-index-states leaves a missing entry
    # or an orphan depending on which writer raced the index, both are its anomaly)
    return bool(outcome.detected or set(outcome.classes) & set(outcome.case.expect))


def _retry_racy(outcome: Any, session: Any, store: Path) -> Any:
    """The first outcome that found the race, over the next seeds (RACY), else the last."""
    for seed in range(outcome.case.seed + 1, outcome.case.seed + RACY.get(outcome.case.name, 1)):
        if _found(outcome) or outcome.valid == "unknown":
            break
        retry = replace(outcome.case, seed=seed)
        (outcome,) = detection.run_matrix([retry], store, None, 1, spark=session)
    return outcome


@pytest.mark.docker
@pytest.mark.spark
@pytest.mark.timeout(1500)  # the first case also pays for the whole matrix (module fixture)
@pytest.mark.parametrize("name", CASES)
def test_detection(
    matrix: dict[str, Any],
    name: str,
    spark: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    outcome = _retry_racy(matrix[name], spark, tmp_path)
    where = f"(valid={outcome.valid}, errors={outcome.errors}): {outcome.run_dir}"
    if name == "baseline":
        assert outcome.valid is True, (
            f"baseline under every nemesis found {outcome.classes} {where}"
        )
        return
    assert outcome.valid != "unknown", f"{name}: the run was incomplete {where}"
    if name in RARE:
        # not provoked reliably (see docs/anomalies.md): what it may produce is only its class
        assert set(outcome.classes) <= set(outcome.case.expect), (
            f"{name}: {outcome.classes} {where}"
        )
        return
    assert _found(outcome), (
        f"{name}: expected one of {outcome.case.expect}, found {outcome.classes or 'nothing'} "
        f"{where}"
    )


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


def _restart_history(second_kill_s: float) -> list[dict[str, Any]]:
    """n4 killed at 2 s, restarted at 4 s, killed again at `second_kill_s`, restarted 2 s later;
    probes on n4 succeed at 1 s and 12 s only, one on n1 at 14 s ends the client ops."""
    steps = [
        (1.0, "ok", 0, "probe", "n4", {}),
        (2.0, "info", "nemesis", "start-kill", None, {"nodes": ["n4"]}),
        (4.0, "info", "nemesis", "stop-kill", None, {"nodes": ["n4"]}),
        (second_kill_s, "info", "nemesis", "start-kill", None, {"nodes": ["n4"]}),
        (second_kill_s + 2, "info", "nemesis", "stop-kill", None, {"nodes": ["n4"]}),
        (12.0, "ok", 0, "probe", "n4", {}),
        (14.0, "ok", 1, "probe", "n1", {}),
    ]
    return [
        {"index": i, "time": int(t * 1e9), "type": typ, "process": p, "f": f, "node": n, "value": v}
        for i, (t, typ, p, f, n, v) in enumerate(sorted(steps, key=lambda x: x[0]))
    ]


@pytest.mark.parametrize(
    ("second_kill_s", "expected"),
    [
        # unavailable from 4 s until killed again at 8 s: at least 4 s; then 10 s -> 12 s
        (8.0, [(4.0, 4.0, True), (10.0, 2.0, False)]),
        # killed again 1 s after the restart: too short to tell, left out
        (5.0, [(7.0, 5.0, False)]),
    ],
)
def test_unavailability_after_restart_keeps_a_cut_window_as_a_lower_bound(
    tmp_path: Path, second_kill_s: float, expected: list[tuple[float, float, bool]]
) -> None:
    import json

    events = _restart_history(second_kill_s)
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    results = {"stats": {"unavailability": [{"node": "n4", "from_s": 1.0, "to_s": 12.0}]}}
    restarts = detection.recovery_after_restart(tmp_path, results)
    got = [(r["restart_s"], r["unavailable_s"], r["at_least"]) for r in restarts]
    assert got == expected
    first = detection.unavailability_after_restart(tmp_path, restarts)
    assert first == pytest.approx(expected[0][0] + 2.0 - 1.0)  # from the first client op


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
