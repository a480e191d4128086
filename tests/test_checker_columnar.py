"""The recorder's columnar copy: written while recording, read instead of the JSON when whole,
ignored (the JSONL read instead) when a killed controller left it without a footer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from checker import ingest
from checker.analyze import analyze_run
from checker.ingest import (
    COLUMNAR_SCHEMA,
    columnar_complete,
    ingest_history,
)
from contract.rundir import HISTORY_COLUMNAR, HISTORY_PARQUET
from synthetic import generate_run
from tests.spark_session import spark  # noqa: F401  (session fixture)
from workloads.history import HistoryRecorder, read_history


def replay(
    events: list[dict[str, Any]], dest: Path, close: bool = True, nulls: bool = False
) -> HistoryRecorder:
    """Record `events` again through the recorder's public API, at their own times; a null
    or absent value is recorded as {} unless `nulls`."""
    times: Iterator[int] = iter([0] + [int(e["time"]) for e in events])
    rec = HistoryRecorder(dest / "history.jsonl", clock_ns=lambda: next(times))
    for e in events:
        value: Any = e.get("value") if nulls else e.get("value") or {}
        p, f = e["process"], e["f"]
        if p == "nemesis":
            rec.nemesis(f, value)
        elif p == "monitor":
            rec.monitor(value)
        elif e["type"] == "invoke":
            rec.invoke(p, f, value)
        else:
            rec.complete(p, e["type"], f, value, e.get("node"), e.get("error"))
    if close:
        rec.close()
    return rec


def _recorded_run(tmp: Path, name: str, **synth: Any) -> Path:
    """A synthetic run whose history our recorder wrote (so it has the columnar copy)."""
    model = tmp / f"{name}-model"
    generate_run(model, **synth)
    run = tmp / name
    run.mkdir()
    for f in ("run.json", "catalog.jsonl"):
        shutil.copy(model / f, run / f)
    replay(read_history(model / "history.jsonl"), run)
    assert (run / "history.jsonl").read_bytes() == (model / "history.jsonl").read_bytes()
    return run


def _source(run: Path) -> str:
    return str(json.loads((run / HISTORY_PARQUET / "_source.json").read_text())["from"])


def _without_timing(results: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(results, default=str))
    out["stats"].pop("analysis_s", None)
    return out


@pytest.mark.spark
@pytest.mark.parametrize("fault", [None, "lost-write"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "rewritten"])
def test_the_copy_gives_the_verdict_the_jsonl_gives(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    fault: str | None,
    in_place: bool,
) -> None:
    """A small copy is read in place (no Parquet rewrite), a large one rewritten once; either
    gives the verdict the JSONL gives."""
    if not in_place:
        monkeypatch.setattr(ingest, "IN_PLACE_MAX_EVENTS", 10)
    run = _recorded_run(tmp_path, "run", seed=3, events=400, fault=fault)
    assert columnar_complete(run / HISTORY_COLUMNAR, (run / "history.jsonl").stat().st_size)
    as_json = tmp_path / "as-json"
    shutil.copytree(run, as_json)
    (as_json / HISTORY_COLUMNAR).unlink()

    from_copy = analyze_run(run, spark=spark)
    from_json = analyze_run(as_json, spark=spark)
    if in_place:
        assert not (run / HISTORY_PARQUET).exists()
        assert ingest_history(spark, run).source == HISTORY_COLUMNAR
    else:
        assert _source(run) == HISTORY_COLUMNAR
        assert ingest_history(spark, run).source == HISTORY_PARQUET
    assert _source(as_json) == "history.jsonl"
    assert from_copy["valid"] is (fault is None)
    assert _without_timing(from_copy) == _without_timing(from_json)


@pytest.mark.spark
def test_the_copy_has_the_schema_spark_reads(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    run = _recorded_run(tmp_path, "run", seed=4, events=200)
    read = spark.read.parquet(str(run / HISTORY_COLUMNAR)).schema
    assert read.simpleString() == COLUMNAR_SCHEMA.simpleString()
    assert pq.ParquetFile(run / HISTORY_COLUMNAR).metadata.num_rows == len(
        read_history(run / "history.jsonl")
    )


@pytest.mark.spark
def test_a_killed_controller_leaves_a_copy_the_checker_ignores(
    tmp_path: Path,
    spark: SparkSession,  # noqa: F811
) -> None:
    model = tmp_path / "model"
    generate_run(model, seed=5, events=200)
    events = read_history(model / "history.jsonl")
    run = tmp_path / "killed"
    run.mkdir()
    for f in ("run.json", "catalog.jsonl"):
        shutil.copy(model / f, run / f)
    # the controller "dies" before close(): no footer, so the copy is unreadable
    replay(events[: len(events) // 2], run, close=False)
    size = (run / "history.jsonl").stat().st_size
    assert not columnar_complete(run / HISTORY_COLUMNAR, size)
    results = analyze_run(run, spark=spark)
    assert _source(run) == "history.jsonl"
    assert results["valid"] == "unknown"
    assert any("without a completion" in e or "final read" in e for e in results["errors"])


def test_the_copy_is_complete_only_for_the_jsonl_it_was_written_with(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rec = HistoryRecorder(run / "history.jsonl")
    rec.invoke(0, "probe", {"table": "t1", "ts": None})
    rec.complete(0, "ok", "probe", {"ts": 5, "catalog_version": 1}, "n1")
    rec.close()
    copy, jsonl = run / HISTORY_COLUMNAR, run / "history.jsonl"
    assert columnar_complete(copy, jsonl.stat().st_size)
    with open(jsonl, "a") as f:  # an edited or appended history no longer matches its copy
        f.write("\n")
    assert not columnar_complete(copy, jsonl.stat().st_size)
    data = copy.read_bytes()
    copy.write_bytes(data[: len(data) // 2])  # a torn copy has no footer
    assert not columnar_complete(copy, len(data))


def test_an_event_the_typed_copy_cannot_hold_drops_the_copy(tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path / "history.jsonl")
    rec.invoke(0, "ddl", {"stmt": "CREATE TABLE t1", "table": "t1", "kind": "create_table"})
    # a catalog version that is not an integer: the JSON parse would null it and flag the line
    rec.complete(0, "ok", "ddl", {"catalog_version": "2", "activation_ts": 7}, "n1")
    rec.close()
    assert not (tmp_path / HISTORY_COLUMNAR).exists()
    assert len(read_history(tmp_path / "history.jsonl")) == 2
