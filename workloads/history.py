"""The history recorder: every client and nemesis event, one JSON line each, as it happens.

The history is the single interface between running and checking (shared/spec/history.md), so
the recorder is the one writer of `history.jsonl`: it assigns `index` and `time`, writes every
event at once with one write(2) (a SIGKILLed controller leaves a readable prefix), and a
background thread fsyncs it at most every ~100 ms.
It also enforces Jepsen's process rules, so a broken workload fails loudly instead of writing a
history the checker would reject: one outstanding op per process, a completion only after an
invoke, and no invoke from a process whose last op ended in `info`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

CLIENT_COMPLETIONS = ("ok", "fail", "info")
FSYNC_INTERVAL_NS = 100_000_000
_TS_FIELDS = ("activation_ts", "commit_ts", "begin_ts", "op_ts", "ts")


class HistoryError(RuntimeError):
    """An event that would break the history contract (pairing, reuse after info, closed)."""


class HistoryRecorder:
    """Append-only, thread-safe writer of `history.jsonl`; time 0 is `start_monotonic_ns`."""

    def __init__(self, path: Path, start_monotonic_ns: int | None = None) -> None:
        self.path = Path(path)
        self.start_monotonic_ns = (
            time.monotonic_ns() if start_monotonic_ns is None else start_monotonic_ns
        )
        self._lock = threading.Lock()
        if self.path.exists() and self.path.stat().st_size > 0:
            raise HistoryError(f"{self.path} already holds events; a run writes a fresh history")
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._index = 0
        self._dirty = False
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
        return time.monotonic_ns() - self.start_monotonic_ns

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

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (called with the lock held) ---------------------------------------------
    def _write(self, fields: dict[str, Any]) -> dict:
        if self._closed:
            raise HistoryError(f"history {self.path} is closed")
        now = time.monotonic_ns()
        event = {"index": self._index, "time": now - self.start_monotonic_ns, **fields}
        line = json.dumps(event, separators=(",", ":"), default=_json_default) + "\n"
        data = line.encode("utf-8")
        # One write(2) per event on an O_APPEND descriptor: the line reaches the kernel whole,
        # so a SIGKILL of the controller can only lose whole events, never tear one.
        written = os.write(self._fd, data)
        while written < len(data):
            written += os.write(self._fd, data[written:])
        self._index += 1
        self._dirty = True
        return event

    def _sync_loop(self) -> None:
        """fsync at most every FSYNC_INTERVAL_NS, off the writers' path: a slow disk must not
        stall the event loop that records client ops."""
        while not self._stop_sync.wait(FSYNC_INTERVAL_NS / 1e9):
            if self._dirty:
                self._dirty = False
                try:
                    os.fsync(self._fd)
                except OSError:
                    return  # closed under us: close() does the last fsync

    def _note_ts(self, value: dict) -> None:
        for name in _TS_FIELDS:
            ts = value.get(name)
            if isinstance(ts, int) and not isinstance(ts, bool) and ts > self._max_ts:
                self._max_ts = ts
        for op in value.get("ops") or ():
            ts = op.get("op_ts") if isinstance(op, dict) else None
            if isinstance(ts, int) and ts > self._max_ts:
                self._max_ts = ts


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


def read_history(path: Path) -> list[dict]:
    """Every complete event of a history file (a torn last line, from a kill, is left out)."""
    events: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            events.append(json.loads(line))
    return events
