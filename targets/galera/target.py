"""MariaDB Galera Cluster as a target: every node takes writes and DDL (multi-master).

n1 bootstraps the cluster once (`--wsrep-new-cluster`); the others join it by rsync SST. After
a crash a node restarts plain and rejoins (IST, or SST when the gcache no longer covers it).
Only when no running node is in a primary component (every node was killed, or the survivors
lost quorum) does the target bootstrap again, and then exactly one node: the one with the
highest position (`grastate.dat`, else `mariadbd --wsrep-recover`), which gets
`safe_to_bootstrap: 1`; the decision is taken under one lock, so two restarts never both
bootstrap. Docker only: on `local` all nodes would share one host's ports 3306/4567 and
/run/mysqld; on `ssh` the hosts need `mariadb-server galera-4 rsync` installed.
"""

from __future__ import annotations

import base64
import logging
import shlex
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contract.remote import Remote, RemoteError
from contract.target import PER_NODE_COPIES, ClusterView
from harness.faketime import faketime_env
from harness.remote import on_each_node
from targets.galera.catalog_log import BOOTSTRAP_SQL, CatalogState
from targets.galera.client import GaleraClient
from targets.galera.server import (
    APP_DB,
    CLIENT_PORT,
    GROUP_PORT,
    PROVIDER,
    SERVER,
    SOCKET,
    USER,
    GaleraTargetError,
    grastate_safe_to_bootstrap,
    recovered_seqno,
    server_config,
    validated,
)

log = logging.getLogger("schemachaos.target.galera")

START_TIMEOUT_S = 120.0
MERGE_TIMEOUT_S = 30.0  # the run gives catalog_log() 60 s
INHIBIT_TAG = "schemachaos-galera-inhibit"  # the FTWRL session that holds a node's apply


class GaleraTarget:
    """Target for a MariaDB Galera Cluster of 3 or more nodes, all of them writable."""

    name = "galera"
    clock = "none"
    capabilities = frozenset({"catalog-log", "probe-now", "real-time", PER_NODE_COPIES})
    # `inhibit` (hold a node's apply) is Galera's own: FLUSH TABLES WITH READ LOCK desyncs the
    # node and pauses its appliers. `drop` and `tbf` stay generic, on the gcomm port.
    own_lagging_modes = frozenset({"inhibit"})

    def __init__(self) -> None:
        self.cluster: ClusterView | None = None
        self.config: dict[str, Any] = validated({})
        self.catalog = CatalogState()
        self._start_lock = threading.Lock()
        self.bootstraps: list[str] = []  # every bootstrap, in order: proof of "only once" each

    @staticmethod
    def check_settings(config: Mapping[str, Any]) -> dict[str, Any]:
        """The settings with their defaults, or SettingsError naming the key."""
        return validated(config)

    @staticmethod
    def docker_image() -> str:
        from targets.galera.image import ensure_galera_image

        return ensure_galera_image()

    # -- layout ----------------------------------------------------------------------------
    def _cluster(self) -> ClusterView:
        if self.cluster is None:
            raise GaleraTargetError("target used before setup()")
        return self.cluster

    def _remote(self, node: str) -> Remote:
        return self._cluster().remotes[node]

    def host(self, node: str) -> str:
        return self._remote(node).host

    def root(self, node: str) -> str:
        return self._cluster().node_dirs[node]

    def faketime_file(self, node: str) -> str:
        """The file the clock nemesis writes this node's offset to (mariadbd runs under it)."""
        return f"{self.root(node)}/faketime"

    def _run(self, node: str, command: str, timeout: float = 60.0, check: bool = True) -> str:
        try:
            return self._remote(node).run(command, timeout=timeout, check=check).stdout
        except RemoteError as e:
            raise GaleraTargetError(f"{node}: {e}") from e

    def _sql(self, node: str, sql: str, check: bool = True, timeout: float = 30.0) -> str:
        """A statement as the server's root (unix socket), tab-separated rows out."""
        cmd = f"mariadb --protocol=socket -S {SOCKET} -uroot -N -B -e {shlex.quote(sql)}"
        return self._run(node, cmd, timeout=timeout, check=check).strip()

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, cluster: ClusterView, config: dict[str, Any]) -> None:
        """Check the backend and binaries, stop whatever ran before, wipe the data dirs."""
        if cluster.shared_host:
            raise GaleraTargetError(
                "the galera target does not run on the local backend: its nodes would share "
                "one host's ports 3306/4567/4568/4444 and /run/mysqld (use --backend docker)"
            )
        if len(cluster.nodes) < 3:
            raise GaleraTargetError("the galera target needs >= 3 nodes (a quorum survives one)")
        self.cluster = cluster
        self.config = validated(config)
        self.catalog = CatalogState()
        self.bootstraps.clear()
        # The lagging nemesis's `drop` and `tbf` then aim at write-set replication alone.
        cluster.ports = {
            "client_port": CLIENT_PORT,
            "metastore_port": GROUP_PORT,
            "peer_port": GROUP_PORT,
        }
        on_each_node(self._setup_node, cluster.nodes)

    def _setup_node(self, node: str) -> None:
        missing = self._run(
            node,
            f"for f in {SERVER} {PROVIDER} /usr/bin/rsync; do test -e $f || echo $f; done",
        ).split()
        if missing:
            raise GaleraTargetError(
                f"{node}: {', '.join(missing)} missing (the galera image installs "
                "mariadb-server galera-4 rsync)"
            )
        root = shlex.quote(self.root(node))
        self._run(node, "pkill -KILL -u mysql; true", check=False)
        self._run(
            node,
            f"rm -rf {root} && mkdir -p {root}/data /run/mysqld && "
            f"chown -R mysql:mysql {root} /run/mysqld && printf '+0' > {root}/faketime && "
            f"chmod 0644 {root}/faketime",
        )
        peers = [self.host(n) for n in self._cluster().nodes]
        conf = server_config(node, self.host(node), peers, self.root(node), self.config)
        self._write(node, f"{self.root(node)}/my.cnf", conf)

    def _write(self, node: str, path: str, text: str) -> None:
        encoded = base64.b64encode(text.encode()).decode()
        self._run(node, f"printf %s {encoded} | base64 -d > {shlex.quote(path)}")

    def start_all(self) -> None:
        """n1 bootstraps a new cluster (once), the others join it one by one (rsync SST)."""
        nodes = self._cluster().nodes
        first = nodes[0]
        self._run(
            first,
            f"mariadb-install-db --user=mysql --datadir={shlex.quote(self.root(first))}/data "
            "--auth-root-authentication-method=socket --skip-test-db >/dev/null",
            timeout=120,
        )
        self._launch(first, bootstrap=True)
        self._await_state(first, START_TIMEOUT_S)
        for sql in (
            f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY ''",
            f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION",
            f"CREATE DATABASE IF NOT EXISTS `{APP_DB}`",
            *BOOTSTRAP_SQL,
        ):
            self._sql(first, sql)
        # All joiners at once: a donor serves one rsync SST at a time, the next joiner retries
        # each second and takes whichever node is Synced first.
        for node in nodes[1:]:
            self._launch(node, bootstrap=False)
        on_each_node(lambda n: self._await_state(n, START_TIMEOUT_S), nodes[1:])

    def _launch(self, node: str, bootstrap: bool) -> None:
        """mariadbd in the background under libfaketime (the clock nemesis's file)."""
        env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in faketime_env(self.faketime_file(node)).items()
        )
        flags = " --wsrep-new-cluster" if bootstrap else ""
        cnf = shlex.quote(f"{self.root(node)}/my.cnf")
        out = shlex.quote(f"{self.root(node)}/mariadbd.out")
        if bootstrap:
            self.bootstraps.append(node)
        self._run(
            node,
            f"mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld; "
            f"setsid env {env} {SERVER} --defaults-file={cnf}{flags} </dev/null >>{out} 2>&1 &",
        )
        log.info("launched %s%s", node, " (bootstrap)" if bootstrap else "")

    def _running(self, node: str) -> bool:
        out = self._run(node, "pgrep -u mysql -x mariadbd || true", check=False)
        return bool(out.strip())

    def wsrep_status(self, node: str) -> dict[str, str]:
        """The node's wsrep status variables, lower-case names ({} if it does not answer)."""
        try:
            out = self._sql(node, "SHOW GLOBAL STATUS LIKE 'wsrep_%'", check=True, timeout=10)
        except GaleraTargetError:
            return {}
        status = {}
        for line in out.splitlines():
            name, _, value = line.partition("\t")
            status[name.lower()] = value
        return status

    def _primary(self, node: str) -> bool:
        return self.wsrep_status(node).get("wsrep_cluster_status") == "Primary"

    def _await_state(self, node: str, timeout: float) -> None:
        """Until the node is Synced in the primary component, or its process died."""
        started = time.monotonic()
        deadline = started + timeout
        status: dict[str, str] = {}
        while time.monotonic() < deadline:
            status = self.wsrep_status(node)
            if (
                status.get("wsrep_cluster_status") == "Primary"
                and status.get("wsrep_local_state_comment") == "Synced"
            ):
                return
            # A launch is asynchronous: only a process gone after a grace period is dead.
            if not status and time.monotonic() > started + 5 and not self._running(node):
                tail = self._run(node, f"tail -n 5 {self.root(node)}/mariadb.log", check=False)
                raise GaleraTargetError(f"{node}: mariadbd exited: {tail.strip()}")
            time.sleep(0.5)
        raise GaleraTargetError(f"{node}: not Synced in a primary component: {status or 'down'}")

    def start(self, node: str) -> None:
        """Restart a node after a kill or stop: it rejoins a primary component if one runs;
        if none does, exactly one node (the most advanced) bootstraps first."""
        with self._start_lock:
            if self._running(node):
                return
            nodes = self._cluster().nodes
            alive = [n for n in nodes if n != node and self._running(n)]
            if not any(self._primary(n) for n in alive):
                self._bootstrap_best(node, alive)
                if self._running(node):
                    return
            self._launch(node, bootstrap=False)
        self._await_state(node, START_TIMEOUT_S)

    def _position(self, node: str) -> tuple[int, bool]:
        """(seqno, safe_to_bootstrap) of a stopped node: grastate.dat after a clean stop,
        `--wsrep-recover` (InnoDB's own record) after a crash (grastate then says -1)."""
        data = f"{self.root(node)}/data"
        grastate = self._run(node, f"cat {shlex.quote(data)}/grastate.dat 2>/dev/null || true")
        seqno, safe = grastate_safe_to_bootstrap(grastate)
        if seqno is None:
            cnf = shlex.quote(f"{self.root(node)}/my.cnf")
            rec = shlex.quote(f"{self.root(node)}/wsrep-recover.log")
            self._run(
                node,
                f"{SERVER} --defaults-file={cnf} --wsrep-recover --log-error={rec} "
                ">/dev/null 2>&1; true",
                timeout=120,
            )
            seqno = recovered_seqno(self._run(node, f"cat {rec} 2>/dev/null || true"))
        return (seqno if seqno is not None else -1), safe

    def _bootstrap_best(self, node: str, alive: list[str]) -> None:
        """No primary component runs: bring one back from the most advanced node, once."""
        candidates: dict[str, tuple[int, bool]] = {}
        for n in alive:  # a survivor without quorum: its applied position
            seqno = int(self.wsrep_status(n).get("wsrep_last_committed", "-1") or -1)
            candidates[n] = (seqno, False)
        for n in self._cluster().nodes:
            if n not in alive:
                candidates[n] = self._position(n)
        # Ties go to a node still running (no restart), then to a clean stop's grastate.
        best = max(
            candidates, key=lambda n: (candidates[n][0], n in alive, candidates[n][1], n == node)
        )
        log.warning("no primary component: bootstrapping %s from %s", best, candidates)
        if best in alive:
            self.bootstraps.append(best)
            self._sql(best, "SET GLOBAL wsrep_provider_options='pc.bootstrap=YES'")
        else:
            data = shlex.quote(f"{self.root(best)}/data")
            self._run(
                best,
                f"test -f {data}/grastate.dat && "
                f"sed -i 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' {data}/grastate.dat; true",
            )
            self._launch(best, bootstrap=True)
        self._await_state(best, START_TIMEOUT_S)

    def stop(self, node: str) -> None:
        self.resume(node)
        self._run(node, "pkill -TERM -u mysql -x mariadbd; true", check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._running(node):
            time.sleep(0.3)

    def kill(self, node: str) -> None:
        """SIGKILL to the server (and an SST in flight): a crash, recovered on restart."""
        self._run(node, "pkill -KILL -u mysql; true", check=False)

    def pause(self, node: str) -> None:
        self._run(node, "pkill -STOP -u mysql; true", check=False)

    def resume(self, node: str) -> None:
        self._run(node, "pkill -CONT -u mysql; true", check=False)

    def teardown(self) -> None:
        if self.cluster is None:
            return
        for node in self._cluster().nodes:
            try:
                self.unlag(node)
                self.kill(node)
            except Exception as e:
                log.warning("teardown of %s: %s", node, e)

    # -- the lag fault (own mode: inhibit) -------------------------------------------------
    def lag(self, node: str, mode: str | None = None) -> dict[str, Any]:
        """Hold a node's apply: a session keeps FLUSH TABLES WITH READ LOCK, which desyncs
        the node (it leaves flow control) and pauses its appliers while it serves reads."""
        how = mode or "inhibit"
        if how != "inhibit":
            raise ValueError(f"the galera target lags a node only by 'inhibit', not {how!r}")
        before = self.wsrep_status(node).get("wsrep_last_committed")
        sql = f"FLUSH TABLES WITH READ LOCK; SELECT SLEEP(3600) AS `{INHIBIT_TAG}`"
        cmd = f"mariadb --protocol=socket -S {SOCKET} -uroot -e {shlex.quote(sql)}"
        self._run(node, f"setsid {cmd} </dev/null >/dev/null 2>&1 &")
        return {"node": node, "mode": how, "last_committed": before}

    def unlag(self, node: str) -> dict[str, Any]:
        """Release the FTWRL session whatever is recorded (heal must not depend on it)."""
        ids = self._sql(
            node,
            "SELECT id FROM information_schema.PROCESSLIST "
            f"WHERE INFO LIKE '%{INHIBIT_TAG}%' AND INFO NOT LIKE '%PROCESSLIST%'",
            check=False,
        )
        for pid in ids.split():
            if pid.isdigit():
                self._sql(node, f"KILL {pid}", check=False)  # ends the session: lock released
        return {"node": node, "last_committed": self.wsrep_status(node).get("wsrep_last_committed")}

    # -- readiness -------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Until every node is Synced in one primary component of all the nodes."""
        nodes = self._cluster().nodes
        deadline = time.monotonic() + timeout
        why = "no answer"
        while time.monotonic() < deadline:
            states = {n: self.wsrep_status(n) for n in nodes}
            bad = [
                f"{n}: {s.get('wsrep_cluster_status', 'down')}/"
                f"{s.get('wsrep_local_state_comment', '-')}/size {s.get('wsrep_cluster_size')}"
                for n, s in states.items()
                if s.get("wsrep_cluster_status") != "Primary"
                or s.get("wsrep_local_state_comment") != "Synced"
                or s.get("wsrep_cluster_size") != str(len(nodes))
            ]
            if not bad:
                return
            why = "; ".join(bad)
            time.sleep(0.5)
        raise GaleraTargetError(f"galera not ready after {timeout:.0f}s: {why}")

    # -- observation -----------------------------------------------------------------------
    def collect_logs(self, node: str, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        remote = self._remote(node)
        root = self.root(node)
        for name in ("mariadb.log", "mariadbd.out", "my.cnf", "wsrep-recover.log"):
            path = f"{root}/{name}"
            if remote.run(f"test -f {shlex.quote(path)}", check=False).exit_code != 0:
                continue
            try:
                remote.download(path, dest / name)
            except RemoteError as e:
                log.warning("log %s of %s not collected: %s", name, node, e)
        grastate = f"{root}/data/grastate.dat"
        if remote.run(f"test -f {grastate}", check=False).exit_code == 0:
            try:
                remote.download(grastate, dest / "grastate.dat")
            except RemoteError as e:
                log.warning("grastate.dat of %s not collected: %s", node, e)

    def _client(self, node: str) -> GaleraClient:
        return GaleraClient(
            node,
            self._cluster_hosts(),
            self.catalog,
            int(self.config["sync_wait"]),
            str(self.config["osu_method"]),
        )

    def _cluster_hosts(self) -> dict[str, str]:
        return {n: self.host(n) for n in self._cluster().nodes}

    async def client(self, node: str) -> GaleraClient:
        client = self._client(node)
        try:
            await client.connect()
        except Exception:
            await client.close()
            raise
        return client

    def await_primary(self, timeout: float) -> list[str]:
        """Until every node is Synced in the primary component (a healed partition or lag
        takes seconds to merge); the nodes that are not by the deadline. A node voted out
        after an apply error stays out: restarting it would hide what the run found."""
        deadline = time.monotonic() + timeout
        nodes = self._cluster().nodes
        while True:
            out = []
            for n in nodes:
                s = self.wsrep_status(n)
                if (
                    s.get("wsrep_cluster_status") != "Primary"
                    or s.get("wsrep_local_state_comment") != "Synced"
                ):
                    out.append(n)
            if not out or time.monotonic() > deadline:
                return out
            time.sleep(0.5)

    async def catalog_log(self) -> list[dict[str, Any]]:
        """catalog.jsonl: every version that took effect. Called after the heal and before
        the final reads: first waits for the nodes to merge back into one primary component,
        then decides a DDL still undecided by its marker."""
        import asyncio

        outside = await asyncio.to_thread(self.await_primary, MERGE_TIMEOUT_S)
        if outside:
            log.warning("not Synced in the primary component: %s", ", ".join(outside))
        if self.catalog.pending is not None:
            async with self.catalog.lock:
                for node in self._cluster().nodes:
                    client = self._client(node)
                    try:
                        await client.resolve_pending()
                        break
                    except Exception as e:
                        log.warning("catalog version undecided via %s: %s", node, e)
                    finally:
                        await client.close()
        return self.catalog.lines()
