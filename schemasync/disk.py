"""The disk seam: every byte the node makes durable goes through a ``Disk``.

``LocalDisk`` is the real file system (fsync is the only durability). A simulation passes its
own ``Disk`` whose crash drops whatever was not fsynced, so the node code stays the same.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import IO, Protocol


class DiskFile(Protocol):
    """A file open for appending; ``write`` reaches the OS, ``fsync`` makes it durable."""

    def write(self, data: bytes) -> None: ...

    def fsync(self) -> None: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...


class Disk(Protocol):
    def mkdir(self, path: Path) -> None: ...

    def exists(self, path: Path) -> bool: ...

    def read_bytes(self, path: Path) -> bytes: ...

    def listdir(self, path: Path) -> list[str]: ...

    def open_append(self, path: Path) -> DiskFile: ...

    def truncate(self, path: Path, length: int) -> None:
        """Cut the file to ``length`` bytes, durably."""
        ...

    def replace_file(self, path: Path, data: bytes, *, durable: bool) -> None:
        """Replace the file's content atomically (temp file and rename); ``durable`` also
        fsyncs the data and the directory before returning."""
        ...

    async def fsync_async(self, file: DiskFile) -> None:
        """``file.fsync()`` without blocking the event loop."""
        ...


class LocalFile:
    """An append-mode file whose flush+fsync may run on a worker thread."""

    def __init__(self, path: Path) -> None:
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 - owned until close()
        self._lock = threading.Lock()  # fsync_async runs on a thread beside write()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._file.write(data)

    def fsync(self) -> None:
        with self._lock:
            self._file.flush()
            fd = self._file.fileno()
        os.fsync(fd)

    def tell(self) -> int:
        with self._lock:
            return self._file.tell()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDisk:
    """The real file system."""

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def listdir(self, path: Path) -> list[str]:
        return sorted(p.name for p in path.iterdir())

    def open_append(self, path: Path) -> LocalFile:
        return LocalFile(path)

    def truncate(self, path: Path, length: int) -> None:
        with open(path, "r+b") as f:
            f.truncate(length)
            f.flush()
            os.fsync(f.fileno())

    def replace_file(self, path: Path, data: bytes, *, durable: bool) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _fsync_dir(path.parent)

    async def fsync_async(self, file: DiskFile) -> None:
        await asyncio.to_thread(file.fsync)


LOCAL_DISK = LocalDisk()
