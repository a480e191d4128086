"""What the harness needs from a database under test (Jepsen's db + client), nothing more.

A new database plugs in with a Target (install, configure, start, stop, kill, pause, resume,
logs) and a TargetClient (the ops a workload invokes); the harness itself does not change.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.cluster import Cluster


class ClientError(Exception):
    """A client op that did not succeed.

    definite=True: the node answered with an error, the op certainly did not take effect
    (history `fail`). definite=False: timeout or lost connection, outcome unknown (`info`).
    `value` carries whatever the op reached (e.g. a txn's partial completion value).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retriable: bool = False,
        definite: bool = True,
        value: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retriable = retriable
        self.definite = definite
        self.value = value

    def to_error(self) -> dict[str, Any]:
        """The history's `error` object."""
        return {"code": self.code, "message": self.message, "retriable": self.retriable}


class TargetSetupError(Exception):
    """A target could not install, configure, start or become ready: verdict unknown."""


@runtime_checkable
class TargetClient(Protocol):
    node: str

    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def txn(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def probe(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@runtime_checkable
class Target(Protocol):
    name: str
    clock: str
    capabilities: frozenset[str]

    def setup(self, cluster: Cluster, config: dict[str, Any]) -> None: ...

    def start(self, node: str) -> None: ...

    def stop(self, node: str) -> None: ...

    def kill(self, node: str) -> None: ...

    def pause(self, node: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def wait_ready(self, timeout: float) -> None: ...

    def collect_logs(self, node: str, dest: Path) -> None: ...

    async def client(self, node: str) -> TargetClient: ...

    async def catalog_log(self) -> list[dict[str, Any]]: ...

    def teardown(self) -> None: ...
