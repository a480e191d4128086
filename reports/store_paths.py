"""Paths of the store as `serve` may touch them: resolved, inside the root, of a known kind.

Whatever wrote the store can leave a symlink pointing anywhere (out of the store, at itself) or a
FIFO, socket or device where a file was expected. Each name is resolved and classified from stat
alone before anything is opened, so no read or listing leaves the store and none blocks on a pipe.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

# O_NONBLOCK: a FIFO swapped in after the stat still cannot block the open; O_NOFOLLOW: nor can a
# symlink swapped in for the resolved name lead out of the store.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class Refusal(StrEnum):
    """Why a name of the store is not served; the value is the reason a page shows."""

    OUTSIDE = "outside the store"
    MISSING = "not found"
    LOOP = "a symlink loop"
    DENIED = "permission denied"
    NOT_REGULAR = "not a regular file"
    UNREADABLE = "unreadable"


class Kind(StrEnum):
    FILE = "file"
    DIRECTORY = "directory"
    OTHER = "other"  # FIFO, socket, device: listed nowhere, never opened


@dataclass(frozen=True)
class StoreEntry:
    """A name of the store resolved to a real path inside it."""

    path: Path  # resolved: no symlink left, inside the root
    kind: Kind
    size: int


def _refusal_of(exc: OSError) -> Refusal:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return Refusal.MISSING
    if isinstance(exc, PermissionError):
        return Refusal.DENIED
    if exc.errno == errno.ELOOP:
        return Refusal.LOOP
    if exc.errno == errno.ENAMETOOLONG:
        return Refusal.MISSING
    return Refusal.UNREADABLE


def _kind_of(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return Kind.FILE
    if stat.S_ISDIR(mode):
        return Kind.DIRECTORY
    return Kind.OTHER


def locate(root: Path, path: Path) -> StoreEntry | Refusal:
    """`path` resolved (every symlink followed) and stat'ed, if it exists inside `root`.

    `root` must itself be resolved. Nothing is opened: a FIFO comes back as Kind.OTHER.
    """
    try:
        real = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a symlink loop so, strict or not
        return Refusal.LOOP
    except OSError as exc:
        return _refusal_of(exc)
    if real != root and not real.is_relative_to(root):
        return Refusal.OUTSIDE
    try:
        st = real.stat()
    except OSError as exc:
        return _refusal_of(exc)
    return StoreEntry(path=real, kind=_kind_of(st.st_mode), size=st.st_size)


def locate_request(root: Path, rel: str) -> StoreEntry | Refusal:
    """The entry a URL path names under `root`; `..`, absolute paths and NUL never pass."""
    if "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return Refusal.OUTSIDE
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        return Refusal.OUTSIDE
    return locate(root, root.joinpath(*parts))


def open_regular(entry: StoreEntry) -> IO[bytes] | Refusal:
    """The entry opened for reading, only if it is (still) a regular file."""
    if entry.kind is not Kind.FILE:
        return Refusal.NOT_REGULAR
    try:
        fd = os.open(entry.path, _OPEN_FLAGS)
    except OSError as exc:
        return _refusal_of(exc)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return Refusal.NOT_REGULAR
    return os.fdopen(fd, "rb")


def regular_file(root: Path, path: Path) -> StoreEntry | None:
    """`path` if it resolves to a regular file inside the store, else None."""
    entry = locate(root, path)
    return entry if isinstance(entry, StoreEntry) and entry.kind is Kind.FILE else None


def read_json(root: Path, path: Path) -> Any:
    """The JSON value of a regular file inside the store, None for anything else or bad JSON."""
    entry = regular_file(root, path)
    if entry is None:
        return None
    opened = open_regular(entry)
    if isinstance(opened, Refusal):
        return None
    try:
        with opened as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def list_directory(root: Path, directory: StoreEntry) -> list[tuple[str, StoreEntry]]:
    """The files and directories a directory of the store holds, by name.

    Names that lead out of the store, loop, vanish or are not files or directories are left out.
    """
    try:
        children = sorted(os.scandir(directory.path), key=lambda e: e.name)
    except OSError:
        return []
    out: list[tuple[str, StoreEntry]] = []
    for child in children:
        entry = locate(root, directory.path / child.name)
        if isinstance(entry, StoreEntry) and entry.kind is not Kind.OTHER:
            out.append((child.name, entry))
    return out


def walk_files(root: Path, directory: StoreEntry) -> Iterator[tuple[Path, StoreEntry]]:
    """Every regular file under a directory of the store, as (path under it, entry).

    Symlinked directories are not descended (a loop of them would never end); a symlinked file
    is kept when it resolves inside the store.
    """
    for dirpath, dirnames, filenames in os.walk(directory.path):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(filenames):
            entry = regular_file(root, here / name)
            if entry is not None:
                yield (here / name).relative_to(directory.path), entry
