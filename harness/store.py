"""The results store: one directory per run, `store/<test>/<YYYYmmddTHHMMSS>/`, plus `latest` links.

A run directory follows shared/spec/history.md; the harness adds `nodes/<name>/` (node logs),
`controller.log`, and a `.tmp/` temp area (ssh keys, local node data) removed at teardown.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.rundir import RunPaths

_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RunDir(RunPaths):
    """A run directory this process created: its paths, the test and a unique run id."""

    test: str
    run_id: str  # unique, safe in container and network names

    def node_dir(self, node: str) -> Path:
        d = super().node_dir(node)
        d.mkdir(parents=True, exist_ok=True)
        return d


# the store's own entries at its top: a test of that name would be a loop (`latest` pointing
# into itself) or would mix its runs with the nights (`nightly/<night>/`)
RESERVED_NAMES = frozenset({"latest", "nightly"})


def safe_name(name: str) -> str:
    return _NAME_OK.sub("-", name).strip("-.") or "test"


def store_name_problem(name: str) -> str | None:
    """Why `name` cannot name a test in the store (None: it can). A plain name only: not
    empty, no path (`/`, `..`), not hidden, and none of the store's own entries."""
    if not name.strip():
        return "empty"
    if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        return f"not a plain name: {name!r} (no '/', '..' or NUL)"
    if name.startswith("."):
        return f"a hidden name: {name!r} (the store keeps its temporary entries so)"
    if safe_name(name) in RESERVED_NAMES:
        reserved = ", ".join(sorted(RESERVED_NAMES))
        return f"{name!r} is the store's own entry (reserved: {reserved})"
    return None


def new_run_dir(store: Path, test: str) -> RunDir:
    """Create `store/<test>/<timestamp>/` (a suffix if that second is taken) and point the
    `latest` links at it. A name that is one of the store's own entries raises ValueError
    (the command line refuses it first, with store_name_problem's stricter rule)."""
    test = safe_name(test)
    if test in RESERVED_NAMES:
        raise ValueError(f"test name: {test!r} is the store's own entry")
    parent = store / test
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = parent / stamp
    n = 1
    while True:
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = parent / f"{stamp}-{n}"
    _relink(store / "latest", path.relative_to(store))
    _relink(parent / "latest", Path(path.name))
    run_id = f"{path.name.lower()}-{secrets.token_hex(3)}"
    return RunDir(path=path, test=test, run_id=run_id)


def _relink(link: Path, target: Path) -> None:
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, data: Any) -> None:
    """Write-then-rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def controller_logging(run: RunDir) -> logging.Handler:
    """Attach a file handler for the controller log to the `schemachaos` logger tree."""
    handler = logging.FileHandler(run.controller_log)
    handler.setFormatter(
        logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger("schemachaos")
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    return handler


def detach_logging(handler: logging.Handler) -> None:
    logging.getLogger("schemachaos").removeHandler(handler)
    handler.close()


def resolve_run_dir(path: Path) -> Path:
    """A run dir given directly or through a `latest` link; the error names the path."""
    resolved = path.resolve()
    if not resolved.is_dir():
        raise FileNotFoundError(f"run directory not found: {path}")
    return resolved
