"""The schemasync target: node configs, processes under libfaketime, signals, logs, clients.

Each node's root directory holds `node.toml`, the data (Raft log, storage), `node.log`,
`stdout.log` and the `faketime` file the clock nemesis writes offsets into.
"""

from __future__ import annotations

import asyncio
import io
import logging
import shlex
import tarfile
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from harness.cluster import REPO_ROOT, Cluster
from harness.remote import Remote, RemoteError, pgrep_command
from harness.target import ClientError, TargetSetupError

log = logging.getLogger("schemachaos.target")
T = TypeVar("T")

DEFAULT_CONFIG: dict[str, Any] = {
    "delay_duration_ms": 500,
    "max_clock_skew_ms": 500,
    "idle_safe_time_interval_ms": 250,
    "partitions": 4,
    "base_ts": "enlist",
    "rename_column_compatible": True,
    "toggles": [],
}
FAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
# Node errors after which the op may still have taken effect: recorded as `info`.
INDEFINITE_CODES = frozenset({"TIMEOUT", "INTERNAL"})
INDEFINITE_DDL_CODES = INDEFINITE_CODES | {"UNAVAILABLE"}
OP_TIMEOUT_S = 60.0  # a backstop: the workload runner sets the real per-op timeouts
CONNECT_TIMEOUT_S = 5.0


class TargetError(TargetSetupError):
    """The target could not be set up or did not become ready; one line naming node and cause."""


class CatalogUnreadable(Exception):
    """No node answered admin.catalog_log: the run cannot be checked (verdict unknown)."""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(_toml_value(v) for v in items) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def render_config(cluster: Cluster, node: str, config: dict[str, Any]) -> str:
    """The TOML of docs/interfaces.md for one node."""
    root = cluster.node_dirs[node]
    merged = {**DEFAULT_CONFIG, **config}
    lines = [
        f"name = {_toml_value(node)}",
        f"data_dir = {_toml_value(root)}",
        f"voters = {_toml_value(cluster.voters)}",
        f"log_file = {_toml_value(root + '/node.log')}",
    ]
    for key in sorted(merged):
        value = merged[key]
        if key in {"name", "data_dir", "voters", "log_file", "nodes"} or value is None:
            continue
        if isinstance(value, dict):
            continue
        lines.append(f"{key} = {_toml_value(value)}")
    for other in cluster.nodes:
        lines.append("")
        lines.append(f"[nodes.{other}]")
        lines.append(f"host = {_toml_value(cluster.remotes[other].host)}")
        for port_name, port in cluster.ports.items():
            lines.append(f"{port_name} = {port}")
    return "\n".join(lines) + "\n"


def run_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even when an event loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(factory))
    result: list[T] = []
    error: list[BaseException] = []

    def runner() -> None:
        try:
            result.append(asyncio.run(_as_coroutine(factory)))
        except BaseException as e:
            error.append(e)

    thread = threading.Thread(target=runner, name="schemachaos-sync-bridge")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


async def _as_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


class SchemaSyncTarget:
    """Target for `schemasync` node processes, on any backend's Remote."""

    name = "schemasync"
    clock = "hlc"
    capabilities = frozenset({"hlc", "op-schema-version", "participants", "catalog-log"})

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.config: dict[str, Any] = dict(DEFAULT_CONFIG)
        self.faketime_lib: dict[str, str] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _cluster(self) -> Cluster:
        if self.cluster is None:
            raise TargetError("target used before setup()")
        return self.cluster

    def _remote(self, node: str) -> Remote:
        return self._cluster().remotes[node]

    def node_dir(self, node: str) -> str:
        return self._cluster().node_dirs[node]

    def data_dir(self, node: str) -> str:
        return self.node_dir(node)

    def faketime_file(self, node: str) -> str:
        """The file libfaketime reads the node's clock offset from (`+0`, `+1.5`, `-2`)."""
        return f"{self.node_dir(node)}/faketime"

    def config_path(self, node: str) -> str:
        return f"{self.node_dir(node)}/node.toml"

    def process_pattern(self, node: str) -> str:
        """What `pkill -f` matches: only this node's process, even with all nodes on one host."""
        return f"schemasync.node --config {self.config_path(node)}"

    def client_address(self, node: str) -> str:
        cluster = self._cluster()
        return f"{cluster.remotes[node].host}:{cluster.ports['client_port']}"

    def _parallel(self, fn: Callable[[str], None], nodes: list[str] | None = None) -> None:
        nodes = nodes if nodes is not None else self._cluster().nodes
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            for future in [pool.submit(fn, n) for n in nodes]:
                future.result()

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, cluster: Cluster, config: dict[str, Any]) -> None:
        """Install code where needed, write configs, reset data and the faketime file."""
        self.cluster = cluster
        self.config = {**DEFAULT_CONFIG, **config}
        code = self._code_tarball() if cluster.upload_code_to else None
        self._parallel(lambda n: self._setup_node(n, code))

    def _code_tarball(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for p in sorted((REPO_ROOT / "schemasync").rglob("*.py")):
                if "__pycache__" not in p.parts:
                    tar.add(p, arcname=str(p.relative_to(REPO_ROOT)))
        return buf.getvalue()

    def _setup_node(self, node: str, code: bytes | None) -> None:
        cluster = self._cluster()
        remote = self._remote(node)
        root = self.node_dir(node)
        remote.signal(self.process_pattern(node), "KILL")
        remote.run(f"rm -rf {shlex.quote(root)} && mkdir -p {shlex.quote(root)}")
        with tempfile.TemporaryDirectory(prefix="schemachaos-cfg-") as tmp:
            cfg = Path(tmp) / "node.toml"
            cfg.write_text(render_config(cluster, node, self.config))
            remote.upload(cfg, self.config_path(node))
            if code is not None and cluster.upload_code_to:
                bundle = Path(tmp) / "code.tar.gz"
                bundle.write_bytes(code)
                dest = cluster.upload_code_to
                remote.run(f"mkdir -p {shlex.quote(dest)}")
                remote.upload(bundle, f"{dest}/code.tar.gz")
                remote.run(
                    f"cd {shlex.quote(dest)} && rm -rf schemasync && tar -xzf code.tar.gz "
                    "&& rm -f code.tar.gz"
                )
        remote.run(f"printf '+0\\n' > {shlex.quote(self.faketime_file(node))}")
        self.faketime_lib[node] = self._find_faketime(remote)
        probe = remote.run(
            f"{shlex.quote(cluster.python)} -c 'import msgpack, sys; print(sys.version_info[:2])'",
            check=False,
        )
        if probe.exit_code != 0:
            raise TargetError(f"{node}: {cluster.python} with msgpack is not available on the node")

    def _find_faketime(self, remote: Remote) -> str:
        candidates = " ".join(FAKETIME_CANDIDATES)
        found = remote.run(
            f"for f in {candidates} /usr/lib/*/faketime/libfaketime.so.1; do "
            '[ -f "$f" ] && echo "$f" && break; done; true'
        ).stdout.strip()
        if not found:
            raise TargetError(
                f"{remote.name}: libfaketime.so.1 not found on the node (install Debian's faketime)"
            )
        return found.splitlines()[0]

    def start(self, node: str) -> None:
        cluster = self._cluster()
        root = shlex.quote(self.node_dir(node))
        env = {
            "LD_PRELOAD": self.faketime_lib[node],
            "FAKETIME_TIMESTAMP_FILE": self.faketime_file(node),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_NO_CACHE": "1",
            "PYTHONPATH": cluster.code_dir or "",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env_args = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cmd = (
            f"cd {root} || exit 1; nohup setsid env {env_args} {shlex.quote(cluster.python)} "
            f"-m schemasync.node --config {shlex.quote(self.config_path(node))} "
            f">> {root}/stdout.log 2>&1 < /dev/null &"
        )
        self._remote(node).run(cmd, timeout=30)
        log.info("started %s", node)

    def _running(self, node: str) -> bool:
        cmd = pgrep_command(self.process_pattern(node))
        return self._remote(node).run(cmd, check=False).exit_code == 0

    def stop(self, node: str) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        remote = self._remote(node)
        remote.signal(self.process_pattern(node), "CONT")
        remote.signal(self.process_pattern(node), "TERM")
        deadline = time.monotonic() + 10
        while self._running(node):
            if time.monotonic() >= deadline:
                remote.signal(self.process_pattern(node), "KILL")
                break
            time.sleep(0.1)
        log.info("stopped %s", node)

    def kill(self, node: str) -> None:
        self._remote(node).signal(self.process_pattern(node), "KILL")
        log.info("killed %s", node)

    def pause(self, node: str) -> None:
        self._remote(node).signal(self.process_pattern(node), "STOP")

    def resume(self, node: str) -> None:
        self._remote(node).signal(self.process_pattern(node), "CONT")

    def start_all(self) -> None:
        self._parallel(self.start)

    # -- readiness -------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Until a Meta Storage leader is known on every node and every node applied the
        leader's commit index; raises TargetError naming the nodes that are not there."""
        run_coroutine(lambda: self._wait_ready(timeout))

    async def _wait_ready(self, timeout: float) -> None:
        cluster = self._cluster()
        last: dict[str, str] = {n: "no answer" for n in cluster.nodes}
        deadline = time.monotonic() + timeout
        next_liveness = time.monotonic() + 1.0
        prev_commit: int | None = None  # the leader's commit index one round ago
        while True:
            statuses = await asyncio.gather(
                *(self._status_once(n) for n in cluster.nodes), return_exceptions=True
            )
            answers: dict[str, dict[str, Any]] = {}
            for node, status in zip(cluster.nodes, statuses, strict=True):
                if isinstance(status, BaseException):
                    last[node] = f"no answer ({status})"
                else:
                    answers[node] = status
            leaders = {s.get("leader") for s in answers.values()}
            leader_status = None
            if len(leaders) == 1 and None not in leaders:
                leader_status = answers.get(str(next(iter(leaders))))
            if leader_status is not None and len(answers) == len(cluster.nodes):
                # Everyone applied what the leader had committed a round ago: the index keeps
                # moving (idle SyncTime entries), so the comparison is against a fixed point.
                commit = int(leader_status.get("commit_index", 0))
                goal = max(1, prev_commit if prev_commit is not None else commit)
                behind = [n for n, s in answers.items() if int(s.get("applied_index", 0)) < goal]
                if prev_commit is not None and not behind:
                    return
                prev_commit = commit
                for n in behind:
                    last[n] = f"applied {answers[n].get('applied_index')} < commit {goal}"
            else:
                prev_commit = None
                for node, s in answers.items():
                    last[node] = f"leader {s.get('leader')!r}, applied {s.get('applied_index')}"
            if time.monotonic() >= deadline:
                detail = "; ".join(f"{n}: {why}" for n, why in sorted(last.items()))
                raise TargetError(f"cluster not ready after {timeout:.0f}s: {detail}")
            if time.monotonic() >= next_liveness:
                next_liveness = time.monotonic() + 1.0
                silent = [n for n in cluster.nodes if n not in answers]
                dead = await asyncio.to_thread(self._dead, silent)
                if dead:
                    raise TargetError(
                        f"{dead[0]}: node process exited: {self._last_words(dead[0])}"
                    )
            await asyncio.sleep(0.2)

    def _dead(self, nodes: list[str]) -> list[str]:
        return [n for n in nodes if not self._running(n)]

    def _last_words(self, node: str) -> str:
        """The last lines a dead node wrote (stdout first: config errors go there)."""
        root = shlex.quote(self.node_dir(node))
        out = self._remote(node).run(
            f"tail -n 3 {root}/stdout.log 2>/dev/null; tail -n 2 {root}/node.log 2>/dev/null",
            check=False,
        )
        text = " | ".join(line.strip() for line in out.stdout.splitlines() if line.strip())
        return text[-600:] or "no output"

    async def _status_once(self, node: str) -> dict[str, Any]:
        from schemasync.client import Client

        async with asyncio.timeout(2.0):
            client = await Client.connect([self.client_address(node)], timeout=2.0)
            try:
                return await client.status()
            finally:
                await client.close()

    # -- observation -----------------------------------------------------------------------
    def collect_logs(self, node: str, dest: Path) -> None:
        """Copy the node's log files into dest (missing ones are skipped, not fatal)."""
        dest.mkdir(parents=True, exist_ok=True)
        remote = self._remote(node)
        root = self.node_dir(node)
        for name in ("node.log", "stdout.log", "node.toml", "faketime"):
            exists = remote.run(f"test -f {shlex.quote(root + '/' + name)}", check=False)
            if exists.exit_code != 0:
                continue
            try:
                remote.download(f"{root}/{name}", dest / name)
            except RemoteError as e:
                log.warning("log %s of %s not collected: %s", name, node, e)

    async def client(self, node: str) -> SchemaSyncClient:
        from schemasync.client import Client

        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                raw = await Client.connect([self.client_address(node)], timeout=OP_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise ClientError(
                "UNAVAILABLE", f"cannot connect to {node}: {e}", retriable=True, definite=True
            ) from e
        except Exception as e:
            raise _client_error(e, indefinite=frozenset()) from e
        return SchemaSyncClient(node, raw)

    async def catalog_log(self) -> list[dict[str, Any]]:
        """The catalog versions from the first node that answers (the leader's view first)."""
        from schemasync.client import Client

        cluster = self._cluster()
        errors: list[str] = []
        for node in cluster.nodes:
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    client = await Client.connect([self.client_address(node)], timeout=5.0)
                    try:
                        return list(await client.catalog_log())
                    finally:
                        await client.close()
            except Exception as e:
                errors.append(f"{node}: {e}")
        raise CatalogUnreadable("catalog log not readable from any node: " + "; ".join(errors))

    def teardown(self) -> None:
        """Kill every node process (stopped ones too); the backend removes the rest."""
        if self.cluster is None:
            return

        def down(node: str) -> None:
            try:
                self.kill(node)
            except RemoteError as e:
                log.warning("teardown of %s: %s", node, e)

        self._parallel(down)


def _client_error(e: BaseException, indefinite: frozenset[str]) -> ClientError:
    """Map what the client library raised to a ClientError with the right definiteness."""
    from schemasync.client import SchemaSyncError

    if isinstance(e, ClientError):
        return e
    if isinstance(e, SchemaSyncError):
        value = getattr(e, "value", None)
        said = e.data.get("definite") if isinstance(getattr(e, "data", None), dict) else None
        return ClientError(
            e.code,
            e.message,
            retriable=bool(e.retriable),
            definite=said if isinstance(said, bool) else e.code not in indefinite,
            value=_reached(value) if isinstance(value, dict) else None,
        )
    if isinstance(e, TimeoutError):
        return ClientError("TIMEOUT", "no reply in time", retriable=True, definite=False)
    if isinstance(e, OSError | EOFError | ConnectionError | asyncio.IncompleteReadError):
        return ClientError("UNAVAILABLE", f"connection lost: {e}", retriable=True, definite=False)
    return ClientError("INTERNAL", f"{type(e).__name__}: {e}", retriable=False, definite=False)


def _reached(value: dict[str, Any]) -> dict[str, Any]:
    """A failed txn's partial value as history.md has it: what the txn reached. An implicit
    txn that failed before it had an id carries `txn_id: null`; the field is left out."""
    return {k: v for k, v in value.items() if not (k == "txn_id" and v is None)}


class SchemaSyncClient:
    """TargetClient over `schemasync.client.Client`: one node, explicit timeouts per op."""

    def __init__(self, node: str, client: Any, timeout_s: float = OP_TIMEOUT_S) -> None:
        self.node = node
        self._client = client
        self._timeout = timeout_s

    async def _call(self, fn: Callable[[], Awaitable[T]], indefinite: frozenset[str]) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                return await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise _client_error(e, indefinite) from e

    async def ddl(self, value: dict[str, Any]) -> dict[str, Any]:
        reply = await self._call(lambda: self._client.ddl(value["stmt"]), INDEFINITE_DDL_CODES)
        return {
            **value,
            "catalog_version": reply["catalog_version"],
            "activation_ts": reply["activation_ts"],
        }

    async def txn(self, value: dict[str, Any]) -> dict[str, Any]:
        from schemasync.txn_client import run_txn

        implicit = bool(value.get("implicit"))
        reply = await self._call(
            lambda: run_txn(self._client, value["ops"], implicit=implicit), INDEFINITE_CODES
        )
        return dict(reply)

    async def probe(self, value: dict[str, Any]) -> dict[str, Any]:
        reply = await self._call(
            lambda: self._client.probe(value.get("table"), value.get("ts")), INDEFINITE_CODES
        )
        return dict(reply)

    async def final_read(self, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("index"):
            body = {"table": value["table"], "index": value["index"], "ts": value.get("ts")}
            kind = "read.index"
        else:
            body = {"table": value["table"], "ts": value.get("ts")}
            kind = "read.table"
        reply = await self._call(
            lambda: self._client.request(kind, body, timeout=self._timeout), INDEFINITE_CODES
        )
        return dict(reply)

    async def status(self) -> dict[str, Any]:
        return dict(await self._call(self._client.status, INDEFINITE_CODES))

    async def set_delay(self, delay_duration_ms: int) -> None:
        """The node's live DD (admin.set_delay): the `delay` nemesis's hook."""
        await self._call(lambda: self._client.set_delay(delay_duration_ms), INDEFINITE_CODES)

    async def close(self) -> None:
        try:
            async with asyncio.timeout(5):
                await self._client.close()
        except Exception as e:
            log.debug("closing client of %s: %s", self.node, e)
