"""A batch's histories are ingested together (one validation job, the small columnar copies
in one checkpoint): each run gets what it gets ingested alone, its events, count, tail and
source, or its contract violation, whatever the other runs of the batch hold."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from checker.analyze import analyze_run
from checker.catalog_index import RUN
from checker.contract import ContractError
from checker.ingest import (
    _first_problem_line,
    _only_bad_is_last,
    _partition_counts,
    ingest_histories,
    ingest_history,
)
from contract.rundir import HISTORY_COLUMNAR
from synthetic import generate_run
from tests.spark_session import spark  # noqa: F401  (session fixture)
from tests.test_checker_columnar import _recorded_run, replay
from workloads.history import read_history


def _jsonl_only(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    (dest / HISTORY_COLUMNAR).unlink()
    return dest


def _edit_lines(run: Path, edit: Callable[[list[str]], list[str]], newline: bool = True) -> Path:
    text = (run / "history.jsonl").read_text().splitlines()
    (run / "history.jsonl").write_text("\n".join(edit(text)) + ("\n" if newline else ""))
    return run


def _without(text: list[str], i: int) -> list[str]:
    return text[:i] + text[i + 1 :]


def _bad_f(text: list[str]) -> list[str]:
    """An op (its invoke and completion) whose f is no client operation, mid-history."""
    events = [json.loads(line) for line in text]
    done = next(
        n
        for n in range(len(events) // 2, len(events))
        if events[n]["type"] == "ok" and events[n]["process"] != "nemesis"
    )
    process = events[done]["process"]
    invoke = max(n for n in range(done) if events[n]["process"] == process)
    for n in (invoke, done):
        events[n]["f"] = "bogus"
    return [json.dumps(e) for e in events]


def _recorded_bad(tmp: Path, name: str) -> Path:
    """A recorded run (its columnar copy whole) with a line that breaks the contract."""
    model = tmp / f"{name}-model"
    generate_run(model, seed=6, events=300)
    _edit_lines(model, _bad_f)
    run = tmp / name
    run.mkdir()
    for f in ("run.json", "catalog.jsonl"):
        shutil.copy(model / f, run / f)
    replay(read_history(model / "history.jsonl"), run)
    return run


def _runs(tmp: Path) -> dict[str, Path]:
    """One of each way a history is read, and of each way it fails."""
    runs: dict[str, Path] = {}
    runs["in-place"] = _recorded_run(tmp, "in-place", seed=3, events=400)
    runs["in-place-fault"] = _recorded_run(tmp, "in-place-fault", seed=5, fault="lost-write")
    runs["in-place-bad"] = _recorded_bad(tmp, "in-place-bad")
    runs["jsonl"] = _jsonl_only(runs["in-place"], tmp / "jsonl")
    runs["cached"] = _jsonl_only(runs["in-place-fault"], tmp / "cached")  # analyzed first
    runs["torn"] = _edit_lines(
        _jsonl_only(runs["in-place"], tmp / "torn"),
        lambda t: [*t[:-1], t[-1][: len(t[-1]) // 2]],
        newline=False,
    )
    runs["gap-after-0"] = _edit_lines(_jsonl_only(runs["in-place"], tmp / "gap"), _drop_one)
    runs["out-of-order"] = _edit_lines(_jsonl_only(runs["in-place"], tmp / "swap"), _swap)
    runs["jsonl-bad"] = _jsonl_only(runs["in-place-bad"], tmp / "jsonl-bad")
    return runs


def _drop_one(text: list[str]) -> list[str]:
    """A gap in the indexes (allowed: they ascend) in the middle."""
    return _without(text, len(text) // 2)


def _swap(text: list[str]) -> list[str]:
    i = len(text) // 3
    return [*text[:i], text[i + 1], text[i], *text[i + 2 :]]


def _alone(spark: SparkSession, run: Path) -> Any:  # noqa: F811
    try:
        got = ingest_history(spark, run)
    except ContractError as e:
        return str(e)
    rows = sorted(tuple(r) for r in got.events.select(F.to_json(F.struct("*"))).collect())
    return (got.count, got.truncated_tail, got.source, rows)


@pytest.mark.spark
def test_each_run_of_a_batch_is_ingested_as_alone(tmp_path: Path, spark: SparkSession) -> None:  # noqa: F811
    runs = _runs(tmp_path / "models")
    analyze_run(runs["cached"], spark=spark)
    alone, together = tmp_path / "alone", tmp_path / "together"
    for name, run in runs.items():
        for where in (alone, together):
            shutil.copytree(run, where / name, symlinks=True)
    names = sorted(runs)
    expected = {name: _alone(spark, alone / name) for name in names}
    batch = ingest_histories(spark, {i: together / n for i, n in enumerate(names)})
    got: dict[str, Any] = {}
    for i, name in enumerate(names):
        if i in batch.failed:
            got[name] = str(batch.failed[i])
            continue
        assert batch.events is not None
        mine = batch.events.where(F.col(RUN) == i).drop(RUN)
        rows = sorted(tuple(r) for r in mine.select(F.to_json(F.struct("*"))).collect())
        v = batch.runs[i]
        got[name] = (v.count, v.truncated_tail, v.source, rows)
    assert got == expected
    # the batch holds what it should: reads of every kind, and failures of several
    assert {e[2] for e in expected.values() if isinstance(e, tuple)} == {
        "history.jsonl",
        HISTORY_COLUMNAR,
        "history.parquet",
    }
    assert expected["torn"][1] is True  # type: ignore[index]
    assert {n for n, e in expected.items() if isinstance(e, str)} == {
        "in-place-bad",
        "jsonl-bad",
        "out-of-order",
    }


@pytest.mark.spark
def test_a_run_after_another_in_a_shared_partition_is_numbered_from_its_own_first_line(
    spark: SparkSession,  # noqa: F811
) -> None:
    """The small copies of a batch share partitions: run 1's lines follow run 0's five in
    partition 0, and go on in partition 1. Its first problem (its third line) and its last
    line are found from its own first position in each partition, not the partition's."""
    lines: list[tuple[int, int, int, int, str | None]] = [(0, 0, p, p, None) for p in range(5)]
    lines += [(1, 0, 5 + i, i, "bad f" if i == 2 else None) for i in range(5)]
    lines += [(1, 1, i, 5 + i, None) for i in range(3)]
    lines += [(2, 1, 3, 0, None), (2, 1, 4, 1, None), (2, 1, 5, 2, "torn")]
    tagged = spark.createDataFrame(  # (run, _pid, _pos, index, _problem)
        lines, f"{RUN} long, _pid int, _pos long, index long, _problem string"
    )
    parts = _partition_counts(tagged)
    assert [int(p["first_pos"]) for p in parts[1]] == [5, 0]
    run1 = tagged.where(F.col(RUN) == 1)
    assert _first_problem_line(run1, parts[1]) == (3, "bad f")
    # a torn tail is the run's last line only: run 2's, after run 1's three in partition 1
    assert _only_bad_is_last(parts[2]) is True
    assert _only_bad_is_last(parts[1]) is False
