"""What every backend's Remote (`contract.remote`) shares: signals by pattern, command results
checked, blocking calls off the event loop, one thread per node."""

from __future__ import annotations

import asyncio
import base64
import functools
import shlex
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from contract.remote import CommandResult, RemoteError

P = ParamSpec("P")
T = TypeVar("T")
SIGNALS = frozenset({"TERM", "KILL", "STOP", "CONT", "INT", "HUP", "USR1", "USR2"})


def normalize_signal(sig: str) -> str:
    """'SIGKILL', 'kill', 'KILL' -> 'KILL'; anything else is refused."""
    name = sig.upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ValueError(f"unsupported signal {sig!r}")
    return name


def pkill_command(pattern: str, sig: str) -> str:
    """A shell command that signals processes matching pattern, but never the shell running it.

    The pattern travels base64-encoded, so the command line of the shell that runs pkill does
    not contain it and cannot match itself. Exit 1 (nothing matched) is not an error.
    """
    encoded = base64.b64encode(pattern.encode()).decode()
    name = normalize_signal(sig)
    return (
        f"p=$(printf %s {shlex.quote(encoded)} | base64 -d); "
        f'pkill -{name} -f -- "$p"; rc=$?; [ $rc -le 1 ]'
    )


def pgrep_command(pattern: str) -> str:
    """Exit 0 when a process matches pattern (the pattern hidden from the shell's own argv)."""
    encoded = base64.b64encode(pattern.encode()).decode()
    return f'p=$(printf %s {shlex.quote(encoded)} | base64 -d); pgrep -f -- "$p" >/dev/null'


def check_result(node: str, cmd: str, result: CommandResult, check: bool) -> CommandResult:
    if check and result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RemoteError(
            node,
            f"command failed (exit {result.exit_code}): {cmd[:200]}: {' | '.join(detail)}",
            result,
        )
    return result


def on_each_node(fn: Callable[[str], object], nodes: Sequence[str]) -> None:
    """fn(node) for every node at once, one thread each (Remote calls block); the first
    failure is raised once all have finished. For sync code only: async code uses
    `in_thread` instead."""
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        for future in [pool.submit(fn, n) for n in nodes]:
            future.result()


async def run_to_end(work: Awaitable[T]) -> T:
    """Await work to its end even when the caller is cancelled meanwhile, then pass the
    cancellation on: what is half done (a node provisioned, a log copied) is finished and
    known before teardown, instead of racing it."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


async def in_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """The one seam where a blocking call (Remote, the docker SDK, a subprocess) leaves the
    event loop: a thread of its own, run to its end (a thread cannot be interrupted)."""
    if getattr(asyncio.get_running_loop(), "runs_without_threads", False):
        # a simulation's loop (sim.loop.SimLoop): virtual time must not move while the call
        # runs, and a second thread would make the run depend on the host's scheduler
        return fn(*args, **kwargs)
    return await run_to_end(asyncio.to_thread(functools.partial(fn, *args, **kwargs)))
