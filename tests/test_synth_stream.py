"""The synthetic generator streams history.jsonl (events written once no earlier one can follow):
its output must be what buffering the whole run and sorting it once gives, and well ordered.
Its reads return the rows a snapshot read sees, and every such row fits the schema of its ts."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemasync.types import parse_type, value_problem
from synthetic import ClusterModel, generate_run

EVENTS = 4000


def _run(path: Path, fault: str | None) -> Path:
    generate_run(path, seed=42, events=EVENTS, fault=fault)
    return path


@pytest.mark.parametrize("fault", [None, "lost-ddl", "mixed-schema-commit", "lost-write"])
def test_streamed_run_equals_one_sort_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str | None
) -> None:
    streamed = _run(tmp_path / "streamed", fault)
    # Without settle() every event, commit and catalog version stays buffered until close():
    # one sort of the whole run, as before streaming.
    monkeypatch.setattr(ClusterModel, "settle", lambda self, floor: None)
    buffered = _run(tmp_path / "buffered", fault)
    for name in ("history.jsonl", "catalog.jsonl", "run.json"):
        assert (streamed / name).read_bytes() == (buffered / name).read_bytes(), name
    assert sorted(p.name for p in streamed.iterdir()) == [
        "catalog.jsonl",
        "history.jsonl",
        "run.json",
    ]


def test_streamed_history_is_ordered(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", None)
    events = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert len(events) > EVENTS - 200
    assert [e["index"] for e in events] == list(range(len(events)))
    times = [e["time"] for e in events]
    assert times == sorted(times)
    open_op: dict[int, str] = {}  # process -> f of its invoke without a completion yet
    retired: set[int] = set()  # processes whose op ended indeterminate (info): never reused
    for e in events:
        p = e["process"]
        if p == "nemesis":
            continue
        assert p not in retired, e
        if e["type"] == "invoke":
            assert p not in open_op, e
            open_op[p] = e["f"]
        else:
            assert open_op.pop(p, None) == e["f"], e
            if e["type"] == "info":
                retired.add(p)
    assert not open_op
    versions = [
        json.loads(line)["catalog_version"]
        for line in (run / "catalog.jsonl").read_text().splitlines()
    ]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) > 10


class _Catalog:
    """catalog.jsonl of a run: the table a name means at a timestamp (cat(ts), as the model)."""

    def __init__(self, run: Path) -> None:
        lines = [json.loads(x) for x in (run / "catalog.jsonl").read_text().splitlines()]
        self.acts = [x["activation_ts"] for x in lines]
        self.lines = lines

    def table(self, name: str, ts: int) -> dict[str, Any]:
        return self.lines[bisect.bisect_right(self.acts, ts) - 1]["tables"][name]


def _txns(run: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(invoke index, completion) of every txn, in invoke order: the order the model simulates
    txns in (begin time, then emission order)."""
    events = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    invoked: dict[int, int] = {}
    done = []
    for e in events:
        if e["f"] != "txn":
            continue
        if e["type"] == "invoke":
            invoked[e["process"]] = e["index"]
        else:
            done.append((invoked.pop(e["process"]), e))
    return iter(sorted(done, key=lambda d: d[0]))


def _upgrade(by_id: dict[int, Any], tbl: dict[str, Any]) -> dict[str, Any]:
    return {c["name"]: by_id.get(c["id"], c.get("default")) for c in tbl["columns"]}


def test_reads_see_the_last_write_committed_before_them(tmp_path: Path) -> None:
    """Reference: replay the history's writes. A read sees its txn's own last write of the key,
    else the one with the greatest (commit_ts, invoke) before op_ts among txns invoked before
    its own; an unknown-outcome (info) commit may or may not have applied."""
    run = tmp_path / "run"
    generate_run(run, seed=7, events=EVENTS)
    cat = _Catalog(run)
    # (table, key) -> committed versions (commit_ts, invoke, certain, values by id or None)
    versions: dict[tuple[str, int], list[tuple[int, int, bool, dict[int, Any] | None]]] = {}
    reads = with_row = own = 0  # reads that ran, returned a row, saw their own txn's write
    for invoke, ev in _txns(run):
        value = ev["value"]
        writes: dict[tuple[str, int], dict[int, Any] | None] = {}
        # An op that failed on a schema change is the txn's last and did not run.
        failed_op = ev.get("error", {}).get("code") in ("INCOMPATIBLE_SCHEMA", "TABLE_DROPPED")
        ran = value["ops"][:-1] if failed_op and value["commit_ts"] is None else value["ops"]
        for o in ran:
            k = (o["table"], o["key"])
            schema = cat.table(o["table"], value["tables"][o["table"]]["base_ts"])
            if o["op"] == "w":
                writes[k] = {
                    c["id"]: o["row"][c["name"]] for c in schema["columns"] if c["name"] in o["row"]
                }
            elif o["op"] == "d":
                writes[k] = None
            else:
                reads += 1
                if k in writes:
                    own += 1
                    allowed = [writes[k]]
                else:
                    allowed = []
                    for c_ts, _, certain, by_id in sorted(versions.get(k, []), reverse=True):
                        if c_ts >= o["op_ts"]:
                            continue
                        allowed.append(by_id)
                        if certain:
                            break
                    else:
                        allowed.append(None)
                want = [None if b is None else _upgrade(b, schema) for b in allowed]
                assert o["result"] in want, (ev["index"], o, want)
                with_row += o["result"] is not None
        if ev["type"] in ("ok", "info"):
            for k, by_id in writes.items():
                versions.setdefault(k, []).append(
                    (value["commit_ts"], invoke, ev["type"] == "ok", by_id)
                )
    assert reads > 500 and with_row > reads // 10 and own > 0, (reads, with_row, own)


def test_every_read_row_fits_the_schema_of_its_ts(tmp_path: Path) -> None:
    """What the checker's schema-conformance judges, in plain Python, over many DDLs."""
    run = tmp_path / "run"
    generate_run(run, seed=8, events=3 * EVENTS)
    cat = _Catalog(run)
    rows = 0
    for _, ev in _txns(run):
        for o in ev["value"]["ops"]:
            if o["op"] != "r" or o.get("result") is None:
                continue
            rows += 1
            tbl = cat.table(o["table"], o["op_ts"])
            assert tbl["schema_version"] == o["schema_version"], o
            cols = {c["name"]: c for c in tbl["columns"]}
            assert set(o["result"]) == set(cols), (o, tbl)
            for name, v in o["result"].items():
                c = cols[name]
                assert v is not None or c["nullable"], (o, c)
                assert value_problem(parse_type(c["type"]), v) is None, (o, c)
    assert rows > 1000
