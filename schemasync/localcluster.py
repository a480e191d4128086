"""A real local cluster on loopback, for the tests and the benchmarks: TOML configs, one
``python -m schemasync.node`` per node.

Node i (1-based) binds ``{base_addr}.{host_offset+i}`` with the standard ports; every process is
killed when the context exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from schemasync.client import Client, SchemaSyncError

CLIENT_PORT = 10800
METASTORE_PORT = 10900
PEER_PORT = 11000
REPO = Path(__file__).resolve().parents[1]
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# Quick loopback settings; tests override what they measure.
FAST_DEFAULTS: dict[str, Any] = {
    "delay_duration_ms": 100,
    "max_clock_skew_ms": 50,
    "idle_safe_time_interval_ms": 40,
    "election_timeout_min_ms": 300,
    "election_timeout_max_ms": 600,
    "heartbeat_interval_ms": 50,
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def write_config(path: Path, settings: dict[str, Any], nodes: dict[str, str]) -> None:
    """A node TOML file: top-level ``settings`` and one [nodes.<name>] table per host."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in settings.items()]
    for name, host in nodes.items():
        lines += [
            "",
            f"[nodes.{name}]",
            f'host = "{host}"',
            f"client_port = {CLIENT_PORT}",
            f"metastore_port = {METASTORE_PORT}",
            f"peer_port = {PEER_PORT}",
        ]
    path.write_text("\n".join(lines) + "\n")


class LocalCluster:
    """n node processes on loopback; ``voters`` first nodes vote, the rest are learners."""

    def __init__(
        self,
        tmp_path: Path,
        n: int = 5,
        voters: int = 3,
        base_addr: str = "127.0.2",
        config_overrides: dict[str, Any] | None = None,
        toggles: list[str] | tuple[str, ...] = (),
        ready_timeout: float = 30.0,
        host_offset: int = 10,
        faketime: dict[str, str] | None = None,
    ) -> None:
        self.root = tmp_path
        self.names = [f"n{i}" for i in range(1, n + 1)]
        self.hosts = {
            name: f"{base_addr}.{host_offset + i}" for i, name in enumerate(self.names, 1)
        }
        self.voters = self.names[:voters]
        self.learners = self.names[voters:]
        self.ready_timeout = ready_timeout
        self.settings: dict[str, Any] = {**FAST_DEFAULTS, **(config_overrides or {})}
        self.settings["toggles"] = list(toggles)
        self.settings["voters"] = self.voters
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # Per-node clock offsets through libfaketime, e.g. {"n5": "+3s"}; change them live
        # with set_clock_offset.
        self.faketime = dict(faketime or {})
        for name in self.names:
            node_dir = self.root / name
            node_dir.mkdir(parents=True, exist_ok=True)
            write_config(
                self.config_path(name),
                {
                    "name": name,
                    "data_dir": str(node_dir / "data"),
                    "log_file": str(node_dir / "node.log"),
                    **self.settings,
                },
                self.hosts,
            )

    def config_path(self, name: str) -> Path:
        return self.root / name / "node.toml"

    def log_text(self, name: str) -> str:
        path = self.root / name / "node.log"
        return path.read_text() if path.exists() else ""

    def address(self, name: str) -> str:
        return f"{self.hosts[name]}:{CLIENT_PORT}"

    # ---- processes ----------------------------------------------------------------------

    def set_clock_offset(self, name: str, offset: str) -> None:
        """Move a node's wall clock (libfaketime reads the file on every call)."""
        self.faketime[name] = offset
        (self.root / name / "faketime").write_text(offset + "\n")

    def start(self, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if name in self.faketime:
            if not LIBFAKETIME.exists():
                raise RuntimeError(f"libfaketime not found at {LIBFAKETIME}")
            self.set_clock_offset(name, self.faketime[name])
            env.update(
                LD_PRELOAD=str(LIBFAKETIME),
                FAKETIME_TIMESTAMP_FILE=str(self.root / name / "faketime"),
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_NO_CACHE="1",
            )
        out = open(self.root / name / "stdio.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "schemasync.node", "--config", str(self.config_path(name))],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        out.close()

    def kill(self, name: str) -> None:
        """kill -9 and reap."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def _check_addresses_free(self) -> None:
        for name, host in self.hosts.items():
            for port in (CLIENT_PORT, METASTORE_PORT, PEER_PORT):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((host, port))
                    except OSError as e:
                        raise RuntimeError(f"{name}: {host}:{port} is taken: {e}") from None

    def __enter__(self) -> LocalCluster:
        self._check_addresses_free()
        try:
            for name in self.names:
                self.start(name)
            asyncio.run(self.wait_ready(self.names, self.ready_timeout))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- clients ------------------------------------------------------------------------

    async def client(self, name: str, timeout: float = 10.0) -> Client:
        """A client bound to ``name`` only (no failover, so tests know which node answers)."""
        return await Client.connect([self.address(name)], timeout)

    async def status(self, name: str, timeout: float = 2.0) -> dict[str, Any]:
        c = await Client.connect([self.address(name)], timeout)
        try:
            return await c.status()
        finally:
            await c.close()

    async def wait_ready(self, names: list[str], timeout: float) -> None:
        """Until every node reports a leader and applied_index >= 1."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        last: dict[str, str] = {}
        while pending:
            if time.monotonic() > deadline:
                details = {n: last.get(n, "no answer") for n in pending}
                raise TimeoutError(f"nodes not ready in {timeout}s: {details}")
            for name in list(pending):
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}:"
                        f" {(self.root / name / 'stdio.log').read_text()[-2000:]}"
                        f" {self.log_text(name)[-3000:]}"
                    )
                try:
                    st = await self.status(name, 1.0)
                except SchemaSyncError as e:
                    last[name] = e.message
                    continue
                last[name] = str(st)
                if st["leader"] and st["applied_index"] >= 1:
                    pending.remove(name)
            await asyncio.sleep(0.05)

    async def leader(self, timeout: float = 10.0) -> str:
        """The node every live node agrees leads (the newest term seen)."""
        deadline = time.monotonic() + timeout
        while True:
            for name in self.names:
                if not self.alive(name):
                    continue
                try:
                    st = await self.status(name, 1.0)
                except SchemaSyncError:
                    continue
                if st["role"] == "leader":
                    return name
            if time.monotonic() > deadline:
                raise TimeoutError("no leader")
            await asyncio.sleep(0.05)
