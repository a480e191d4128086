"""Nothing outlives a run, even after SIGKILL: a guard per run that the controller holds open.

Docker: one small reaper container (testcontainers' Ryuk; its program is reaper_agent.py)
holds a TCP connection from the controller and removes the run's labelled containers and
network when that connection drops; if it dropped without a `bye` (the controller died), it
first collects the catalog log from the nodes into the run directory, so that the history
prefix is still judged (`clean` does the same when the reaper died too: `salvage_with_sdk`).
Local: a detached watchdog process (harness/watchdog.py) holds a pipe from the controller
and kills the run's tagged processes on EOF. The kernel closes the controller's end on any
death, so neither needs the controller to cooperate. A clean teardown removes everything
itself first, then says `bye` and waits for the guard to go.
SSH: a watchdog per host (lease_agent.py) that sweeps when the controller stops renewing its
lease (a file the controller touches every LEASE_RENEW_S over the Remote).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from contract.remote import Remote
from contract.rundir import CATALOG, HISTORY, REAPER_LOG, TMP
from harness.cluster_spec import REMOTE_IPTABLES_CLEAN, ProvisionError, SshHosts, check_run_id
from harness.reaper_agent import SalvagePlan, salvage_catalog, write_owned

log = logging.getLogger("schemachaos.reaper")

REPO_ROOT = Path(__file__).resolve().parent.parent
AGENT_SOURCE = Path(__file__).with_name("reaper_agent.py")
NODE_CATALOG_SOURCE = Path(__file__).with_name("node_catalog.py")  # run in a node's container
RUN_DIR_MOUNT = "/schemachaos-run"  # where the reaper sees the run directory
REAPER_LABEL = "schemachaos.reaper"  # not schemachaos.run: the run's own teardown spares it
AGENT_PORT = 7777
CONNECT_TIMEOUT_S = 60.0  # the agent reaps anyway if no controller connects in this time
STOP_TIMEOUT_S = 15.0
LEASE_AGENT_SOURCE = Path(__file__).with_name("lease_agent.py")
LEASE_S = 10.0  # sweep + poll stay within 15 s of the controller's death
LEASE_RENEW_S = 1.5  # a few missed renewals (a slow ssh exec) do not expire the lease
# The local watchdog's tag. Not RUN_ENV: teardown's kill_tagged must not kill it before `bye`.
WATCHDOG_ENV = "SCHEMACHAOS_WATCHDOG"


class RunGuard(Protocol):
    """Held for the whole run; `close()` is the clean teardown's goodbye."""

    def close(self) -> None: ...


class NoGuard:
    def close(self) -> None:
        pass


# -- docker -------------------------------------------------------------------------------


class DockerReaper:
    """The controller's end of a run's reaper container."""

    def __init__(self, client: Any, container: Any, sock: socket.socket) -> None:
        self._client = client
        self._container = container
        self._sock = sock

    @classmethod
    def start(cls, run_id: str, work_dir: Path | None = None) -> DockerReaper:
        """Start the reaper container and connect to it; ProvisionError if it cannot be held.
        Given the run's temp area, it also gets the run directory (its parent), where it
        collects the catalog log if the controller dies."""
        from harness.remote_docker import DockerUnavailable, docker_client

        run_dir = work_dir.parent if work_dir is not None and work_dir.name == TMP else None
        try:
            client = docker_client()
            container = _start_agent(client, run_id, run_dir)
        except DockerUnavailable as e:
            raise ProvisionError(str(e)) from e
        try:
            sock = _connect_agent(container, run_id)
        except Exception as e:
            with contextlib.suppress(Exception):
                container.remove(force=True)
            raise ProvisionError(f"reaper container: {e}") from e
        log.info("reaper %s holds run %s", container.name, run_id)
        return cls(client, container, sock)

    def close(self) -> None:
        """Say bye (the agent reaps what is left, normally nothing) and wait until it is gone."""
        import docker.errors

        with contextlib.suppress(OSError):
            self._sock.sendall(b"bye\n")
        self._sock.close()
        try:
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    self._client.containers.get(self._container.id)
                except docker.errors.NotFound:
                    return
                time.sleep(0.1)
            log.warning("reaper %s did not exit; removing it", self._container.name)
            with contextlib.suppress(docker.errors.NotFound):
                self._container.remove(force=True)
        finally:
            self._client.close()


def _start_agent(client: Any, run_id: str, run_dir: Path | None) -> Any:
    """The reaper container, with the run directory bind-mounted for the catalog log when
    the engine can mount it (an engine on another host cannot: then it only reaps)."""
    import docker.errors
    from docker.types import Mount

    from harness.images import ensure_images
    from harness.remote_docker import LABEL

    # always the schemasync node image, whatever the target runs: it has python3 (the postgres
    # image does not); its layer builds from the base in seconds
    image = ensure_images(client).node
    socket_mount = Mount("/var/run/docker.sock", "/var/run/docker.sock", type="bind")
    args = [run_id, str(AGENT_PORT), str(CONNECT_TIMEOUT_S)]
    mounts = [socket_mount]
    if run_dir is not None:  # a bind Mount (not a volume spec) is refused, never made up
        args.append(salvage_plan(RUN_DIR_MOUNT).to_arg())
        mounts.append(Mount(RUN_DIR_MOUNT, str(run_dir), type="bind"))

    def run(args: list[str], mounts: list[Any]) -> Any:
        return client.containers.run(
            image,
            entrypoint=["python3", "-c", AGENT_SOURCE.read_text()],
            command=args,
            name=f"schemachaos-{run_id}-reaper",
            labels={LABEL: "1", REAPER_LABEL: run_id},
            mounts=mounts,
            ports={f"{AGENT_PORT}/tcp": ("127.0.0.1", None)},
            auto_remove=True,
            detach=True,
        )

    try:
        return run(args, mounts)
    except docker.errors.APIError as e:
        if len(mounts) == 1:
            raise
        # it still reaps the nodes the moment the controller's connection drops, so nothing
        # is left for `clean` to collect either
        why = "if the controller is killed, the run's catalog log is lost (analyze: unknown)"
        log.warning("the reaper cannot mount %s (%s): %s", run_dir, e, why)
        with contextlib.suppress(docker.errors.APIError):  # a name a failed start took
            client.containers.get(f"schemachaos-{run_id}-reaper").remove(force=True)
        return run(args[:3], [socket_mount])


def salvage_plan(run_dir: str) -> SalvagePlan:
    """How a dead run's catalog log is collected into `run_dir` (as the collector sees it):
    the nemeses' iptables rules undone in each node's container, then each node asked."""
    return SalvagePlan(
        run_dir=run_dir,
        catalog=CATALOG,
        log=REAPER_LOG,
        history=HISTORY,
        heal=REMOTE_IPTABLES_CLEAN,
        dump=NODE_CATALOG_SOURCE.read_text(),
    )


def salvage_with_sdk(client: Any, run_id: str, run_dir: Path) -> str:
    """For `clean` of a run whose controller and reaper both died: the reaper's collection,
    run from here through the Docker SDK; one line saying what came of it, also left in the
    run's reaper log as the reaper would have."""
    from harness.remote_docker import RUN_LABEL

    running = client.containers.list(filters={"label": f"{RUN_LABEL}={check_run_id(run_id)}"})
    containers = {c.id: c.name for c in running}

    def exec_in(cid: str, argv: list[str]) -> tuple[int, bytes, bytes]:
        code, (out, err) = client.containers.get(cid).exec_run(argv, demux=True)
        return int(code if code is not None else -1), out or b"", err or b""

    note = salvage_catalog(exec_in, containers, salvage_plan(str(run_dir)))
    with contextlib.suppress(OSError):  # the note is also clean's output
        write_owned(run_dir, REAPER_LOG, f"clean {run_id}: {note}\n", append=True)
    return note


def reaper_exists(client: Any, run_id: str) -> bool:
    """Whether the run's reaper container is still there (running or on its way out): then
    its controller lives, or the reaper is collecting the catalog log itself."""
    label = f"{REAPER_LABEL}={check_run_id(run_id)}"
    return bool(client.containers.list(all=True, filters={"label": label}))


def _connect_agent(container: Any, run_id: str) -> socket.socket:
    """Connect through the published port; only the agent's greeting counts (docker-proxy
    accepts connections before anything listens in the container)."""
    container.reload()
    binding = (container.ports.get(f"{AGENT_PORT}/tcp") or [{}])[0]
    port = int(binding.get("HostPort", 0))
    if not port:
        raise OSError("no published port")
    expected = f"reaper {run_id}\n".encode()
    deadline = time.monotonic() + 30
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError as e:
            last = e
            time.sleep(0.1)
            continue
        greeting = b""
        with contextlib.suppress(OSError):
            while not greeting.endswith(b"\n") and len(greeting) < 200:
                chunk = sock.recv(200)
                if not chunk:
                    break
                greeting += chunk
        if greeting == expected:
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            return sock
        sock.close()
        last = OSError(f"no greeting (got {greeting[:60]!r})")
        container.reload()
        if container.status not in ("created", "running"):
            raise OSError(f"the reaper exited: {container.logs(tail=5).decode(errors='replace')}")
        time.sleep(0.1)
    raise OSError(f"cannot reach the reaper on 127.0.0.1:{port}: {last}")


# -- local --------------------------------------------------------------------------------


class LocalWatchdog:
    """The controller's end (the write side of a pipe) of a run's detached watchdog."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @classmethod
    def start(cls, run_id: str, addresses: list[str], log_path: Path) -> LocalWatchdog:
        from harness.remote_local import RUN_ENV

        env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
        env[WATCHDOG_ENV] = run_id
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.watchdog", run_id, *addresses],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,  # its one `ready` line, then it writes to the log
                stderr=out,
                env=env,
                cwd="/",
                start_new_session=True,  # Ctrl-C to the controller's group must not reach it
            )
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # b"" if it died at start
        proc.stdout.close()
        if ready != b"ready\n":
            proc.kill()
            proc.wait(timeout=5)
            raise ProvisionError(f"the run's watchdog did not start (see {log_path})")
        log.info("watchdog %d holds run %s", proc.pid, run_id)
        return cls(proc)

    def close(self) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.write(b"bye\n")
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("watchdog %d did not exit; killing it", self._proc.pid)
            self._proc.kill()
            self._proc.wait(timeout=5)


def watchdog_processes(run_id: str | None = None) -> list[int]:
    """PIDs of local watchdogs (of one run, or of any run), found by their environment tag."""
    tag = WATCHDOG_ENV.encode() + b"="
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        value = next((i[len(tag) :] for i in environ if i.startswith(tag)), None)
        if value is not None and (run_id is None or value.decode(errors="replace") == run_id):
            found.append(int(entry.name))
    return found


def remove_guards(run_id: str | None = None) -> list[str]:
    """For `schemachaos clean`: the reaper containers and watchdogs left (of one run, matched
    exactly, or all when run_id is None; an empty or malformed id is a ValueError).

    Killed, not told bye: clean removes the run's things itself."""
    if run_id is not None:
        check_run_id(run_id)
    removed: list[str] = []
    for pid in watchdog_processes(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.append(f"watchdog {pid}")
    try:
        from harness.remote_docker import DockerUnavailable, docker_client, labelled_containers

        client = docker_client(timeout=10)
    except DockerUnavailable:
        return removed
    label = REAPER_LABEL if run_id is None else f"{REAPER_LABEL}={check_run_id(run_id)}"
    for container in labelled_containers(client, label):
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(f"reaper container {container.name}")
    return removed


# -- ssh ----------------------------------------------------------------------------------


class SshLeases:
    """The run's lease on each SSH host, renewed from a thread until close() deletes it.

    Its own connections (not the cluster's): it starts before provisioning connects, and a
    renewal never waits behind a node command."""

    def __init__(self, remotes: dict[str, Remote], lease: str) -> None:
        self._remotes = remotes
        self._lease = lease
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="lease-renewer", daemon=True)

    @classmethod
    def start(cls, run_id: str, hosts: SshHosts) -> SshLeases:
        """`hosts`: the nodes file as the run read it (it is read once)."""
        from contract.remote import RemoteError
        from harness.cluster_spec import REMOTE_IPTABLES_CLEAN, SSH_ROOT
        from harness.remote import pkill_command
        from harness.remote_ssh import SshRemote

        remotes: dict[str, Remote] = {
            h.name: SshRemote(
                h.name, h.host, port=h.port, user=h.user, key_file=h.key,
                known_hosts=h.known_hosts,
            )
            for h in hosts
        }  # fmt: skip
        lease = f"{SSH_ROOT}/lease-{run_id}"
        sweep = pkill_command(f"schemasync.node --config {SSH_ROOT}/", "KILL")
        sweep = f"{sweep}; {REMOTE_IPTABLES_CLEAN}"
        agent = " ".join(
            shlex.quote(a)
            for a in (
                "python3", "-c", LEASE_AGENT_SOURCE.read_text(), lease, str(LEASE_S),
                base64.b64encode(sweep.encode()).decode(),
            )
        )  # fmt: skip
        leases = cls(remotes, lease)
        try:
            for remote in remotes.values():
                remote.run(
                    f"mkdir -p {SSH_ROOT} && touch {shlex.quote(lease)} && "
                    f"(setsid nohup {agent} >{shlex.quote(lease)}.log 2>&1 </dev/null &)",
                    timeout=15,
                )
        except RemoteError as e:
            leases.close()
            raise ProvisionError(f"ssh host {e}") from e
        leases._renewer.start()
        log.info("lease %s holds run %s on %d hosts", lease, run_id, len(remotes))
        return leases

    def _renew(self) -> None:
        from contract.remote import RemoteError

        while not self._stop.wait(LEASE_RENEW_S):
            for remote in self._remotes.values():
                try:
                    remote.run(f"touch -c {shlex.quote(self._lease)}", timeout=LEASE_RENEW_S * 2)
                except RemoteError as e:
                    log.warning("renewing the lease on %s: %s", remote.name, e)

    def close(self) -> None:
        """Stop renewing, delete the lease (the agents exit without sweeping), disconnect."""
        self._stop.set()
        if self._renewer.is_alive():
            self._renewer.join(timeout=LEASE_RENEW_S * 3)
        for remote in self._remotes.values():
            try:
                lease = shlex.quote(self._lease)
                remote.run(f"rm -f {lease} {lease}.log", timeout=15)
            except Exception as e:  # that host's agent sweeps once the lease expires
                log.warning("removing the lease on %s: %s", remote.name, e)
            finally:
                remote.close()
