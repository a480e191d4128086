"""The program inside a run's reaper container (testcontainers' Ryuk, in stdlib Python).

It holds one TCP connection from the controller; when that connection ends for any reason (a
`bye`, EOF, a reset: the controller died, even by SIGKILL) it removes every container and
network labelled with the run's id through the bind-mounted Docker socket, then exits, and
the engine removes the reaper itself (auto-remove). It is shipped as `python3 -c <this file>`
into the node image, so it may import nothing but the standard library.

Usage: python3 -c SOURCE RUN_ID PORT CONNECT_TIMEOUT_S
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import sys
import urllib.parse

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


def docker_api(method: str, path: str) -> tuple[int, bytes]:
    conn = UnixHTTPConnection(DOCKER_SOCKET)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def reap(run_id: str) -> list[str]:
    """Remove the run's containers (forced, with volumes), then its networks: those whose
    run label is exactly `run_id` (Docker's `key=value` filter is an exact match)."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id!r}")
    query = urllib.parse.quote(json.dumps({"label": [f"{RUN_LABEL}={run_id}"]}))
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
    if not RUN_ID.fullmatch(run_id):
        print(f"reaper: not a run id: {run_id!r}", file=sys.stderr, flush=True)
        return 2
    why = hold(run_id, port, connect_timeout_s)
    removed = reap(run_id)
    print(f"reaper {run_id}: {why}; removed {len(removed)}: {', '.join(removed)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
