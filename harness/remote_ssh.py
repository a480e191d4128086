"""Nodes reached over SSH with paramiko: key auth only, host keys pinned, never trust on first use.

Used by the ssh backend (real hosts from a nodes file) and by the docker backend, whose containers
run sshd with the host keys they generated at start.
"""

from __future__ import annotations

import base64
import shlex
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import paramiko
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from contract.config_error import WHOLE_FILE, ConfigError, first_problem
from contract.remote import CommandResult, RemoteError
from harness.remote import check_result, pkill_command


@dataclass(frozen=True)
class SshHost:
    """One host of a nodes file: where to reach it and with which key."""

    name: str
    host: str
    port: int = 22
    user: str = "root"
    key: str | None = None
    known_hosts: str | None = None


class NodeEntry(BaseModel):
    """One `[[node]]` table."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[StrictStr, Field(min_length=1)]
    host: Annotated[StrictStr, Field(min_length=1)]
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 22
    user: StrictStr = "root"
    key: StrictStr | None = None  # a private key's path
    known_hosts: StrictStr | None = None  # default: ~/.ssh/known_hosts


class NodesFile(BaseModel):
    """The nodes file: `[[node]]` tables (`[[nodes]]` is accepted too), nothing else."""

    model_config = ConfigDict(extra="forbid", strict=True)

    node: list[NodeEntry] | None = None
    nodes: list[NodeEntry] | None = None


def _nodes_problem(path: Path, error: ValidationError) -> ConfigError:
    """`<file>: node[i]: <key> <why>`: an entry's problems name the entry, then the key."""
    key, why = first_problem(NodesFile, error)
    entry, _, field = key.partition("].")
    if not field:
        return ConfigError(key, why, file=path)
    if why == "is required":
        return ConfigError(f"{entry}]", f"{field} is required (a string)", file=path)
    return ConfigError(f"{entry}]", f"{field}: {why}", file=path)


def load_nodes_file(path: Path) -> list[SshHost]:
    """TOML: [[node]] (or [[nodes]]) name, host, port, user, key (private key path),
    known_hosts (optional; default ~/.ssh/known_hosts). Unknown keys and wrong types are
    refused naming the entry, the key and what is allowed."""
    if not path.is_file():
        raise ConfigError(None, f"nodes file not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(WHOLE_FILE, f"not valid TOML: {e}", file=path) from e
    try:
        parsed = NodesFile.model_validate(data)
    except ValidationError as e:
        raise _nodes_problem(path, e) from None
    entries = parsed.node if parsed.node is not None else parsed.nodes
    if not entries:
        raise ConfigError(WHOLE_FILE, "needs at least one [[node]] table", file=path)
    key_name = "node" if parsed.node is not None else "nodes"
    hosts: list[SshHost] = []
    for i, entry in enumerate(entries):
        key_path = Path(entry.key).expanduser() if entry.key else None
        if key_path is not None and not key_path.is_file():
            raise ConfigError(f"{key_name}[{i}]", f"key file not found: {entry.key}", file=path)
        hosts.append(
            SshHost(
                name=entry.name,
                host=entry.host,
                port=entry.port,
                user=entry.user,
                key=str(key_path) if key_path else None,
                known_hosts=entry.known_hosts,
            )
        )
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise ConfigError(WHOLE_FILE, "node names must be unique", file=path)
    return hosts


class SshRemote:
    """A Remote over one paramiko connection (reconnected on demand, shared across threads)."""

    def __init__(
        self,
        name: str,
        host: str,
        *,
        connect_host: str | None = None,
        port: int = 22,
        user: str = "root",
        key_file: str | None = None,
        host_keys: list[paramiko.PKey] | None = None,
        known_hosts: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.host = host
        self._connect_host = connect_host or host
        self._port = port
        self._user = user
        self._key_file = key_file
        self._host_keys = host_keys or []
        self._known_hosts = known_hosts
        self._connect_timeout = connect_timeout
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self._sudo = "" if user == "root" else "sudo -n "

    def _where(self) -> str:
        return f"{self._user}@{self._connect_host}:{self._port}"

    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._client.close()
            client = paramiko.SSHClient()
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            if self._known_hosts:
                client.load_host_keys(str(Path(self._known_hosts).expanduser()))
            elif not self._host_keys:
                client.load_system_host_keys()
            entry = (
                self._connect_host if self._port == 22 else f"[{self._connect_host}]:{self._port}"
            )
            for key in self._host_keys:
                client.get_host_keys().add(entry, key.get_name(), key)
            try:
                client.connect(
                    self._connect_host,
                    port=self._port,
                    username=self._user,
                    key_filename=self._key_file,
                    timeout=self._connect_timeout,
                    banner_timeout=self._connect_timeout,
                    auth_timeout=self._connect_timeout,
                    allow_agent=False,
                    look_for_keys=self._key_file is None,
                )
            except paramiko.SSHException as e:
                client.close()
                raise RemoteError(self.name, f"ssh to {self._where()} refused: {e}") from e
            except OSError as e:
                client.close()
                raise RemoteError(self.name, f"ssh host {self._where()} unreachable: {e}") from e
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(5)
            self._client = client
            return client

    def wait_reachable(self, timeout: float) -> None:
        """Retry connecting until sshd answers (containers need a moment to start it)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._connect()
                return
            except RemoteError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def _forget(self, client: paramiko.SSHClient) -> None:
        """Close a connection that stopped answering, unless another thread already replaced it."""
        with self._lock:
            if self._client is client:
                self._client = None
        client.close()

    def _open_session(self) -> paramiko.Channel:
        """A session channel, opened within the connect timeout. sshd runs nothing on a channel it
        never confirmed, so one retry on a fresh connection is safe; without it a connection
        whose server side hangs fails every later command."""
        client = self._connect()
        try:
            return _session(client, self._connect_timeout)
        except (paramiko.SSHException, OSError, EOFError):
            self._forget(client)
        client = self._connect()
        try:
            return _session(client, self._connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._forget(client)
            raise RemoteError(
                self.name,
                f"ssh to {self._where()} failed: no session channel within "
                f"{self._connect_timeout}s on two connections: {e}",
            ) from e

    def run(self, cmd: str, timeout: float = 30.0, check: bool = True) -> CommandResult:
        full = f"{self._sudo}sh -c {_quote(cmd)}" if self._sudo else cmd
        channel = self._open_session()
        try:
            channel.settimeout(timeout)
            channel.exec_command(full)
            stdout = channel.makefile("rb")
            stderr = channel.makefile_stderr("rb")
            channel.shutdown_write()
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            code = channel.recv_exit_status()
        except TimeoutError as e:
            raise RemoteError(self.name, f"command timed out after {timeout}s: {cmd[:200]}") from e
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise RemoteError(self.name, f"ssh to {self._where()} failed: {e}") from e
        finally:
            channel.close()
        return check_result(self.name, cmd, CommandResult(code, out, err), check)

    def upload(self, local: Path, remote_path: str) -> None:
        """sftp as the login user; through a temp file and `sudo mv` when that is not root."""
        client = self._connect()
        staging = f"/tmp/.schemachaos-{uuid.uuid4().hex}" if self._sudo else remote_path
        try:
            with client.open_sftp() as sftp:
                sftp.put(str(local), staging)
        except (paramiko.SSHException, OSError) as e:
            raise RemoteError(self.name, f"upload {local} -> {remote_path} failed: {e}") from e
        if self._sudo:
            self.run(f"mv {shlex.quote(staging)} {shlex.quote(remote_path)}")

    def download(self, remote_path: str, local: Path) -> None:
        client = self._connect()
        local.parent.mkdir(parents=True, exist_ok=True)
        staging = remote_path
        if self._sudo:
            staging = f"/tmp/.schemachaos-{uuid.uuid4().hex}"
            user = shlex.quote(self._user)
            self.run(f"cp {shlex.quote(remote_path)} {staging} && chown {user} {staging}")
        try:
            with client.open_sftp() as sftp:
                sftp.get(staging, str(local))
                if staging != remote_path:
                    sftp.remove(staging)
        except (paramiko.SSHException, OSError) as e:
            raise RemoteError(self.name, f"download {remote_path} -> {local} failed: {e}") from e

    def signal(self, pattern: str, sig: str) -> None:
        self.run(pkill_command(pattern, sig), timeout=15.0)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _session(client: paramiko.SSHClient, timeout: float) -> paramiko.Channel:
    transport = client.get_transport()
    if transport is None:
        raise paramiko.SSHException("not connected")
    return transport.open_session(timeout=timeout)


def _quote(cmd: str) -> str:
    return shlex.quote(cmd)


def read_public_key(path: Path) -> paramiko.PKey:
    """A host or user public key from an OpenSSH .pub line."""
    kind, data, *_ = path.read_text().split()
    return paramiko.PKey.from_type_string(kind, base64.b64decode(data))
