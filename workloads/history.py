"""The history recorder: every client and nemesis event, one JSON line each, as it happens.

The history is the single interface between running and checking (shared/spec/history.md), so
the recorder is the one writer of `history.jsonl`: it assigns `index` and `time`, writes every
event at once with one write(2) (a SIGKILLed controller leaves a readable prefix), and a
background thread fsyncs it at most every ~100 ms (a simulation, whose run its seed replays
exactly, fsyncs only at close: on this kind of disk an append waits for an fsync in progress).
Beside it the same thread writes a columnar copy (`history.columnar.parquet`, row groups as the
events come), so the checker of our own runs never parses JSON; the copy is complete only after
close() writes its footer (with the event count and the JSONL's size), and it is dropped, never
half-right, if an event does not fit its typed schema (the checker then reads the JSONL).
It also enforces Jepsen's process rules, so a broken workload fails loudly instead of writing a
history the checker would reject: one outstanding op per process, a completion only after an
invoke, and no invoke from a process whose last op ended in `info`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from contract.history_shape import arrow_schema
from contract.rundir import COLUMNAR_SUFFIX

CLIENT_COMPLETIONS = ("ok", "fail", "info")
FSYNC_INTERVAL_NS = 100_000_000
_TS_FIELDS = ("activation_ts", "commit_ts", "begin_ts", "op_ts", "ts")
# footer keys the checker compares with history.jsonl before trusting the copy
META_EVENTS = b"schemachaos.events"
META_JSONL_BYTES = b"schemachaos.jsonl_bytes"
# The typed event the checker reads (its Spark schema is derived from this one), from the
# one statement of the event's shape: polymorphic fields are their JSON text.
COLUMNAR_SCHEMA = arrow_schema()


class HistoryError(RuntimeError):
    """An event that would break the history contract (pairing, reuse after info, closed)."""


class HistoryRecorder:
    """Append-only, thread-safe writer of `history.jsonl`; time 0 is `start_monotonic_ns`."""

    def __init__(
        self,
        path: Path,
        start_monotonic_ns: int | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        columnar: bool = True,
        fsync_while_running: bool = True,
    ) -> None:
        self.path = Path(path)
        # `clock_ns` is the monotonic clock of event times: a simulation passes its virtual one
        self._clock_ns = clock_ns
        self.start_monotonic_ns = clock_ns() if start_monotonic_ns is None else start_monotonic_ns
        self._lock = threading.Lock()
        if self.path.exists() and self.path.stat().st_size > 0:
            raise HistoryError(f"{self.path} already holds events; a run writes a fresh history")
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.columnar_path = self.path.with_name(self.path.stem + COLUMNAR_SUFFIX)
        self._columnar: _ColumnarCopy | None = (
            _ColumnarCopy(self.columnar_path) if columnar else None
        )
        self._pending: list[dict[str, Any]] = []
        self._index = 0
        self._dirty = False
        self._fsync_while_running = fsync_while_running
        self._stop_sync = threading.Event()
        self._syncer = threading.Thread(target=self._sync_loop, name="history-fsync", daemon=True)
        self._syncer.start()
        self._open: dict[int, str] = {}  # process -> f of its outstanding invoke
        self._crashed: set[int] = set()
        self._max_process = -1
        self._max_ts = 0
        self._closed = False

    # -- what callers may ask ------------------------------------------------------------
    @property
    def events_written(self) -> int:
        return self._index

    @property
    def max_process(self) -> int:
        """Greatest client process id used so far (-1 before any)."""
        return self._max_process

    @property
    def max_ts(self) -> int:
        """Greatest HLC timestamp seen in an `ok` completion (activation, commit, op, probe)."""
        return self._max_ts

    def outstanding(self) -> dict[int, str]:
        """Processes with an invoke and no completion yet, and their `f`."""
        with self._lock:
            return dict(self._open)

    def elapsed_ns(self) -> int:
        return self._clock_ns() - self.start_monotonic_ns

    # -- events --------------------------------------------------------------------------
    def invoke(self, process: int, f: str, value: dict) -> dict:
        """Record that `process` starts op `f`; returns the event written."""
        with self._lock:
            if process in self._open:
                raise HistoryError(f"process {process} invoked {f} with {self._open[process]} open")
            if process in self._crashed:
                raise HistoryError(f"process {process} ended in info and may not invoke again")
            self._open[process] = f
            self._max_process = max(self._max_process, process)
            event: dict[str, Any] = {"type": "invoke", "process": process, "f": f, "value": value}
            return self._write(event)

    def complete(
        self,
        process: int,
        type: str,
        f: str,
        value: dict | None,
        node: str | None,
        error: dict | None = None,
    ) -> dict:
        """Record the outcome (`ok`, `fail` or `info`) of `process`'s outstanding op."""
        if type not in CLIENT_COMPLETIONS:
            raise HistoryError(f"completion type must be one of {CLIENT_COMPLETIONS}, got {type!r}")
        if type != "ok" and error is None:
            raise HistoryError(f"a {type} completion needs an error")
        with self._lock:
            open_f = self._open.get(process)
            if open_f is None:
                raise HistoryError(f"process {process} completes {f} without an invoke")
            if open_f != f:
                raise HistoryError(f"process {process} completes {f} but invoked {open_f}")
            del self._open[process]
            if type == "info":
                self._crashed.add(process)
            event: dict[str, Any] = {"type": type, "process": process, "f": f, "node": node}
            event["value"] = value if value is not None else {}
            if error is not None:
                event["error"] = _error_fields(error)
            if type == "ok" and value:
                self._note_ts(value)
            return self._write(event)

    def nemesis(self, f: str, value: dict) -> dict:
        """Record a nemesis action (start, stop, heal, measured clocks) as an `info` event."""
        with self._lock:
            return self._write({"type": "info", "process": "nemesis", "f": f, "value": value})

    def monitor(self, value: dict) -> dict:
        """Record one monitor sample (history.md): `{node: {...}}` read from the nodes at one
        moment. It opens and closes no operation."""
        with self._lock:
            return self._write(
                {"type": "info", "process": "monitor", "f": "sample", "value": value}
            )

    def close(self) -> None:
        """Flush and fsync what is written; later events raise HistoryError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop_sync.set()
        self._syncer.join()
        os.fsync(self._fd)
        os.close(self._fd)
        if self._columnar is not None:
            self._columnar.append(self._pending)
            self._pending = []
            self._columnar.finish(self._index, self.path.stat().st_size)

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (called with the lock held) ---------------------------------------------
    def _write(self, fields: dict[str, Any]) -> dict:
        if self._closed:
            raise HistoryError(f"history {self.path} is closed")
        now = self._clock_ns()
        event = {"index": self._index, "time": now - self.start_monotonic_ns, **fields}
        line = _encode_line(event) + "\n"
        data = line.encode("utf-8")
        # One write(2) per event on an O_APPEND descriptor: the line reaches the kernel whole,
        # so a SIGKILL of the controller can only lose whole events, never tear one.
        written = os.write(self._fd, data)
        while written < len(data):
            written += os.write(self._fd, data[written:])
        self._index += 1
        self._dirty = True
        if self._columnar is not None:
            self._pending.append(event)
        return event

    def _sync_loop(self) -> None:
        """fsync at most every FSYNC_INTERVAL_NS, off the writers' path: a slow disk must not
        stall the event loop that records client ops."""
        while not self._stop_sync.wait(FSYNC_INTERVAL_NS / 1e9):
            if self._dirty and self._fsync_while_running:
                self._dirty = False
                try:
                    os.fsync(self._fd)
                except OSError:
                    return  # closed under us: close() does the last fsync
            if self._columnar is not None and len(self._pending) >= _ROW_GROUP_EVENTS:
                with self._lock:  # swap the buffer; the encoding happens outside the lock
                    batch, self._pending = self._pending, []
                self._columnar.append(batch)

    def _note_ts(self, value: dict) -> None:
        for name in _TS_FIELDS:
            ts = value.get(name)
            if isinstance(ts, int) and not isinstance(ts, bool) and ts > self._max_ts:
                self._max_ts = ts
        for op in value.get("ops") or ():
            ts = op.get("op_ts") if isinstance(op, dict) else None
            if isinstance(ts, int) and ts > self._max_ts:
                self._max_ts = ts


_ROW_GROUP_EVENTS = 4096


class _Unfit(ValueError):
    """An event field that the typed columnar copy cannot hold as the checker would read it."""


class _ColumnarCopy:
    """The Parquet copy of the history, written by the fsync thread (and close) only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists():
            path.unlink()  # a stale copy of an earlier run in this directory
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            path, COLUMNAR_SCHEMA, compression="zstd"
        )

    def append(self, events: list[dict[str, Any]]) -> None:
        if self._writer is None or not events:
            return
        try:
            rows = [_columnar_row(e) for e in events]
            self._writer.write_table(pa.Table.from_pylist(rows, COLUMNAR_SCHEMA))
        except (_Unfit, pa.ArrowException, TypeError, ValueError, OverflowError):
            self._drop()

    def finish(self, events: int, jsonl_bytes: int) -> None:
        if self._writer is None:
            return
        self._writer.add_key_value_metadata(
            {META_EVENTS: str(events).encode(), META_JSONL_BYTES: str(jsonl_bytes).encode()}
        )
        self._writer.close()
        self._writer = None

    def _drop(self) -> None:
        """Give the copy up: the checker reads history.jsonl instead."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            finally:
                self.path.unlink(missing_ok=True)


def _columnar_row(event: dict[str, Any]) -> dict[str, Any]:
    process = event["process"]
    client = isinstance(process, int) and not isinstance(process, bool)
    value = event.get("value")
    row: dict[str, Any] = {
        "index": event["index"],
        "time": event["time"],
        "type": event["type"],
        "process": str(process),
        "f": _text(event.get("f")),
        "node": _text(event.get("node")),
        "value": _FIT_VALUE(value) if client else None,
        "error": _FIT_ERROR(event.get("error")),
        "value_json": None if client else _json_text(value),
    }
    return row


def _json_text(value: Any) -> str:
    return _encode_text(value)


def _text(value: Any) -> str | None:
    """A string field as the checker's JSON parse gives it: a string, or other JSON as text."""
    if value is None or isinstance(value, str):
        return value
    return _json_text(value)


def _fitter(typ: pa.DataType) -> Callable[[Any], Any]:
    """A function shaping a value for `typ`, or raising _Unfit where the JSON parse would null
    it (and flag the line), so that the copy never says something the JSONL does not. Built
    once per type: walking the Arrow type for every event cost the simulator a tenth of its
    run."""
    if pa.types.is_string(typ):
        return lambda v: None if v is None else _text(v)
    if pa.types.is_int64(typ):

        def int64(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
                raise _Unfit(v)
            return v

        return int64
    if pa.types.is_floating(typ):

        def floating(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise _Unfit(v)
            return float(v)

        return floating
    if pa.types.is_boolean(typ):

        def boolean(v: Any) -> Any:
            if v is not None and not isinstance(v, bool):
                raise _Unfit(v)
            return v

        return boolean
    if isinstance(typ, pa.StructType):
        fits = {typ.field(i).name: _fitter(typ.field(i).type) for i in range(typ.num_fields)}

        def struct(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Unfit(v)
            # only the fields the event has (Arrow fills the others with null): an op value
            # has a handful of the 19 fields, and calling a fitter on each absent one was waste
            return {k: fit(x) for k, x in v.items() if x is not None and (fit := fits.get(k))}

        return struct
    if isinstance(typ, pa.MapType):
        item = _fitter(typ.item_type)

        def mapping(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Unfit(v)
            return [(str(k), item(x)) for k, x in v.items()]

        return mapping
    if isinstance(typ, pa.ListType):
        element = _fitter(typ.value_type)

        def listing(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, list | tuple):
                raise _Unfit(v)
            return [element(x) for x in v]

        return listing
    raise TypeError(f"no columnar shape for {typ}")


_FIT_VALUE = _fitter(COLUMNAR_SCHEMA.field("value").type)
_FIT_ERROR = _fitter(COLUMNAR_SCHEMA.field("error").type)


def _error_fields(error: dict) -> dict:
    """The contract's error object: code, message, retriable (extra fields kept)."""
    out = dict(error)
    out["code"] = str(error.get("code", "INTERNAL"))
    out["message"] = str(error.get("message", ""))
    out["retriable"] = bool(error.get("retriable", False))
    return out


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# Built once: json.dumps with any option builds a new encoder for every call (about half of
# its time per event, cProfile).
_encode_line = json.JSONEncoder(separators=(",", ":"), default=_json_default).encode
_encode_text = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, default=_json_default
).encode


def read_history(path: Path) -> list[dict]:
    """Every complete event of a history file (a torn last line, from a kill, is left out)."""
    events: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            events.append(json.loads(line))
    return events
