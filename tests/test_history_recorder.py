"""The history recorder: contract fields, pairing, thread safety, a valid prefix after a kill."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from contract.history_shape import json_schema
from workloads.history import HistoryError, HistoryRecorder, read_history

REPO = Path(__file__).resolve().parents[1]
REQUIRED = ("index", "time", "type", "process", "f")


@functools.cache
def event_validator() -> jsonschema.protocols.Validator:
    """The checker's JSON Schema of events (one source of truth for the contract)."""
    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check_contract(events: list[dict], schema_every: int = 1) -> None:
    """history.md rules a recorder must never break: fields, index order, pairing, no reuse.
    The JSON Schema check (slow) runs on every `schema_every`-th event."""
    validator = event_validator()
    open_ops: dict[int, str] = {}
    crashed: set[int] = set()
    last_time = -1
    for i, e in enumerate(events):
        if i % schema_every == 0:
            validator.validate(e)
        for k in REQUIRED:
            assert k in e, f"event {i} lacks {k}"
        assert e["index"] == i
        assert e["time"] >= last_time
        last_time = e["time"]
        if e["process"] in ("nemesis", "monitor"):  # they open and close no operation
            assert e["type"] == "info"
            continue
        p = e["process"]
        if e["type"] == "invoke":
            assert p not in open_ops, f"process {p} invoked twice"
            assert p not in crashed, f"process {p} reused after info"
            open_ops[p] = e["f"]
        else:
            assert open_ops.pop(p) == e["f"]
            assert "node" in e
            if e["type"] in ("fail", "info"):
                assert set(e["error"]) >= {"code", "message", "retriable"}
            if e["type"] == "info":
                crashed.add(p)


def test_events_carry_the_contract_fields(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rec = HistoryRecorder(path)
    ddl = {"stmt": "CREATE TABLE t1 (c1 INT64)", "table": "t1", "kind": "create_table"}
    rec.invoke(0, "ddl", ddl)
    rec.invoke(1, "probe", {"table": None, "ts": None})
    # Visible on disk before close: written as it happens.
    assert len(read_history(path)) == 2
    rec.complete(0, "ok", "ddl", {**ddl, "catalog_version": 2, "activation_ts": 5 << 16}, "n1")
    rec.nemesis("start-partition", {"shape": "halves"})
    error = {"code": "TIMEOUT", "message": "slow", "retriable": True}
    rec.complete(1, "info", "probe", {"table": None, "ts": None}, "n2", error)
    rec.invoke(6, "txn", {"ops": [{"op": "r", "table": "t1", "key": 3}]})
    rec.complete(6, "fail", "txn", None, "n3", {"code": "TABLE_DROPPED", "message": "gone"})
    rec.close()
    events = read_history(path)
    check_contract(events)
    assert [e["type"] for e in events] == [
        "invoke",
        "invoke",
        "ok",
        "info",
        "info",
        "invoke",
        "fail",
    ]
    assert events[2]["value"]["activation_ts"] == 5 << 16
    assert events[4]["node"] == "n2" and events[4]["error"]["code"] == "TIMEOUT"
    assert events[6]["error"] == {"code": "TABLE_DROPPED", "message": "gone", "retriable": False}
    assert events[3] == {**events[3], "process": "nemesis", "type": "info", "f": "start-partition"}
    assert rec.max_ts == 5 << 16 and rec.max_process == 6


def test_pairing_and_reuse_after_info_are_refused(tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    with pytest.raises(HistoryError, match="without an invoke"):
        rec.complete(3, "ok", "txn", {}, "n1")
    rec.invoke(3, "txn", {"ops": []})
    with pytest.raises(HistoryError, match="open"):
        rec.invoke(3, "txn", {"ops": []})
    with pytest.raises(HistoryError, match="invoked txn"):
        rec.complete(3, "ok", "probe", {}, "n1")
    with pytest.raises(HistoryError, match="needs an error"):
        rec.complete(3, "info", "txn", {}, "n1")
    rec.complete(3, "info", "txn", {}, "n1", {"code": "TIMEOUT", "message": "", "retriable": True})
    with pytest.raises(HistoryError, match="may not invoke again"):
        rec.invoke(3, "probe", {"table": None, "ts": None})
    rec.close()
    with pytest.raises(HistoryError, match="closed"):
        rec.nemesis("heal-all", {})
    check_contract(read_history(tmp_path / "h.jsonl"))


def test_an_existing_history_is_never_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"index": 0}\n')
    with pytest.raises(HistoryError, match="already holds events"):
        HistoryRecorder(path)


def test_many_threads_get_one_gap_free_index_order(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rec = HistoryRecorder(path)
    per_thread = 300

    def client(p: int) -> None:
        for i in range(per_thread):
            rec.invoke(p, "probe", {"table": "t1", "ts": None})
            value = {
                "ts": i + 1,
                "catalog_version": 1,
                "table_schema_version": None,
                "columns": None,
            }
            rec.complete(p, "ok", "probe", value, "n1")

    def nemesis() -> None:
        for i in range(200):
            rec.nemesis("start-clock" if i % 2 == 0 else "stop-clock", {"offsets": {"n1": 0.1}})

    threads = [threading.Thread(target=client, args=(p,)) for p in range(8)]
    threads.append(threading.Thread(target=nemesis))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    events = read_history(path)
    assert len(events) == 8 * per_thread * 2 + 200
    check_contract(events, schema_every=25)


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from workloads.history import HistoryRecorder
    rec = HistoryRecorder(Path(sys.argv[1]))
    big = "x" * 20000  # events far larger than a pipe or stdio buffer
    p = 0
    print("started", flush=True)
    while True:
        rec.invoke(p, "txn", {"ops": [{"op": "w", "table": "t1", "key": p, "row": {"c1": big}}]})
        if p % 3 == 0:
            rec.complete(p, "info", "txn", None, "n1",
                         {"code": "TIMEOUT", "message": "slow", "retriable": True})
            p += 4
        else:
            rec.complete(p, "ok", "txn", {"ops": [], "txn_id": "x", "begin_ts": 1,
                         "commit_ts": 2, "tables": {}, "participants": []}, "n1")
        rec.nemesis("start-kill", {"nodes": ["n2"]})
    """
)


def test_sigkill_mid_run_leaves_a_history_whose_every_line_parses(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], env=env, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"started"
        deadline = time.monotonic() + 10
        while (
            not path.exists() or path.stat().st_size < 2_000_000
        ) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    raw = path.read_bytes()
    *lines, tail = raw.split(b"\n")
    # Every line parses. A write(2) that SIGKILL interrupts between pages may leave the last
    # event without its newline (Linux stops a write at a page boundary for a fatal signal):
    # that fragment is not a line, and readers (read_history, the checker) leave it out.
    events = [json.loads(line) for line in lines]
    assert len(events) > 50
    assert b"\n" not in tail and len(tail) < len(raw)
    assert read_history(path) == events
    check_contract(events, schema_every=10)
