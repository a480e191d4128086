"""`serve` over a real socket: lists runs newest first, serves a report, refuses escapes."""

from __future__ import annotations

import http.client
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reports.serve import StoreServer, make_server
from tests.test_reports_fixture import write_anomalous_run, write_results, write_unknown_run


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("serve")
    store = tmp_path / "store"
    old = write_anomalous_run(store / "learner" / "20260101T000000")
    run = json.loads((old.run_dir / "run.json").read_text())
    newer = store / "learner" / "20260102T000000"
    write_anomalous_run(newer, results=False)
    (newer / "run.json").write_text(json.dumps({**run, "start_wall_ms": run["start_wall_ms"] + 1}))
    write_results(newer, {"valid": True, "anomalies": [], "not_applicable": [], "errors": []})
    (newer / "report.html").write_text("<html><body>a valid run</body></html>")
    (newer / "timeline.html").write_text("<html><body>its timeline</body></html>")
    write_unknown_run(store / "broken" / "20251231T000000")
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    (newer / "escape").symlink_to(tmp_path / "secret.txt")
    (store / "linkdir").symlink_to(tmp_path)
    return store


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[StoreServer]:
    srv = make_server(store)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def get(srv: StoreServer, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_binds_loopback_by_default(server: StoreServer) -> None:
    assert server.server_address[0] == "127.0.0.1"


def test_lists_runs_newest_first_coloured_by_verdict(server: StoreServer) -> None:
    status, _, body = get(server, "/")
    assert status == 200
    page = body.decode()
    order = [page.index(d) for d in ("20260102T000000", "20260101T000000", "20251231T000000")]
    assert order == sorted(order)
    assert 'class="run valid"' in page and 'class="run invalid"' in page
    assert 'class="run unknown"' in page
    assert "/files/learner/20260102T000000/report.html" in page
    # a run with a timeline.html links it; one without does not
    assert "/files/learner/20260102T000000/timeline.html" in page
    assert "/files/learner/20260101T000000/timeline.html" not in page


def test_serves_a_report_and_its_files(server: StoreServer) -> None:
    status, headers, body = get(server, "/files/learner/20260102T000000/report.html")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"a valid run" in body
    status, headers, body = get(server, "/files/learner/20260101T000000/history.jsonl")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert json.loads(body.splitlines()[0])["index"] == 0
    status, _, body = get(server, "/files/learner/20260101T000000/")
    assert status == 200 and b"catalog.jsonl" in body
    status, headers, _ = get(server, "/files/learner/20260101T000000")
    assert status == 301 and headers["Location"].endswith("/")


def test_downloads_a_run_as_zip(server: StoreServer) -> None:
    status, headers, body = get(server, "/zip/learner/20260102T000000")
    assert status == 200 and headers["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    assert "20260102T000000/history.jsonl" in names
    assert "20260102T000000/escape" not in names  # the symlink out of the store is dropped


@pytest.mark.parametrize(
    "path",
    [
        "/files/../secret.txt",
        "/files/%2e%2e/secret.txt",
        "/files/learner/..%2f..%2fsecret.txt",
        "/files/learner/20260102T000000/escape",
        "/files/linkdir/secret.txt",
        "/files/%2fetc/passwd",
        "/files/..%5csecret.txt",
        "/zip/..",
        "/zip/linkdir",
    ],
)
def test_refuses_paths_outside_the_store(server: StoreServer, path: str) -> None:
    status, _, body = get(server, path)
    assert status == 403, (path, status)
    assert b"outside the store" in body and b"TOP-SECRET" not in body


def test_unknown_paths_are_404(server: StoreServer) -> None:
    assert get(server, "/files/nope.txt")[0] == 404
    assert get(server, "/etc/passwd")[0] == 404
