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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import schemasync
from contract.remote import Remote, RemoteError
from contract.target import ClientError, ClusterView, TargetSetupError
from harness.faketime import faketime_env
from harness.remote import in_thread, on_each_node, pgrep_command
from schemasync.client import Client
from targets.schemasync.client import OP_TIMEOUT_S, SchemaSyncClient, client_error
from targets.schemasync.config import DEFAULT_CONFIG, render_config
from targets.schemasync.config import check_settings as check_node_settings
from targets.schemasync.config import timing_bounds as node_timing_bounds
from targets.schemasync.leader import leader_of

log = logging.getLogger("schemachaos.target")

# the tree whose `schemasync/` package is uploaded to nodes that do not share this checkout
SOURCE_ROOT = Path(schemasync.__file__).resolve().parent.parent
FAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
CONNECT_TIMEOUT_S = 5.0
ADMIN_TIMEOUT_S = 1.5  # a paused node accepts a connection and never answers


class TargetError(TargetSetupError):
    """The target could not be set up or did not become ready; one line naming node and cause."""


class CatalogUnreadable(Exception):
    """No node answered admin.catalog_log: the run cannot be checked (verdict unknown)."""


class SchemaSyncTarget:
    """Target for `schemasync` node processes, on any backend's Remote."""

    name = "schemasync"
    clock = "hlc"
    capabilities = frozenset({"hlc", "op-schema-version", "participants", "catalog-log"})

    def __init__(self) -> None:
        self.cluster: ClusterView | None = None
        self.config: dict[str, Any] = dict(DEFAULT_CONFIG)
        self.faketime_lib: dict[str, str] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _cluster(self) -> ClusterView:
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

    @staticmethod
    def check_settings(config: Mapping[str, Any]) -> dict[str, Any]:
        """The settings given, checked (`config.SchemaSyncSettings`), or SettingsError."""
        return check_node_settings(config)

    @staticmethod
    def timing_bounds(config: Mapping[str, Any]) -> tuple[int, int]:
        """CSmax and DD (ms) of these settings, for the clock and delay nemeses."""
        return node_timing_bounds(config)

    def software_version(self, node: str) -> str:
        """The digest of the `schemasync` sources the node imports (this tree, uploaded or
        shared), so a stored run names the code its nodes ran, not only the harness commit."""
        cluster = self._cluster()
        env = f"PYTHONPATH={shlex.quote(cluster.code_dir)} " if cluster.code_dir else ""
        script = (
            "import hashlib, pathlib, schemasync; p = pathlib.Path(schemasync.__file__).parent; "
            "h = hashlib.sha256(); "
            "[h.update(f.relative_to(p).as_posix().encode() + f.read_bytes()) "
            "for f in sorted(p.rglob('*.py')) if '__pycache__' not in f.parts]; "
            "print(h.hexdigest()[:16])"
        )
        done = self._remote(node).run(
            # from `/`: `python -c` imports the working directory's package first
            f"cd / && {env}{shlex.quote(cluster.python)} -c {shlex.quote(script)}",
            timeout=10.0,
        )
        return f"schemasync sources sha256:{done.stdout.strip()}"

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, cluster: ClusterView, config: dict[str, Any]) -> None:
        """Install code where needed, write configs, reset data and the faketime file."""
        self.cluster = cluster
        self.config = {**DEFAULT_CONFIG, **check_node_settings(config)}
        code = self._code_tarball() if cluster.upload_code_to else None
        on_each_node(lambda n: self._setup_node(n, code), cluster.nodes)

    def _code_tarball(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for p in sorted((SOURCE_ROOT / "schemasync").rglob("*.py")):
                if "__pycache__" not in p.parts:
                    tar.add(p, arcname=str(p.relative_to(SOURCE_ROOT)))
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
            **faketime_env(self.faketime_file(node), self.faketime_lib[node]),
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
        on_each_node(self.start, self._cluster().nodes)

    # -- readiness -------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """`wait_ready_async` for callers without an event loop (tests, benchmarks)."""
        asyncio.run(self.wait_ready_async(timeout))

    async def wait_ready_async(self, timeout: float) -> None:
        """Until a Meta Storage leader is known on every node and every node applied the
        leader's commit index; raises TargetError naming the nodes that are not there."""
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
                dead = await in_thread(self._dead, silent)
                if dead:
                    raise TargetError(
                        f"{dead[0]}: node process exited: {self._last_words(dead[0])}"
                    )
            await asyncio.sleep(0.2)

    async def primaries(self, wait_s: float) -> list[str]:
        """The Meta Storage leader the answering nodes name (`leader.leader_of`), asked again
        every 100 ms up to wait_s while none is named (an election)."""
        nodes = self._cluster().nodes
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            answers = await asyncio.gather(
                *(self._status_once(n, ADMIN_TIMEOUT_S) for n in nodes), return_exceptions=True
            )
            views = {n: a for n, a in zip(nodes, answers, strict=True) if isinstance(a, dict)}
            leader = leader_of(views)
            if leader is not None or loop.time() >= deadline:
                return [leader] if leader is not None else []
            await asyncio.sleep(0.1)

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

    async def _status_once(self, node: str, timeout_s: float = 2.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            client = await Client.connect([self.client_address(node)], timeout=timeout_s)
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
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                raw = await Client.connect([self.client_address(node)], timeout=OP_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise ClientError(
                "UNAVAILABLE", f"cannot connect to {node}: {e}", retriable=True, definite=True
            ) from e
        except Exception as e:
            raise client_error(e, indefinite=frozenset()) from e
        return SchemaSyncClient(node, raw)

    async def inhibit_apply(self, node: str, hold: bool) -> dict[str, Any]:
        """admin.inhibit_apply: hold (or release) the node's apply of Meta Storage entries."""
        async with asyncio.timeout(ADMIN_TIMEOUT_S * 2):
            client = await Client.connect([self.client_address(node)], timeout=ADMIN_TIMEOUT_S)
            try:
                return dict(await client.inhibit_apply(hold))
            finally:
                await client.close()

    async def catalog_log(self) -> list[dict[str, Any]]:
        """The catalog versions from the first node that answers (the leader's view first)."""
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

        on_each_node(down, self._cluster().nodes)
