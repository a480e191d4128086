"""Local backend: node processes on this machine, node i bound to its own loopback address.

Each node gets 127.0.0.(10+i), so iptables rules on `lo` can cut one node off from another.
Every process started through it carries SCHEMACHAOS_RUN in its environment, which is how
`clean` finds what a crashed controller left. Faults (iptables) need root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

from contract.remote import CommandResult, RemoteError
from harness.remote import check_result, normalize_signal

RUN_ENV = "SCHEMACHAOS_RUN"
PORTS = (10800, 10900, 11000)


def local_address(index: int, base: str = "127.0.0.10") -> str:
    """Address of node number `index` (1-based): base + index, 127.0.0.11 for n1 by default."""
    parts = [int(p) for p in base.split(".")]
    last = parts[3] + index
    if parts[0] != 127 or not 0 < last < 255:
        raise ValueError(f"local address out of 127.0.0.0/8 range: {base} + {index}")
    return ".".join(str(p) for p in [*parts[:3], last])


def is_root() -> bool:
    return os.geteuid() == 0


def check_ports_free(addresses: list[str], ports: tuple[int, ...] = PORTS) -> None:
    """Raise RemoteError naming the first address:port that something already listens on."""
    for address in addresses:
        for port in ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((address, port))
                except OSError as e:
                    raise RemoteError(
                        "local", f"port in use: {address}:{port} ({e.strerror})"
                    ) from e


class LocalRemote:
    """A Remote whose commands run here, as this user, tagged with the run id."""

    def __init__(self, name: str, host: str, run_id: str) -> None:
        self.name = name
        self.host = host
        self.run_id = run_id
        self._env = {**os.environ, RUN_ENV: run_id, "SCHEMACHAOS_NODE": name}

    def run(self, cmd: str, timeout: float = 30.0, check: bool = True) -> CommandResult:
        try:
            proc = subprocess.run(
                ["bash", "-c", cmd],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self._env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise RemoteError(self.name, f"command timed out after {timeout}s: {cmd[:200]}") from e
        return check_result(
            self.name, cmd, CommandResult(proc.returncode, proc.stdout, proc.stderr), check
        )

    def upload(self, local: Path, remote_path: str) -> None:
        dest = Path(remote_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if local.resolve() != dest.resolve():
            shutil.copyfile(local, dest)

    def download(self, remote_path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            if Path(remote_path).resolve() != local.resolve():
                shutil.copyfile(remote_path, local)
        except OSError as e:
            raise RemoteError(self.name, f"download {remote_path} failed: {e}") from e

    def signal(self, pattern: str, sig: str) -> None:
        """pkill with an argv (no shell), so only the node processes can match the pattern."""
        proc = subprocess.run(
            ["pkill", f"-{normalize_signal(sig)}", "-f", "--", pattern],
            capture_output=True,
            text=True,
            timeout=15,
        )
        if proc.returncode > 1:
            raise RemoteError(self.name, f"pkill failed: {proc.stderr.strip()}")

    def close(self) -> None:
        pass


def tagged_processes(run_id: str | None = None) -> list[int]:
    """PIDs whose environment carries our run tag: exactly `run_id` (never a prefix), or any
    run's when run_id is None. An empty id is a ValueError, never "all"."""
    if run_id == "":
        raise ValueError("an empty run id names no run")
    found: list[int] = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(RUN_ENV.encode() + b"="):
                value = item.split(b"=", 1)[1].decode(errors="replace")
                if run_id is None or value == run_id:
                    found.append(int(entry.name))
                break
    return found


def kill_tagged(run_id: str | None = None) -> list[int]:
    """SIGKILL every process tagged with the run (every run's if None; stopped ones too) and
    return their PIDs."""
    import signal

    pids = tagged_processes(run_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
