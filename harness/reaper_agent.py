"""The program inside a run's reaper container (testcontainers' Ryuk, in stdlib Python).

It holds one TCP connection from the controller; when that connection ends for any reason (a
`bye`, EOF, a reset: the controller died, even by SIGKILL) it removes every container and
network labelled with the run's id through the bind-mounted Docker socket, then exits, and
the engine removes the reaper itself (auto-remove). It is shipped as `python3 -c <this file>`
into the node image, so it may import nothing but the standard library.

A controller that died (no `bye`) never wrote the run's catalog log, so a later `analyze` could
not judge the history prefix it left. Given a salvage plan, the reaper first collects that log
from the nodes still running (`salvage_catalog`: the nemeses' rules undone, then each node's
own answer, the longest kept once it stops growing, and only if it reaches every version the
history acknowledged) into the run directory, bind-mounted. The same collection serves
`schemachaos clean` when the reaper died too (harness.reaper).

Usage: python3 -c SOURCE RUN_ID PORT CONNECT_TIMEOUT_S [SALVAGE_PLAN_BASE64_JSON]
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import secrets
import socket
import struct
import sys
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCKER_SOCKET = "/var/run/docker.sock"
RUN_LABEL = "schemachaos.run"
# harness.cluster_spec.RUN_ID_PATTERN (this file imports only the standard library): an empty
# or odd id must not make the label filter below match other runs' things.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to the Docker Engine API over its unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self._path)


def docker_api(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """One Engine API call; a streamed answer (an exec's output) is read until the engine
    closes it."""
    conn = UnixHTTPConnection(DOCKER_SOCKET)
    try:
        if body is None:
            conn.request(method, path)
        else:
            data = json.dumps(body).encode()
            conn.request(method, path, data, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _label_query(run_id: str) -> str:
    return urllib.parse.quote(json.dumps({"label": [f"{RUN_LABEL}={run_id}"]}))


def reap(run_id: str) -> list[str]:
    """Remove the run's containers (forced, with volumes), then its networks: those whose
    run label is exactly `run_id` (Docker's `key=value` filter is an exact match)."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id!r}")
    query = _label_query(run_id)
    removed: list[str] = []
    status, body = docker_api("GET", f"/containers/json?all=1&filters={query}")
    for container in json.loads(body) if status == 200 else []:
        status, _ = docker_api("DELETE", f"/containers/{container['Id']}?force=1&v=1")
        if status in (204, 404, 409):  # 409: already being removed
            removed.append("container " + ",".join(container.get("Names", [])))
    status, body = docker_api("GET", f"/networks?filters={query}")
    for network in json.loads(body) if status == 200 else []:
        status, _ = docker_api("DELETE", f"/networks/{network['Id']}")
        if status in (204, 404):
            removed.append("network " + str(network.get("Name")))
    return removed


# -- the catalog log of a run whose controller died ------------------------------------------

# The reap waits about this long at most for the nodes' catalog logs, heal included (a read
# begun before it ends runs to its end, bounded by COMMAND_S): the run is still reaped within
# 15 s of its controller's death (tests/test_harness_reaper.py).
SALVAGE_S = 6.0
SETTLE_S = 1.0  # between two reads: a healed node catches up with its leader within it
# Each command in a node's container is killed after this long (coreutils `timeout`): a node
# that hangs (its namespace wedged, a dump stuck in a connect) cannot hold the reap. Above
# node_catalog.ANSWER_TIMEOUT_S, so a node that does not answer says why itself.
COMMAND_S = 3
TIMED_OUT = 124  # coreutils `timeout`'s exit code when it killed the command
# (exit code, stdout, stderr) of argv run in one container of the run
ExecIn = Callable[[str, list[str]], tuple[int, bytes, bytes]]


@dataclass(frozen=True)
class SalvagePlan:
    """What the controller gave the reaper to collect a catalog log with: the run directory
    (as the collector sees it), the file names, a shell command that undoes the nemeses' rules
    in a node's container, and the Python source that prints a node's catalog log there."""

    run_dir: str
    catalog: str
    log: str
    history: str
    heal: str
    dump: str

    def to_arg(self) -> str:
        return base64.b64encode(json.dumps(self.__dict__).encode()).decode()

    @staticmethod
    def from_arg(arg: str) -> SalvagePlan:
        return SalvagePlan(**json.loads(base64.b64decode(arg)))


def on_each(
    exec_in: ExecIn, containers: dict[str, str], argv: list[str]
) -> list[tuple[int, bytes, bytes]]:
    """argv run in every container at once (the reap waits for the slowest, not the sum),
    each killed after COMMAND_S. A container whose exec fails (gone, paused, an engine error)
    answers (-1, b"", why): the others' answers are kept."""
    bounded = ["timeout", str(COMMAND_S), *argv]

    def one(cid: str) -> tuple[int, bytes, bytes]:
        try:
            return exec_in(cid, bounded)
        except Exception as e:
            return -1, b"", f"exec: {type(e).__name__}: {e}".encode()

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(containers)))) as pool:
        return list(pool.map(one, containers))


def read_catalogs(
    exec_in: ExecIn, containers: dict[str, str], dump: str
) -> tuple[list[dict[str, Any]], str, list[str]]:
    """(the longest catalog log a node answered, that node, why each other answered none).
    Every node's log is a prefix of the one Meta Storage committed; the longest misses least."""
    best: list[dict[str, Any]] = []
    source = ""
    failures: list[str] = []
    answers = on_each(exec_in, containers, ["python3", "-c", dump])
    for name, (code, out, err) in zip(containers.values(), answers, strict=True):
        try:
            entries = json.loads(out) if code == 0 else None
        except ValueError:
            entries = None
        if not isinstance(entries, list):
            said = err.decode(errors="replace").strip().splitlines()
            why = said[-1] if said else f"exit {code}"
            if code == TIMED_OUT and not said:
                why = f"no answer within {COMMAND_S} s"
            failures.append(f"{name}: {why[:200]}")
        elif len(entries) > len(best) or not source:
            best, source = entries, name
    return best, source, failures


def acknowledged_version(history: Path) -> int:
    """The highest catalog version an `ok` DDL completion of the history acknowledged (0 for
    none, or no history). The controller died mid-write: a torn last line is skipped."""
    highest = 0
    try:
        with open(history, "rb") as f:
            for line in f:
                if b'"ddl"' not in line:
                    continue  # most events: not worth parsing
                try:
                    event = json.loads(line)
                    value = event["value"] if event["f"] == "ddl" and event["type"] == "ok" else {}
                    version = value.get("catalog_version")
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                if isinstance(version, int) and not isinstance(version, bool):
                    highest = max(highest, version)
    except FileNotFoundError:
        pass
    return highest


def last_version(entries: list[dict[str, Any]]) -> int:
    versions = [e.get("catalog_version") for e in entries if isinstance(e, dict)]
    return max((v for v in versions if isinstance(v, int)), default=0)


def salvage_catalog(exec_in: ExecIn, containers: dict[str, str], plan: SalvagePlan) -> str:
    """Write the run's catalog log (its file in plan.run_dir, unless the run wrote one) from
    its running node containers (id -> name); one line saying what came of it. The log is
    read until two reads a moment apart agree, so a node still catching up is waited for.

    A log that ends before a version the history acknowledged is not written: the nodes that
    hold the rest are down (a kill fault left them so), and a strict prefix would convict the
    run of lost DDLs it never lost. Without the file the verdict is unknown, not wrong."""
    out_dir = Path(plan.run_dir)
    if (out_dir / plan.catalog).exists():
        return f"{plan.catalog}: the run wrote it"
    if not containers:
        return f"{plan.catalog}: not collected (no node container is running)"
    deadline = time.monotonic() + SALVAGE_S  # the heal counts: it too can hang
    acked = acknowledged_version(out_dir / plan.history)
    on_each(exec_in, containers, ["sh", "-c", plan.heal])  # a rule left in force: a lag
    entries, source, failures = read_catalogs(exec_in, containers, plan.dump)
    while time.monotonic() + SETTLE_S < deadline:
        time.sleep(SETTLE_S)
        again, again_source, failures = read_catalogs(exec_in, containers, plan.dump)
        settled = bool(source) and len(again) == len(entries) and last_version(again) >= acked
        if len(again) > len(entries) or not source:
            entries, source = again, again_source
        if settled:
            break
    if not source:
        return f"{plan.catalog}: not collected (no node answered: {'; '.join(failures)})"
    if last_version(entries) < acked:
        return (
            f"{plan.catalog}: not collected (the longest log, from {source}, ends at version "
            f"{last_version(entries)}, but {plan.history} acknowledged version {acked}: the "
            f"nodes that hold the rest are down)"
        )
    lines = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
    write_owned(out_dir, plan.catalog, lines)
    return f"{plan.catalog}: {len(entries)} versions, from {source}"


def write_owned(out_dir: Path, name: str, text: str, append: bool = False) -> None:
    """Write (or append to) a file of the run directory as its owner would: whole or not at
    all (a temporary file, fsynced, renamed), and owned by the directory's owner, not by the
    reaper's root."""
    path = out_dir / name
    # one name per writer: a reaper and a `clean` writing at once never share a half-file
    tmp = out_dir / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.reaper"
    before = path.read_text() if append and path.exists() else ""
    try:
        with open(tmp, "w") as f:
            f.write(before + text)
            f.flush()
            os.fsync(f.fileno())
        owner = os.stat(out_dir)
        with contextlib.suppress(PermissionError):  # not root (clean as a user): it is theirs
            os.chown(tmp, owner.st_uid, owner.st_gid)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):  # renamed, or never whole
            tmp.unlink()


def exec_in_container(cid: str, argv: list[str]) -> tuple[int, bytes, bytes]:
    """argv run in container `cid` through the Engine API (docker exec), its output demuxed."""
    status, body = docker_api(
        "POST", f"/containers/{cid}/exec", {"Cmd": argv, "AttachStdout": True, "AttachStderr": True}
    )
    if status != 201:
        return -1, b"", body
    exec_id = json.loads(body)["Id"]
    status, raw = docker_api("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False})
    if status != 200:
        return -1, b"", raw
    streams = {1: bytearray(), 2: bytearray()}
    at = 0
    while at + 8 <= len(raw):  # frames: stream (1 byte), 3 zero bytes, size (4 bytes, BE)
        kind, size = struct.unpack(">BxxxI", raw[at : at + 8])
        streams.setdefault(kind, bytearray()).extend(raw[at + 8 : at + 8 + size])
        at += 8 + size
    status, info = docker_api("GET", f"/exec/{exec_id}/json")
    code = json.loads(info).get("ExitCode") if status == 200 else None
    return (code if isinstance(code, int) else -1), bytes(streams[1]), bytes(streams[2])


def running_nodes(run_id: str) -> dict[str, str]:
    """The run's running containers, id -> name (the reaper carries no run label)."""
    status, body = docker_api("GET", f"/containers/json?filters={_label_query(run_id)}")
    containers = json.loads(body) if status == 200 else []
    return {c["Id"]: ",".join(n.lstrip("/") for n in c.get("Names", [])) for c in containers}


def hold(run_id: str, port: int, connect_timeout_s: float) -> str:
    """Wait for the controller, greet it, and return once its connection is gone (why)."""
    with socket.create_server(("0.0.0.0", port)) as server:
        server.settimeout(connect_timeout_s)
        try:
            conn, _ = server.accept()
        except TimeoutError:
            return "no controller connected"
    with conn:
        conn.settimeout(None)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # the greeting proves to the controller it reached us, not just docker-proxy
        conn.sendall(f"reaper {run_id}\n".encode())
        received = b""
        while True:
            try:
                chunk = conn.recv(64)
            except OSError as e:
                return f"connection lost: {e}"
            if not chunk:
                return "connection closed"
            received += chunk
            if b"bye\n" in received:  # a clean teardown: it waits for this container to go
                return "bye"


def main(argv: list[str]) -> int:
    run_id, port, connect_timeout_s = argv[0], int(argv[1]), float(argv[2])
    plan = SalvagePlan.from_arg(argv[3]) if len(argv) > 3 else None
    if not RUN_ID.fullmatch(run_id):
        print(f"reaper: not a run id: {run_id!r}", file=sys.stderr, flush=True)
        return 2
    why = hold(run_id, port, connect_timeout_s)
    salvaged = ""
    if plan is not None and why not in ("bye", "no controller connected"):
        try:  # the controller died: what it would have collected at the end, if the nodes can
            salvaged = "; " + salvage_catalog(exec_in_container, running_nodes(run_id), plan)
        except Exception as e:  # the reap must happen whatever the collection met
            salvaged = f"; {plan.catalog}: not collected ({type(e).__name__}: {e})"
    removed = reap(run_id)
    note = f"reaper {run_id}: {why}{salvaged}; removed {len(removed)}: {', '.join(removed)}"
    print(note, flush=True)
    if plan is not None and why != "bye":
        with contextlib.suppress(OSError):  # the one trace a dead run's reap leaves
            write_owned(Path(plan.run_dir), plan.log, note + "\n", append=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
