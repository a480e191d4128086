"""`schemachaos serve`: browse the store of runs over HTTP (127.0.0.1 by default).

The index lists runs newest first, coloured by verdict; every file of a run is viewable and a run
downloads as a zip. Nothing outside the store is ever served: paths are resolved (symlinks
included) and refused unless they stay under the store root.
"""

from __future__ import annotations

import json
import mimetypes
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from contract.rundir import REPORT, RESULTS, RUN_JSON, RUN_MARKERS
from reports.expectation import expect_of
from reports.html import banner_of
from reports.templating import render

MAX_DEPTH = 5
TEXT_SUFFIXES = {".jsonl", ".log", ".toml", ".txt", ".md", ".out", ".err", ".csv"}
COLOURS = {"valid": "#e3f4e1", "invalid": "#fbe3e1", "unknown": "#fff3d6", "expected": "#d7efe6"}


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


def _load(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def find_runs(store: Path) -> list[RunEntry]:
    """Every run directory under the store (not following symlinks), newest first."""
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
        run = _load(here / RUN_JSON) or {}
        results = _load(here / RESULTS)
        banner = banner_of(results if isinstance(results, dict) else None, expect_of(run))
        cls, text = banner.css_class, banner.headline
        start = run.get("start_wall_ms")
        started = start / 1000.0 if isinstance(start, int | float) else here.stat().st_mtime
        anomalies = len((results or {}).get("anomalies") or []) if isinstance(results, dict) else 0
        out.append(
            RunEntry(
                rel=here.relative_to(root).as_posix(),
                test=str(run.get("test") or here.name),
                seed=run.get("seed", ""),
                started=started,
                verdict_class=cls,
                verdict_text=text,
                anomalies=anomalies,
                has_report=(here / REPORT).exists(),
                has_timeline=(here / "timeline.html").exists(),
            )
        )
    out.sort(key=lambda r: (r.started, r.rel), reverse=True)
    return out


def resolve_in_store(root: Path, rel: str) -> Path | None:
    """The file or directory `rel` names under root, or None if it would leave the store."""
    if "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    candidate = root.joinpath(*parts).resolve()
    if candidate != root and not candidate.is_relative_to(root):
        return None
    return candidate


def _page(title: str, message: str = "") -> bytes:
    return render("serve_base.html", title=title, message=message).encode()


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
    summaries = sorted((store.resolve() / "nightly").glob("*/summary.html"), reverse=True)
    nightly = [(p.parent.name, quote(p.parent.name)) for p in summaries if not p.is_symlink()]
    return render(
        "serve_index.html",
        title=f"schemachaos store: {store}",
        runs=runs,
        colours=COLOURS,
        nightly=nightly,
    ).encode()


def _listing(root: Path, directory: Path) -> bytes:
    rel = directory.relative_to(root).as_posix()
    items = []
    for child in sorted(directory.iterdir()):
        name = child.name + ("/" if child.is_dir() else "")
        size = "" if child.is_dir() else f"{child.stat().st_size:,} B" if child.exists() else ""
        items.append((name, quote(name), size))
    return render(
        "serve_listing.html",
        title=f"/{rel}",
        items=items,
        zip_link=quote(rel) if rel != "." else "",
    ).encode()


def _zip_directory(root: Path, directory: Path, out: Any) -> None:
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                real = path.resolve()
                if not real.is_relative_to(root) or not real.is_file():
                    continue  # a symlink out of the store is not followed
                zf.write(real, Path(directory.name) / path.relative_to(directory))


class StoreHandler(BaseHTTPRequestHandler):
    """GET / (runs), /files/<path> (a file or a listing), /zip/<run> (a run as a zip)."""

    server: StoreServer
    server_version = "schemachaos-serve"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self) -> None:
        self._send(HTTPStatus.FORBIDDEN, _page("403 outside the store", "Refused."))

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
                rel = unquote(raw[len(prefix) :])
                target = resolve_in_store(root, rel)
                if target is None:
                    self._refuse()
                elif not target.exists():
                    self._send(HTTPStatus.NOT_FOUND, _page("404 not found", ""))
                else:
                    handler(target, raw)
                return
        self._send(HTTPStatus.NOT_FOUND, _page("404 not found", ""))

    def _file(self, target: Path, raw: str) -> None:
        if target.is_dir():
            if not raw.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", raw + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._send(HTTPStatus.OK, _listing(self.server.root, target))
            return
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix in TEXT_SUFFIXES or ctype.startswith("text/") or ctype.endswith("json"):
            ctype = ("text/html" if target.suffix == ".html" else "text/plain") + "; charset=utf-8"
        size = target.stat().st_size
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(size))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            with target.open("rb") as fh:
                shutil.copyfileobj(fh, self.wfile)

    def _zip(self, target: Path, raw: str) -> None:
        if not target.is_dir() or target == self.server.root:
            self._send(HTTPStatus.BAD_REQUEST, _page("400 not a run directory", ""))
            return
        with tempfile.TemporaryFile() as tmp:
            _zip_directory(self.server.root, target, tmp)
            size = tmp.tell()
            tmp.seek(0)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(size))
            self.send_header(
                "Content-Disposition", f'attachment; filename="{quote(target.name)}.zip"'
            )
            self.end_headers()
            if self.command != "HEAD":
                shutil.copyfileobj(tmp, self.wfile)


class StoreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Path, host: str, port: int, verbose: bool = False) -> None:
        self.root = Path(store).resolve()
        self.verbose = verbose
        super().__init__((host, port), StoreHandler)


def make_server(store: Path, host: str = "127.0.0.1", port: int = 0) -> StoreServer:
    """A server bound but not yet serving; port 0 picks a free port (server.server_port)."""
    return StoreServer(store, host, port)


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
