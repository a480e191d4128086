"""`schemachaos serve`: browse the store of runs over HTTP (127.0.0.1 by default).

The index lists runs newest first, coloured by verdict; every file of a run is viewable and a run
downloads as a zip. Nothing outside the store is read, listed or served (reports.store_paths),
and no client can hold a thread longer than the timeouts below.
"""

from __future__ import annotations

import contextlib
import functools
import io
import mimetypes
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urlsplit

from contract.rundir import REPORT, RESULTS, RUN_JSON, RUN_MARKERS
from reports.expectation import allow_of, expect_of
from reports.html import banner_of
from reports.request_head import HeadReader, HeadRefused
from reports.store_paths import (
    Kind,
    Refusal,
    StoreEntry,
    list_directory,
    locate,
    locate_request,
    open_regular,
    read_json,
    regular_file,
    walk_files,
)
from reports.templating import render

MAX_DEPTH = 5
TEXT_SUFFIXES = {".jsonl", ".log", ".toml", ".txt", ".md", ".out", ".err", ".csv"}
COLOURS = {"valid": "#e3f4e1", "invalid": "#fbe3e1", "unknown": "#fff3d6", "expected": "#d7efe6"}

# Every connection holds a thread until its request head is in. Browsers open spare connections
# they may never use, and a hostile client can open many and send nothing: a few seconds is
# ample for a head on loopback or a LAN, and bounds how long each such thread lives.
IDLE_TIMEOUT_S = 5.0
# A client that stops reading a response (a large log, a zip) frees its thread after this long.
SEND_TIMEOUT_S = 30.0
# Request line plus headers. Store paths are well under 1 KiB and browsers send 1-2 KiB of
# headers; the stdlib's bound (100 lines of 64 KiB) would let one request hold 6 MiB.
MAX_HEAD_BYTES = 16 * 1024
# Threads serving at once. With IDLE_TIMEOUT_S this bounds what a flood of silent connections
# costs (at most this many threads, each for a few seconds); a browser uses about six.
MAX_CONNECTIONS = 64
# After refusing a head, how long to read what its client still sends (see _linger).
LINGER_S = 1.0


@dataclass(frozen=True)
class RunEntry:
    """A run directory of the store as the index lists it."""

    rel: str  # posix path under the store
    test: str
    seed: Any
    started: float  # epoch seconds (run.json start_wall_ms, else the directory mtime)
    verdict_class: str
    verdict_text: str
    anomalies: int
    has_report: bool
    has_timeline: bool  # timeline.html, the per-process view written beside the report


def find_runs(store: Path) -> list[RunEntry]:
    """Every run directory under the store (not following symlinks), newest first.

    A run's files are read only when they resolve to regular files inside the store: a run.json
    symlinked from elsewhere leaves the run listed by its directory name alone.
    """
    root = store.resolve()
    out: list[RunEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        if depth >= MAX_DEPTH:
            dirnames[:] = []
        if not any(m in filenames for m in RUN_MARKERS):
            continue
        dirnames[:] = []  # a run directory's subdirectories (plots/, logs/) are not runs
        run = read_json(root, here / RUN_JSON)
        run = run if isinstance(run, dict) else {}
        results = read_json(root, here / RESULTS)
        results = results if isinstance(results, dict) else None
        banner = _banner(results, run)
        started = _started(run.get("start_wall_ms"), here)
        anomalies = results.get("anomalies") if results else None
        out.append(
            RunEntry(
                rel=here.relative_to(root).as_posix(),
                test=str(run.get("test") or here.name),
                seed=run.get("seed", ""),
                started=started,
                verdict_class=banner.css_class,
                verdict_text=banner.headline,
                anomalies=len(anomalies) if isinstance(anomalies, list) else 0,
                has_report=regular_file(root, here / REPORT) is not None,
                has_timeline=regular_file(root, here / "timeline.html") is not None,
            )
        )
    out.sort(key=lambda r: (r.started, r.rel), reverse=True)
    return out


# the last second a page can show as a date (9999-12-31): a run.json of another tool may hold
# any number, and one date out of range must not make the whole index a 500
LATEST_SHOWN_S = 253_402_300_799


def _started(start_wall_ms: Any, here: Path) -> float:
    """When the run started, as run.json says it if that is a date a page can show; else
    when its directory last changed."""
    if isinstance(start_wall_ms, int | float) and not isinstance(start_wall_ms, bool):
        seconds = start_wall_ms / 1000.0
        if 0 <= seconds <= LATEST_SHOWN_S:  # NaN fails both comparisons
            return seconds
    return here.stat().st_mtime


def _banner(results: dict[str, Any] | None, run: dict[str, Any]) -> Any:
    """The run's verdict banner; a results.json or `expect` of a shape the banner cannot
    read shows as no verdict for that run, never a 500 for the whole index."""
    try:
        return banner_of(results, expect_of(run), allow_of(run))
    except (TypeError, AttributeError, ValueError):
        return banner_of(None, ())


def _page(title: str, message: str = "") -> bytes:
    return render("serve_base.html", title=title, message=message).encode()


def _nightly_summaries(root: Path) -> list[tuple[str, str]]:
    """(name, link) of each nightly summary inside the store, newest first."""
    nightly = locate(root, root / "nightly")
    if not isinstance(nightly, StoreEntry) or nightly.kind is not Kind.DIRECTORY:
        return []
    names = [
        name
        for name, entry in list_directory(root, nightly)
        if entry.kind is Kind.DIRECTORY and regular_file(root, entry.path / "summary.html")
    ]
    return [(name, quote(name)) for name in sorted(names, reverse=True)]


def index_page(store: Path) -> bytes:
    runs = [
        {
            "verdict_class": r.verdict_class,
            "verdict_text": r.verdict_text,
            "when": datetime.fromtimestamp(r.started, tz=UTC).strftime("%Y-%m-%d %H:%M:%S"),
            "test": r.test,
            "seed": r.seed,
            "has_report": r.has_report,
            "has_timeline": r.has_timeline,
            "link": quote(r.rel),
            "rel": r.rel,
        }
        for r in find_runs(store)
    ]
    return render(
        "serve_index.html",
        title=f"schemachaos store: {store}",
        runs=runs,
        colours=COLOURS,
        nightly=_nightly_summaries(store.resolve()),
    ).encode()


def _listing(root: Path, directory: StoreEntry) -> bytes:
    rel = directory.path.relative_to(root).as_posix()
    items = []
    for name, entry in list_directory(root, directory):
        if entry.kind is Kind.DIRECTORY:
            items.append((name + "/", quote(name + "/"), ""))
        else:
            items.append((name, quote(name), f"{entry.size:,} B"))
    return render(
        "serve_listing.html",
        title=f"/{rel}",
        items=items,
        zip_link=quote(rel) if rel != "." else "",
    ).encode()


def _zip_directory(root: Path, directory: StoreEntry, out: IO[bytes]) -> None:
    """The regular files under a run directory that stay inside the store, deflated."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, entry in walk_files(root, directory):
            opened = open_regular(entry)
            if isinstance(opened, Refusal):
                continue
            info = zipfile.ZipInfo.from_file(entry.path, Path(directory.path.name) / rel)
            info.compress_type = zipfile.ZIP_DEFLATED
            with opened as src, zf.open(info, "w") as dst:
                shutil.copyfileobj(src, dst)


def _copy_exactly(src: IO[bytes], dst: Any, size: int) -> None:
    """`size` bytes, no more: the Content-Length sent stands even if the file grows meanwhile."""
    left = size
    while left > 0 and (chunk := src.read(min(left, 1 << 16))):
        dst.write(chunk)
        left -= len(chunk)


_REFUSAL_STATUS = {
    Refusal.OUTSIDE: HTTPStatus.FORBIDDEN,
    Refusal.MISSING: HTTPStatus.NOT_FOUND,
    Refusal.LOOP: HTTPStatus.NOT_FOUND,
    Refusal.DENIED: HTTPStatus.FORBIDDEN,
    Refusal.NOT_REGULAR: HTTPStatus.FORBIDDEN,
    Refusal.UNREADABLE: HTTPStatus.INTERNAL_SERVER_ERROR,
}


class StoreHandler(BaseHTTPRequestHandler):
    """GET / (runs), /files/<path> (a file or a listing), /zip/<run> (a run as a zip).

    One request per connection (HTTP/1.0), its head read within MAX_HEAD_BYTES and the server's
    idle timeout; every request that began gets a response, an error page when nothing else.
    """

    server: StoreServer
    server_version = "schemachaos-serve"
    default_request_version = "HTTP/1.0"  # a garbled request line still gets a status line

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # heads come off the socket through HeadReader; bodies are never read
        self.heads = HeadReader(self.connection)
        self.responded = False

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def send_response(self, code: int, message: str | None = None) -> None:
        self.responded = True
        super().send_response(code, message)

    def handle_one_request(self) -> None:
        self.close_connection = True
        try:
            head = self.heads.read(MAX_HEAD_BYTES, self.server.idle_timeout_s)
        except HeadRefused as refused:
            self.requestline, self.request_version, self.command = "", "", ""
            self._answer(functools.partial(self._error, refused.status, refused.reason))
            self._linger()
            return
        except OSError:
            return  # the peer reset the connection: nobody is left to answer
        if head is None:
            return  # closed or silent before a request began
        line, _, headers = head.partition(b"\n")
        self.raw_requestline = line + b"\n"
        self.rfile = io.BytesIO(headers)
        self._answer(self._dispatch)

    def _linger(self) -> None:
        """Half-close, then read what the client still sends, briefly.

        Closing with its unread bytes in the socket would reset the connection, and a reset can
        discard the error page before the client reads it.
        """
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_S
            while (remaining := deadline - time.monotonic()) > 0:
                self.connection.settimeout(remaining)
                if not self.connection.recv(1 << 16):
                    break

    def _dispatch(self) -> None:
        if not self.parse_request():
            return  # parse_request answered with its own error page
        method = {"GET": self.do_GET, "HEAD": self.do_HEAD}.get(self.command)
        if method is None:
            self._error(HTTPStatus.NOT_IMPLEMENTED, f"{self.command} is not served")
        else:
            method()

    def _answer(self, respond: Callable[[], None]) -> None:
        """Run `respond`; a client gone is let go, a bug still gets a 500 page."""
        self.connection.settimeout(SEND_TIMEOUT_S)
        try:
            respond()
            self.wfile.flush()
        except OSError:
            pass  # the client stopped reading or went away mid-response
        except Exception:
            traceback.print_exc(file=sys.stderr)
            if not self.responded:
                with contextlib.suppress(OSError):
                    self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """parse_request's refusals, on the store's own error page."""
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        status = HTTPStatus(code)
        self._error(status, message or status.phrase)

    def _error(self, status: HTTPStatus, reason: str) -> None:
        self._send(status, _page(f"{status.value} {reason}", status.phrase))

    def _refuse(self, refusal: Refusal) -> None:
        self._error(_REFUSAL_STATUS[refusal], refusal.value)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        root = self.server.root
        raw = urlsplit(self.path).path
        if raw in ("/", "/index.html"):
            self._send(HTTPStatus.OK, index_page(root))
            return
        for prefix, handler in (("/files/", self._file), ("/zip/", self._zip)):
            if raw.startswith(prefix) or raw == prefix.rstrip("/"):
                target = locate_request(root, unquote(raw[len(prefix) :]))
                if isinstance(target, Refusal):
                    self._refuse(target)
                else:
                    handler(target, raw)
                return
        self._refuse(Refusal.MISSING)

    def _file(self, target: StoreEntry, raw: str) -> None:
        if target.kind is Kind.DIRECTORY:
            if not raw.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", raw + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._send(HTTPStatus.OK, _listing(self.server.root, target))
            return
        opened = open_regular(target)
        if isinstance(opened, Refusal):
            self._refuse(opened)
            return
        with opened as fh:
            ctype = mimetypes.guess_type(target.path.name)[0] or "application/octet-stream"
            if (
                target.path.suffix in TEXT_SUFFIXES
                or ctype.startswith("text/")
                or ctype.endswith("json")
            ):
                html = target.path.suffix == ".html"
                ctype = ("text/html" if html else "text/plain") + "; charset=utf-8"
            size = os.fstat(fh.fileno()).st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if self.command != "HEAD":
                _copy_exactly(fh, self.wfile, size)

    def _zip(self, target: StoreEntry, raw: str) -> None:
        if target.kind is not Kind.DIRECTORY or target.path == self.server.root:
            self._error(HTTPStatus.BAD_REQUEST, "not a run directory")
            return
        with tempfile.TemporaryFile() as tmp:
            _zip_directory(self.server.root, target, tmp)
            size = tmp.tell()
            tmp.seek(0)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(size))
            name = quote(target.path.name)
            self.send_header("Content-Disposition", f'attachment; filename="{name}.zip"')
            self.end_headers()
            if self.command != "HEAD":
                shutil.copyfileobj(tmp, self.wfile)


def _turn_away(request: socket.socket) -> None:
    """A 503 page written by the accepting thread itself, which must not wait on the client."""
    body = _page("503 busy", f"More than {MAX_CONNECTIONS} connections at once; try again.")
    head = (
        "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        request.settimeout(0.5)
        request.sendall(head.encode() + body)


class StoreServer(ThreadingHTTPServer):
    """One thread per connection, at most `max_connections` of them; the rest get a 503."""

    daemon_threads = True

    def __init__(
        self,
        store: Path,
        host: str,
        port: int,
        verbose: bool = False,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.root = Path(store).resolve()
        self.verbose = verbose
        self.idle_timeout_s = idle_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((host, port), StoreHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _turn_away(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def make_server(
    store: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> StoreServer:
    """A server bound but not yet serving; port 0 picks a free port (server.server_port)."""
    return StoreServer(
        store, host, port, idle_timeout_s=idle_timeout_s, max_connections=max_connections
    )


def serve(store: Path, host: str = "127.0.0.1", port: int = 8080, verbose: bool = True) -> None:
    """Serve the store until interrupted (the `schemachaos serve` command)."""
    server = StoreServer(store, host, port, verbose)
    print(f"serving {server.root} on http://{host}:{server.server_port}/", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
