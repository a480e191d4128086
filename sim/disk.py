"""A simulated disk: the file system in memory, where only fsync makes bytes survive a crash.

Each file keeps what the OS holds (``data``) and what is on the platter (``durable``). A
crash of a node puts every file under its directory back to its durable content and
invalidates the dead process's open handles, so nothing it "writes" afterwards lands.
Creating a file or renaming over one is durable only when the directory is synced too
(``replace_file(durable=True)``); a torn write is not modelled: a crash cuts at a write boundary.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class _File:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes | None = None  # None: the file itself would not survive a crash
    generation: int = 0


class _Handle:
    """An append handle of one process incarnation; dead once the file's generation moves."""

    def __init__(self, disk: SimDisk, path: str) -> None:
        self._disk = disk
        self._path = path
        self._file = disk.files[path]
        self._generation = self._file.generation

    def _alive(self) -> bool:
        f = self._disk.files.get(self._path)
        return f is self._file and f.generation == self._generation

    def write(self, data: bytes) -> None:
        if self._alive():
            self._file.data += data

    def fsync(self) -> None:
        if self._alive():
            self._file.durable = bytes(self._file.data)
            self._disk.fsyncs += 1

    def tell(self) -> int:
        return len(self._file.data)

    def close(self) -> None:
        pass


class SimDisk:
    """One in-memory file system for the whole simulated cluster (paths are per node)."""

    def __init__(self, rng: random.Random, fsync_ms: tuple[float, float] = (0.2, 2.0)) -> None:
        self.rng = rng
        self.fsync_ms = fsync_ms
        self.files: dict[str, _File] = {}
        self.dirs: set[str] = set()
        self.fsyncs = 0

    def mkdir(self, path: Path) -> None:
        p = path
        while str(p) not in self.dirs and p != p.parent:
            self.dirs.add(str(p))
            p = p.parent

    def exists(self, path: Path) -> bool:
        return str(path) in self.files or str(path) in self.dirs

    def read_bytes(self, path: Path) -> bytes:
        f = self.files.get(str(path))
        if f is None:
            raise FileNotFoundError(f"[sim disk] {path}")
        return bytes(f.data)

    def listdir(self, path: Path) -> list[str]:
        prefix = str(path).rstrip("/") + "/"
        names = {
            p[len(prefix) :].split("/", 1)[0]
            for p in (*self.files, *self.dirs)
            if p.startswith(prefix)
        }
        return sorted(names)

    def open_append(self, path: Path) -> _Handle:
        key = str(path)
        if key not in self.files:
            self.files[key] = _File()
        return _Handle(self, key)

    def truncate(self, path: Path, length: int) -> None:
        f = self.files[str(path)]
        del f.data[length:]
        f.durable = bytes(f.data)

    def replace_file(self, path: Path, data: bytes, *, durable: bool) -> None:
        key = str(path)
        old = self.files.get(key)
        new = _File(bytearray(data), bytes(data) if durable else (old.durable if old else None))
        if old is not None:
            new.generation = old.generation + 1  # handles on the old inode write nowhere
        self.files[key] = new

    async def fsync_async(self, file: object) -> None:
        assert isinstance(file, _Handle)
        lo, hi = self.fsync_ms
        await asyncio.sleep(self.rng.uniform(lo, hi) / 1000)
        file.fsync()

    def crash(self, directory: Path) -> dict[str, int]:
        """Every file under ``directory`` loses its unsynced bytes; what was lost, by file."""
        prefix = str(directory).rstrip("/") + "/"
        lost: dict[str, int] = {}
        for key in sorted(self.files):
            if not key.startswith(prefix):
                continue
            f = self.files[key]
            if f.durable is None:
                lost[key] = len(f.data)
                del self.files[key]
                continue
            if len(f.data) != len(f.durable) or f.data != f.durable:
                lost[key] = len(f.data) - len(f.durable)
            self.files[key] = _File(bytearray(f.durable), f.durable, f.generation + 1)
        return lost
