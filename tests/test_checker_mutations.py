"""The analyzer never crashes on a run directory: valid histories and catalogs mutated within the
contract (and a few steps outside it) always get a verdict, exit 0, 1 or 2, never 255.

MUTATION_EXAMPLES sets how many mutated run directories are judged (40 in `make test`, where the
suite must stay under 45 minutes; set it higher for a longer search, as before a release). They
are judged MUTATIONS_PER_BATCH at a time in one `analyze`, as a night of runs is: one real
analysis a batch on the session's one Spark session (a lone run each took 2.6-3 s here, 4.6 s
on CI's machine). A crash anywhere fails the batch, and Hypothesis shrinks each run's
mutations (a batch keeps its size). Hypothesis tries the unmutated runs first: one batch more
than the examples ask for."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from checker.analyze import AnalyzeOptions, analyze_runs, exit_code
from tests.runbuilder import common_catalog, complete_events, hlc, write_run
from tests.spark_session import spark  # noqa: F401  (session fixture)

EXAMPLES = int(os.environ.get("MUTATION_EXAMPLES", "40"))
MUTATIONS_PER_BATCH = 10
BATCHES = max(1, -(-EXAMPLES // MUTATIONS_PER_BATCH)) + 1
OPTIONS = AnalyzeOptions(with_stats=True)
HUGE = (1 << 70) + 3
NAMES = st.sampled_from(["t1", "τ表", "t 1", "", "t1\u0000x", "DROP TABLE t1; --"])
INTS = st.sampled_from([0, 1, -1, 4, 5, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), HUGE, -HUGE])


def _events_ops(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The micro-ops of `events`, skipping what an earlier mutation made of them (an optional
    process's `{"ops": 5}` is no list)."""
    ops = [(e.get("value") or {}).get("ops") for e in events]
    return [o for each in ops if isinstance(each, list) for o in each if isinstance(o, dict)]


@st.composite
def catalog_mutation(draw: st.DrawFn, catalog: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(catalog)
    kind = draw(
        st.sampled_from(
            ["none", "shuffle_activation", "duplicate", "skip", "empty_tables", "rename", "ts"]
        )
    )
    if kind == "shuffle_activation":
        acts = [c["activation_ts"] for c in out]
        order = draw(st.permutations(acts))
        for c, a in zip(out, order, strict=True):
            c["activation_ts"] = a
    elif kind == "duplicate":
        i = draw(st.integers(0, len(out) - 1))
        out.insert(i, copy.deepcopy(out[i]))
    elif kind == "skip" and len(out) > 1:
        del out[draw(st.integers(1, len(out) - 1))]
    elif kind == "empty_tables":
        out[-1]["tables"] = {}
    elif kind == "rename":
        name = draw(NAMES)
        for c in out:
            if "t1" in c["tables"]:
                c["tables"][name] = c["tables"].pop("t1")
    elif kind == "ts":
        out[draw(st.integers(0, len(out) - 1))]["activation_ts"] = draw(
            st.sampled_from([0, 2**63 - 1, hlc(4100), hlc(4100, 1), HUGE, -(2**63), 1e308])
        )
    return out


def _set_path(event: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    target: Any = event
    for p in path[:-1]:
        target = target.get(p) if isinstance(target, dict) else None
        if target is None:
            return
    if isinstance(target, dict):
        target[path[-1]] = value


@st.composite
def history_mutation(draw: st.DrawFn, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(events)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(
            st.sampled_from(
                [
                    "cut",
                    "drop",
                    "empty",
                    "single",
                    "optional_process",
                    "nulls",
                    "huge",
                    "unicode",
                    "duplicate_completion",
                    "fail_completion",
                    "values",
                ]
            )
        )
        if kind == "cut" and out:
            out = out[: draw(st.integers(0, len(out)))]
        elif kind == "drop" and out:
            del out[draw(st.integers(0, len(out) - 1))]
        elif kind == "empty":
            out = []
        elif kind == "single" and out:
            out = [out[draw(st.integers(0, len(out) - 1))]]
        elif kind == "optional_process":
            at = draw(st.integers(0, len(out)))
            # (a client operation's f from one of them is outside the contract: malformed)
            f = draw(st.sampled_from(["sample", "anything", "start-anything"]))
            value = draw(st.sampled_from([None, {}, {"n1": {"x": 1}}, {"ops": 5}]))
            proc = draw(st.sampled_from(["monitor", "observer", "ñ"]))
            out.insert(at, {"type": "info", "process": proc, "f": f, "value": value})
        elif kind == "nulls" and out:
            e = out[draw(st.integers(0, len(out) - 1))]
            path = draw(
                st.sampled_from(
                    [
                        ("value", "table"),
                        ("value", "ts"),
                        ("value", "commit_ts"),
                        ("value", "txn_id"),
                        ("value", "table_schema_version"),
                        ("value", "columns"),
                        ("node",),
                        ("value",),
                    ]
                )
            )
            _set_path(e, path, None)
        elif kind == "huge" and out:
            e = out[draw(st.integers(0, len(out) - 1))]
            path = draw(
                st.sampled_from(
                    [
                        ("value", "ts"),
                        ("value", "catalog_version"),
                        ("value", "commit_ts"),
                        ("value", "begin_ts"),
                        ("value", "activation_ts"),
                        ("time",),
                        ("index",),
                    ]
                )
            )
            _set_path(e, path, draw(INTS))
            for o in _events_ops([e]):
                o["key"] = draw(INTS)
                if "row" in o and isinstance(o["row"], dict):
                    o["row"]["c1"] = draw(INTS)
        elif kind == "unicode" and out:
            name = draw(NAMES)
            for e in out:
                v = e.get("value")
                if isinstance(v, dict) and v.get("table") == "t1":
                    v["table"] = name
                for o in _events_ops([e]):
                    o["table"] = name
            node = draw(st.sampled_from(["ν1", "", "n1 n2"]))
            for e in out:
                if e.get("node") == "n1":
                    e["node"] = node
        elif kind == "duplicate_completion" and out:
            i = draw(st.integers(0, len(out) - 1))
            out.insert(i + 1, copy.deepcopy(out[i]))
        elif kind == "fail_completion" and out:
            i = draw(st.integers(0, len(out) - 1))
            if out[i]["type"] in ("ok", "info") and isinstance(out[i]["process"], int):
                out[i]["type"] = draw(st.sampled_from(["fail", "info"]))
                out[i]["error"] = {"code": draw(NAMES), "message": "m", "retriable": False}
        elif kind == "values" and out:
            e = out[draw(st.integers(0, len(out) - 1))]
            for o in _events_ops([e]):
                if isinstance(o.get("row"), dict):
                    o["row"] = draw(
                        st.sampled_from(
                            [{}, {"c1": None}, {"c1": "x", "c9": [1]}, {"c2": "toolong"}]
                        )
                    )
            v = e.get("value")
            if isinstance(v, dict) and "rows" in v:
                v["rows"] = draw(
                    st.sampled_from(
                        [[], [{"key": 1, "row": {}}], [{"key": HUGE, "row": {"c1": 1.5}}]]
                    )
                )
    return out


@st.composite
def mutated_run(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """A mutated catalog and history of the common run, and its clock."""
    catalog = draw(catalog_mutation(common_catalog()), label="catalog")
    events = draw(history_mutation(complete_events()), label="history")
    return catalog, events, draw(st.sampled_from(["hlc", "none"]), label="clock")


@pytest.mark.spark
@pytest.mark.timeout(max(600, EXAMPLES * 20))  # real analyses, 2-5 s a run alone
@settings(
    max_examples=BATCHES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(runs=st.lists(mutated_run(), min_size=MUTATIONS_PER_BATCH, max_size=MUTATIONS_PER_BATCH))
def test_any_mutated_run_directory_gets_a_verdict(
    spark: SparkSession,  # noqa: F811
    runs: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]],
) -> None:
    base = json.loads((Path(__file__).parent / "histories/common/run.json").read_text())
    with tempfile.TemporaryDirectory(prefix="mutated-") as tmp:
        dirs = [
            write_run(Path(tmp) / f"run-{i}", events, catalog=catalog, run={**base, "clock": clock})
            for i, (catalog, events, clock) in enumerate(runs)
        ]
        judged = analyze_runs(dirs, spark=spark, options=OPTIONS)
    assert len(judged) == len(runs)
    for (catalog, events, _), results in zip(runs, judged, strict=True):
        assert exit_code(results) in (0, 1, 2)
        assert results["valid"] in (True, False, "unknown")
        if results["valid"] is True and _written_tables_at_the_end(events, catalog):
            # validity needs the complete history's final reads and every invoke completed (a
            # written table dropped by the end cannot be read, and needs none)
            assert any(e.get("f") == "final-read" for e in events)
        if results["valid"] == "unknown":
            assert results["errors"], "an unknown verdict says why"


def _written_tables_at_the_end(events: list[Any], catalog: list[Any]) -> bool:
    """Whether a table some ok txn wrote (by the ids its name ever had) is in the catalog's
    newest version: only then does a complete history hold a final read."""
    lines = [c for c in catalog if isinstance(c, dict) and isinstance(c.get("tables"), dict)]
    ids: dict[str, set[Any]] = {}
    for line in lines:
        for name, t in line["tables"].items():
            if isinstance(t, dict):
                ids.setdefault(name, set()).add(t.get("id"))
    written: set[Any] = set()
    for e in events:
        value = e.get("value") if isinstance(e, dict) else None
        ops = value.get("ops") if isinstance(value, dict) else None
        if e.get("f") == "txn" and e.get("type") == "ok" and isinstance(ops, list):
            for op in ops:
                if isinstance(op, dict) and op.get("op") in ("w", "d"):
                    written |= ids.get(str(op.get("table")), set())

    def version(c: dict[str, Any]) -> int:
        v = c.get("catalog_version")
        return v if isinstance(v, int) else 0

    newest = max(lines, key=version, default=None)
    at_end = newest["tables"].values() if newest else ()
    return any(isinstance(t, dict) and t.get("id") in written for t in at_end)
