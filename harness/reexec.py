"""A run in a child process with a fixed PYTHONHASHSEED (a backend's `hash_seed`).

String hashing is randomised per process and sets of strings iterate in hash order: a
simulated run replays exactly only in a process whose hash seed is fixed, so a run asked for
from any other process is re-executed in a child (``python -m harness.run_child``), which
reads RunOptions as JSON on stdin and prints the outcome as one JSON line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.options import RunOptions


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
    """What the child printed: harness.run.RunOutcome's fields."""

    run_dir: Path
    exit_code: int
    faults_run: dict[str, int]


def options_to_json(opts: RunOptions) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(opts), default=str))


def options_from_json(data: dict[str, Any]) -> RunOptions:
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue
        if key in ("store", "scenario", "nodes_file") and value is not None:
            value = Path(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return RunOptions(**kwargs)


def child_command() -> list[str]:
    return [sys.executable, "-m", "harness.run_child"]


def child_env(hash_seed: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": hash_seed}


def run_in_child(opts: RunOptions, hash_seed: str) -> ChildOutcome:
    """run_test(opts) in a child with the hash seed; RuntimeError only if the child crashed.

    The child has a session of its own, so a terminal's Ctrl-C reaches it once, through this
    process: a signal here is passed on, and the child stops its run as run_test does (the
    catalog salvaged, the cluster torn down, results.json written) and prints its outcome."""
    proc = subprocess.Popen(
        child_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(hash_seed),
        start_new_session=True,
    )
    with _passing_signals_to(proc):
        stdout, stderr = proc.communicate(json.dumps(options_to_json(opts)))
    return outcome_of(stdout, proc.returncode, stderr)


@contextlib.contextmanager
def _passing_signals_to(proc: subprocess.Popen[str]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP sent to this process go to `proc` instead."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def outcome_of(stdout: str, returncode: int, stderr: str) -> ChildOutcome:
    """The outcome a child printed as its last JSON line."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"run child failed (exit {returncode}): {stderr[-2000:]}")
    out = json.loads(lines[-1])
    return ChildOutcome(Path(out["run_dir"]), int(out["exit_code"]), dict(out["faults_run"]))
