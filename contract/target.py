"""What the harness needs from a database under test (Jepsen's db + client), nothing more.

A new database plugs in with a Target (install, configure, start, stop, kill, pause, resume,
logs) and a TargetClient (the ops a workload invokes); the harness itself does not change.
What only some targets can do is an optional capability below: a `runtime_checkable` protocol
the harness and the nemeses test with `isinstance`, so a target opts in by having the methods.

This is the ground floor: it imports nothing of the project but `harness.remote`, so targets,
nemeses and workloads can all depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from contract.config_error import ConfigError
from contract.remote import Remote


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


class SettingsError(ConfigError, TargetSetupError):
    """A target setting (a scenario's `[target]` key) that the target does not have, or of
    the wrong type: `<key>: <why>`, the why naming what is allowed. A config error that is
    also a target's setup error, so a run that meets it late is unknown, not a crash."""


@runtime_checkable
class TargetClient(Protocol):
    node: str

    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def txn(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def probe(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]: ...

    async def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


# A `capabilities` name the harness acts on: every node keeps its own copy of the data
# (multi-master), so final reads cover every node and the checker compares the copies.
PER_NODE_COPIES = "per-node-copies"


@runtime_checkable
class Target(Protocol):
    name: str
    clock: str
    capabilities: frozenset[str]

    def setup(self, cluster: ClusterView, config: dict[str, Any]) -> None: ...

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


class ClusterView(Protocol):
    """What a target needs from the provisioned cluster (`harness.cluster.Cluster` is one)."""

    nodes: list[str]
    voters: list[str]
    learners: list[str]
    remotes: dict[str, Remote]
    backend: str
    node_dirs: dict[str, str]
    python: str
    code_dir: str | None
    upload_code_to: str | None
    ports: dict[str, int]
    shared_host: bool  # every node on one host (its iptables and qdiscs shared)


# -- optional capabilities ------------------------------------------------------------------


@runtime_checkable
class DockerImageProvider(Protocol):
    """A target with its own node image: the docker backend runs it instead of schemasync's."""

    def docker_image(self) -> str: ...


@runtime_checkable
class StartsAll(Protocol):
    """A target that starts its nodes together (e.g. a primary before its standbys)."""

    def start_all(self) -> None: ...


@runtime_checkable
class LaggingControl(Protocol):
    """A target that makes a node lag itself in `own_lagging_modes` (the lagging-learner
    nemesis does the other modes generically, on the network)."""

    own_lagging_modes: frozenset[str]

    def lag(self, node: str, mode: str, /) -> Mapping[str, Any]: ...

    def unlag(self, node: str, /) -> Mapping[str, Any]: ...


@runtime_checkable
class ApplyInhibitControl(Protocol):
    """A target whose nodes can hold and release applying replicated state (the `inhibit`
    lagging mode, Ignite's WatchListenerInhibitor)."""

    async def inhibit_apply(self, node: str, hold: bool, /) -> Mapping[str, Any]: ...


@runtime_checkable
class ClockControl(Protocol):
    """A target whose nodes run under libfaketime: the file holding each node's offset."""

    def faketime_file(self, node: str, /) -> str: ...


@runtime_checkable
class DelayControl(Protocol):
    """A client that changes its node's live delay duration DD (the `delay` nemesis)."""

    async def set_delay(self, delay_duration_ms: int, /) -> None: ...


@runtime_checkable
class Primaries(Protocol):
    """A target whose nodes have a primary: who leads now, if anyone (Jepsen's `Primary`).

    What leading means is the target's: schemasync's Meta Storage Raft leader; PostgreSQL's
    primary, which every write goes to. The faults that target a leader ask this; a target
    without it (Galera: every node takes writes) has none to target, and those faults are
    recorded as not applicable."""

    async def primaries(self, wait_s: float, /) -> list[str]:
        """The nodes leading now; polled up to wait_s (0: one look) while none does (an
        election), then empty."""
        ...


@runtime_checkable
class AsyncReadiness(Protocol):
    """A target that waits for readiness on the run's event loop instead of a thread."""

    async def wait_ready_async(self, timeout: float, /) -> None: ...


@runtime_checkable
class SettingsChecker(Protocol):
    """A target that checks its settings before anything starts (its own pydantic model):
    the config it would run with (its defaults filled in), or SettingsError."""

    def check_settings(self, config: Mapping[str, Any], /) -> dict[str, Any]: ...


@runtime_checkable
class TimingBounds(Protocol):
    """A target whose guarantees are stated against a clock-skew bound and a delay (CSmax and
    DD, in ms, as its settings give them): the clock nemesis skews within or just beyond CSmax,
    the delay nemesis restores DD. Other targets get the nemeses' own defaults."""

    def timing_bounds(self, config: Mapping[str, Any], /) -> tuple[int, int]: ...


@runtime_checkable
class VersionReporter(Protocol):
    """A target that can say which version of its software a node runs (run.json's
    provenance), asked once the cluster is set up."""

    def software_version(self, node: str, /) -> str: ...


@runtime_checkable
class StatsReporter(Protocol):
    """A target with counts of its own worth keeping beside the run (the simulator's)."""

    def run_stats(self) -> dict[str, Any]: ...
