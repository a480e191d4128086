"""The one protocol through which the controller acts on a node, whatever the backend.

Jepsen's Remote: run a shell command as root, move files, signal processes. Every fault and
every target action goes through it, so each works on docker, local and ssh alike; the
backends' implementations and the helpers around them are `harness.remote*`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class RemoteError(Exception):
    """A command failed on a node, or the node could not be reached."""

    def __init__(self, node: str, message: str, result: CommandResult | None = None) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node
        self.result = result


@runtime_checkable
class Remote(Protocol):
    name: str
    host: str

    def run(self, cmd: str, timeout: float = 30.0, check: bool = True) -> CommandResult: ...

    def upload(self, local: Path, remote_path: str) -> None: ...

    def download(self, remote_path: str, local: Path) -> None: ...

    def signal(self, pattern: str, sig: str) -> None: ...

    def close(self) -> None: ...
