"""`serve` confined to the store (issue 50 item 5), against a real server on loopback.

The store holds what a hostile or broken writer could leave: a run.json symlinked from outside,
symlinks out of the store and in loops, a FIFO, a socket. Nothing outside may be read or listed,
nothing may block a thread, and every request that began gets a status page.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import select
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reports.serve import StoreServer, make_server
from reports.store_paths import Kind, Refusal, StoreEntry, locate

RUN = "learner/20260101T000000"
LEAKY_RUN = "leaky/20260102T000000"
SECRET = b"TOP-SECRET" + b"x" * 12_335  # 12,345 B: its size must not show in a listing


def _write_run(run_dir: Path, test: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"test": test, "seed": 7}))
    (run_dir / "history.jsonl").write_text('{"index": 0}\n')


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with a plain run beside every kind of hostile name."""
    outside = tmp_path / "outside"
    (outside / "nightly" / "2026-11-30").mkdir(parents=True)
    (outside / "nightly" / "2026-11-30" / "summary.html").write_text("outside night")
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "run.json").write_text(json.dumps({"test": "LEAKED-TEST", "seed": 424242}))
    store = tmp_path / "store"
    _write_run(store / RUN, "plain-test")
    run = store / RUN
    (run / "escape").symlink_to(outside / "secret.txt")
    (run / "loop_a").symlink_to(run / "loop_b")
    (run / "loop_b").symlink_to(run / "loop_a")
    os.mkfifo(run / "pipe")
    leaky = store / LEAKY_RUN
    leaky.mkdir(parents=True)
    (leaky / "run.json").symlink_to(outside / "run.json")
    (store / "up").symlink_to("..")
    (store / "nightly").symlink_to(outside / "nightly")
    return store


@contextmanager
def serving(
    store: Path, idle_timeout_s: float = 1.0, max_connections: int = 64
) -> Iterator[StoreServer]:
    srv = make_server(store, idle_timeout_s=idle_timeout_s, max_connections=max_connections)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def get(srv: StoreServer, path: str) -> tuple[int, bytes]:
    """Status and body; a server that never answers fails the test in 5 s."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def exchange(srv: StoreServer, raw: bytes) -> bytes:
    """Send `raw` verbatim (no client-side normalisation) and read the whole response."""
    with socket.create_connection(("127.0.0.1", srv.server_port), timeout=5) as sock:
        sock.sendall(raw)
        return _read_until_closed(sock)


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/"), response[:80]
    return int(response.split(b" ", 2)[1])


def test_index_reads_no_run_json_from_outside(store: Path) -> None:
    with serving(store) as srv:
        status, body = get(srv, "/")
    assert status == 200
    assert b"plain-test" in body and b"20260102T000000" in body  # the leaky run, by name alone
    assert b"LEAKED-TEST" not in body and b"424242" not in body
    assert b"2026-11-30" not in body  # a nightly/ symlinked from outside is not listed


def test_a_symlink_out_is_neither_listed_nor_served_nor_zipped(store: Path) -> None:
    with serving(store) as srv:
        listed = get(srv, f"/files/{RUN}/")
        served = get(srv, f"/files/{RUN}/escape")
        zipped = get(srv, f"/zip/{RUN}")
        root = get(srv, "/files/")
    assert listed[0] == 200 and b"history.jsonl" in listed[1]
    assert b"escape" not in listed[1] and b"12,345" not in listed[1]
    assert served[0] == 403 and b"outside the store" in served[1] and b"TOP-SECRET" not in served[1]
    names = zipfile.ZipFile(io.BytesIO(zipped[1])).namelist()
    assert zipped[0] == 200 and "20260101T000000/history.jsonl" in names
    assert not any("escape" in n or "pipe" in n or "loop" in n for n in names)
    assert root[0] == 200 and b"learner/" in root[1]
    assert b"up/" not in root[1] and b"nightly/" not in root[1]


def test_a_symlink_loop_gets_an_error_page(store: Path) -> None:
    with serving(store) as srv:
        looped = get(srv, f"/files/{RUN}/loop_a")
        listed = get(srv, f"/files/{RUN}/")
    assert looped[0] == 404 and b"a symlink loop" in looped[1]
    assert listed[0] == 200 and b"loop_a" not in listed[1]


def test_a_fifo_is_refused_without_being_opened(store: Path) -> None:
    with serving(store) as srv:
        status, body = get(srv, f"/files/{RUN}/pipe")
        listed = get(srv, f"/files/{RUN}/")
    assert status == 403 and b"not a regular file" in body
    assert b"pipe" not in listed[1]


def test_an_index_with_a_fifo_for_results_json_still_answers(store: Path) -> None:
    os.mkfifo(store / RUN / "results.json")
    with serving(store) as srv:
        status, body = get(srv, "/")
    assert status == 200 and b"plain-test" in body


def test_a_socket_is_refused(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(store / RUN)  # a relative name keeps the socket path under 108 bytes
    with socket.socket(socket.AF_UNIX) as unix:
        unix.bind("sock")
        with serving(store) as srv:
            status, body = get(srv, f"/files/{RUN}/sock")
    assert status == 403 and b"not a regular file" in body


def test_an_idle_connection_is_closed(store: Path) -> None:
    with serving(store, idle_timeout_s=0.5) as srv:
        with socket.create_connection(("127.0.0.1", srv.server_port), timeout=5) as sock:
            started = time.monotonic()
            assert sock.recv(1) == b""  # closed by the server, no request having begun
            assert time.monotonic() - started < 3
        assert get(srv, "/")[0] == 200  # and the server still answers


def test_connections_past_the_cap_get_503_until_a_slot_frees(store: Path) -> None:
    with serving(store, idle_timeout_s=1.0, max_connections=2) as srv:
        address = ("127.0.0.1", srv.server_port)
        with socket.create_connection(address), socket.create_connection(address):
            # accepted in order, each holds a thread (a slot) while it stays silent
            busy = exchange(srv, b"GET / HTTP/1.0\r\n\r\n")
            deadline = time.monotonic() + 5
            while status_of(freed := exchange(srv, b"GET / HTTP/1.0\r\n\r\n")) == 503:
                assert time.monotonic() < deadline, "the idle connections never freed a slot"
                time.sleep(0.1)
    assert status_of(busy) == 503 and b"try again" in busy
    assert status_of(freed) == 200


def test_a_trickled_head_gets_408_at_its_deadline(store: Path) -> None:
    """One byte every 0.2 s never trips a per-read timeout; the head's deadline still holds."""
    head = b"GET / HTTP/1.0\r\n" + b"X-Slow: " + b"y" * 100
    with (
        serving(store, idle_timeout_s=1.0) as srv,
        socket.create_connection(("127.0.0.1", srv.server_port), timeout=5) as sock,
    ):
        started = time.monotonic()
        for byte in head:
            if select.select([sock], [], [], 0.2)[0]:
                break  # the server answered
            sock.sendall(bytes([byte]))
        response = _read_until_closed(sock)
        elapsed = time.monotonic() - started
    assert status_of(response) == 408 and elapsed < 4


def test_an_oversized_request_line_gets_414(store: Path) -> None:
    with serving(store) as srv:
        response = exchange(srv, b"GET /files/" + b"a" * 20_000 + b" HTTP/1.0\r\n\r\n")
    assert status_of(response) == 414


def test_oversized_headers_get_431(store: Path) -> None:
    headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(40))
    with serving(store) as srv:
        response = exchange(srv, b"GET / HTTP/1.0\r\n" + headers + b"\r\n")
    assert status_of(response) == 431


@pytest.mark.parametrize(
    "target",
    [
        f"/files/{RUN}/../../../outside/secret.txt",
        "/files/%2e%2e/outside/secret.txt",
        "/files/learner/..%2f..%2f..%2foutside%2fsecret.txt",
        "/files/up/outside/secret.txt",
        "/files/up/",
        "/zip/up",
        "/files/nightly/2026-11-30/summary.html",
    ],
)
def test_traversal_is_refused(store: Path, target: str) -> None:
    with serving(store) as srv:
        response = exchange(srv, f"GET {target} HTTP/1.0\r\n\r\n".encode())
        listed = get(srv, "/files/")
    assert status_of(response) == 403, target
    assert b"TOP-SECRET" not in response and b"outside night" not in response
    assert b"up/" not in listed[1]  # the way out is not even offered


def test_every_request_is_answered(store: Path) -> None:
    with serving(store) as srv:
        assert status_of(exchange(srv, b"DELETE / HTTP/1.0\r\n\r\n")) == 501
        assert status_of(exchange(srv, b"NONSENSE\r\n\r\n")) == 400
        with socket.create_connection(("127.0.0.1", srv.server_port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\nHost: x")
            sock.shutdown(socket.SHUT_WR)  # the head stops short of its blank line
            assert status_of(_read_until_closed(sock)) == 400


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"{RUN}/history.jsonl", Kind.FILE),
        (RUN, Kind.DIRECTORY),
        (f"{RUN}/pipe", Kind.OTHER),
        (f"{RUN}/escape", Refusal.OUTSIDE),
        (f"{RUN}/loop_a", Refusal.LOOP),
        (f"{RUN}/missing", Refusal.MISSING),
        (f"{RUN}/history.jsonl/below", Refusal.MISSING),
        ("up", Refusal.OUTSIDE),
    ],
)
def test_locate_classifies_before_opening(store: Path, name: str, expected: object) -> None:
    found = locate(store.resolve(), store / name)
    assert (found.kind if isinstance(found, StoreEntry) else found) == expected


@pytest.mark.parametrize(
    ("run_json", "results_json"),
    [
        ({"test": "odd-start", "start_wall_ms": 1e20}, None),
        ({"test": "odd-start", "start_wall_ms": float("nan")}, None),
        ({"test": "odd-start", "start_wall_ms": -5}, None),
        ({"test": "odd-start", "expect": 5}, {"valid": True, "anomalies": []}),
        ({"test": "odd-start"}, {"valid": False, "anomalies": [1]}),
    ],
)
def test_one_run_of_an_odd_shape_never_takes_the_index_down(
    tmp_path: Path, run_json: dict, results_json: dict | None
) -> None:
    """A run.json or results.json that another tool wrote, of a shape the page cannot show
    (a start date beyond any calendar, an `expect` that is no list, anomalies that are no
    objects), lists that run by what can be shown; the index is still 200 for the others."""
    store = tmp_path / "store"
    _write_run(store / "plain" / "1", "plain-test")
    odd = store / "odd" / "1"
    odd.mkdir(parents=True)
    (odd / "run.json").write_text(json.dumps(run_json))
    if results_json is not None:
        (odd / "results.json").write_text(json.dumps(results_json))
    with serving(store) as srv:
        status, body = get(srv, "/")
    assert status == 200, body[:500]
    assert b"plain-test" in body and b"odd-start" in body
