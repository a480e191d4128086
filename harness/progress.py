"""Live terminal displays (rich): the run's phase, ops and active faults; image build steps."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from harness.run import RunProgress


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
    faults = "; ".join(
        f"{kind} {_nodes_of(value)}".strip() for kind, value in sorted(state.faults.items())
    )
    table.add_row("faults", faults or "none")
    if state.run_dir:
        table.add_row("run", state.run_dir)
    return table


def _nodes_of(value: dict) -> str:
    """The nodes a fault event names, however the nemesis spelled them."""
    for key in ("nodes", "targets", "learners", "offsets", "grudge"):
        nodes = value.get(key)
        if isinstance(nodes, dict):
            return ",".join(sorted(nodes))
        if isinstance(nodes, list | tuple):
            return ",".join(str(n) for n in nodes)
    return ""


class LiveProgress:
    """A rich Live panel on stderr, refreshed by `update(state)` and four times a second."""

    def __init__(self) -> None:
        self._console = Console(stderr=True)
        self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._state: RunProgress | None = None

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state is not None:
            self._live.update(render(self._state), refresh=True)
        self._live.__exit__(exc_type, exc, tb)

    def update(self, state: RunProgress) -> None:
        self._state = state
        self._live.update(render(state))


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
