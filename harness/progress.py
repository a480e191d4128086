"""What a run shows while it goes: a live panel (rich) on a terminal; without one (CI), one line
per phase and per fault as it happens and the op counts now and then; image build steps.
`-v` also streams the controller's log (controller.log's records) to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.table import Table

from harness.run import ProgressNote, RunProgress

CONTROLLER_LOGGER = "schemachaos"  # controller.log is this logger tree (harness.store)
HEARTBEAT_S = 10.0  # op counts this often while the workload runs, without a terminal


def render(state: RunProgress) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("phase", state.phase)
    if state.backend:
        table.add_row("backend", state.backend)
    if state.phase == "running":
        elapsed = time.monotonic() - state.started
        table.add_row("elapsed", f"{elapsed:5.1f}s / {state.time_limit_s:.0f}s")
    counts = state.counts
    if counts:
        table.add_row(
            "ops",
            f"[green]ok {counts.get('ok', 0)}[/]  [red]fail {counts.get('fail', 0)}[/]  "
            f"[yellow]info {counts.get('info', 0)}[/]",
        )
    if state.phase in ("running", "healing") or state.faults:
        now = "; ".join(
            f"{value.get('kind', key)} {_nodes_of(value)}".strip()
            for key, value in sorted(state.faults.items())
        )
        table.add_row("faults now", now or "none")
    table.add_row("faults run", faults_summary(state.faults_run))
    if state.run_dir:
        table.add_row("run", state.run_dir)
    return table


def faults_summary(faults_run: dict[str, int]) -> str:
    """`partition ×2, clock ×1`: every kind of fault that ran, or none."""
    return ", ".join(f"{k} ×{n}" for k, n in sorted(faults_run.items())) or "none"


def _nodes_of(value: dict) -> str:
    """The nodes a fault event names, however the nemesis spelled them."""
    for key in ("nodes", "targets", "learners", "offsets", "grudge"):
        nodes = value.get(key)
        if isinstance(nodes, dict):
            return ",".join(sorted(nodes))
        if isinstance(nodes, list | tuple):
            return ",".join(str(n) for n in nodes)
    return ""


class RunDisplay(Protocol):
    """What `schemachaos run` shows while run_test goes: a context manager fed every state."""

    def __enter__(self) -> RunDisplay: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def update(self, state: RunProgress) -> None: ...


def run_display(verbose: bool = False) -> RunDisplay:
    """The live panel on a terminal, lines otherwise; `verbose` streams the controller's log."""
    console = Console(stderr=True)
    if console.is_terminal:
        return LiveProgress(console, verbose)
    return LineProgress(sys.stderr, verbose)


class LiveProgress:
    """A rich Live panel on stderr, refreshed by `update(state)` and four times a second; with
    `verbose`, the controller's log scrolls above it."""

    def __init__(self, console: Console | None = None, verbose: bool = False) -> None:
        self._console = console or Console(stderr=True)
        self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._state: RunProgress | None = None
        self._log = _LogStream(RichHandler(console=self._console) if verbose else None)

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        self._log.attach()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._log.detach()
        if self._state is not None:
            self._live.update(render(self._state), refresh=True)
        self._live.__exit__(exc_type, exc, tb)

    def update(self, state: RunProgress) -> None:
        self._state = state
        self._live.update(render(state))


class _LogStream:
    """A handler on the controller's logger tree for the length of a run (None: not asked)."""

    def __init__(self, handler: logging.Handler | None) -> None:
        self._handler = handler

    def attach(self) -> None:
        if self._handler is not None:
            self._handler.setLevel(logging.DEBUG)
            logging.getLogger(CONTROLLER_LOGGER).addHandler(self._handler)

    def detach(self) -> None:
        if self._handler is not None:
            logging.getLogger(CONTROLLER_LOGGER).removeHandler(self._handler)
            self._handler.flush()


def note_line(note: ProgressNote, started: float) -> str:
    """`[  12.3s] phase: running` or `[  20.1s] start-partition n4`."""
    stamp = f"[{note.at - started:7.1f}s]"
    if note.what == "phase":
        return f"{stamp} phase: {note.text}"
    nodes = _nodes_of(note.value)
    failed = f" (failed: {note.value['error']})" if note.value.get("error") else ""
    return f"{stamp} {note.what}{' ' + nodes if nodes else ''}{failed}"


class LineProgress:
    """Without a terminal (CI logs): each phase and each fault start/stop as a line when it
    happens, op counts every HEARTBEAT_S while the workload runs, the faults run at the end."""

    def __init__(
        self, stream: TextIO, verbose: bool = False, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        self._stream = stream
        self._heartbeat_s = heartbeat_s
        self._seen = 0
        self._last_beat = time.monotonic()
        self._state: RunProgress | None = None
        handler: logging.Handler | None = None
        if verbose:
            handler = logging.StreamHandler(stream)
            handler.setFormatter(
                logging.Formatter(
                    "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S"
                )
            )
        self._log = _LogStream(handler)

    def __enter__(self) -> LineProgress:
        self._log.attach()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._log.detach()
        if self._state is not None:
            self._print_notes(self._state)
            self._print(f"faults run: {faults_summary(self._state.faults_run)}")

    def update(self, state: RunProgress) -> None:
        self._state = state
        self._print_notes(state)
        now = time.monotonic()
        if state.phase == "running" and now - self._last_beat >= self._heartbeat_s:
            self._last_beat = now
            c = state.counts
            self._print(
                f"[{now - state.created:7.1f}s] ops: ok {c.get('ok', 0)}, "
                f"fail {c.get('fail', 0)}, info {c.get('info', 0)}; "
                f"{now - state.started:.0f}s of {state.time_limit_s:.0f}s"
            )

    def _print_notes(self, state: RunProgress) -> None:
        for note in state.notes[self._seen :]:
            self._print(note_line(note, state.created))
        self._seen = len(state.notes)

    def _print(self, line: str) -> None:
        print(line, file=self._stream, flush=True)


@contextlib.contextmanager
def build_progress() -> Iterator[Callable[[str], None]]:
    """A spinner with the current image build step; every step also goes to the log lines."""
    console = Console(stderr=True)
    if not console.is_terminal:

        def plain(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        yield plain
        return
    with console.status("building node image") as status:

        def report(line: str) -> None:
            text = line if len(line) < 110 else line[:107] + "..."
            status.update(f"[bold]building node image[/]: {text}")
            if not line.startswith(
                (
                    "I: Retrieving",
                    "I: Validating",
                    "I: Extracting",
                    "I: Unpacking",
                    "I: Configuring",
                )
            ):
                console.log(text)

        yield report
