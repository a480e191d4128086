"""Durable Raft state: the log (append-only file, fsync per batch), term/vote, the snapshot.

Every write that Raft relies on for safety is fsynced before the caller replies to a peer.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from schemasync.disk import LOCAL_DISK, Disk

_LEN = struct.Struct(">I")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogEntry:
    index: int
    term: int
    safe_ts: int
    cmd: dict[str, Any]

    def to_wire(self) -> list[Any]:
        return [self.index, self.term, self.safe_ts, self.cmd]

    @staticmethod
    def from_wire(raw: list[Any]) -> LogEntry:
        return LogEntry(int(raw[0]), int(raw[1]), int(raw[2]), dict(raw[3]))


def _record(obj: Any) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return _LEN.pack(len(payload)) + payload


class RaftLog:
    """Entries after the snapshot point, in memory and in an append-only record file."""

    def __init__(self, path: Path, disk: Disk = LOCAL_DISK) -> None:
        self.path = path
        self._disk = disk
        self.base_index = 0
        self.base_term = 0
        self.entries: list[LogEntry] = []
        self._load()
        self._file = disk.open_append(self.path)

    def _load(self) -> None:
        if not self._disk.exists(self.path):
            return
        data = self._disk.read_bytes(self.path)
        pos = 0
        good = 0
        while pos + 4 <= len(data):
            (length,) = _LEN.unpack_from(data, pos)
            if pos + 4 + length > len(data):
                break
            try:
                rec = msgpack.unpackb(data[pos + 4 : pos + 4 + length], raw=False)
            except Exception:
                break
            pos += 4 + length
            good = pos
            kind = rec[0]
            if kind == "b":
                self.base_index, self.base_term = int(rec[1]), int(rec[2])
                self.entries = []
            elif kind == "e":
                entry = LogEntry.from_wire(rec[1])
                self._truncate_mem(entry.index)
                if entry.index == self.last_index + 1:
                    self.entries.append(entry)
            elif kind == "t":
                self._truncate_mem(int(rec[1]))
        if good < len(data):
            log.warning(
                "raft log %s: dropping a torn tail of %d bytes", self.path, len(data) - good
            )
            self._disk.truncate(self.path, good)

    @property
    def last_index(self) -> int:
        return self.base_index + len(self.entries)

    @property
    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.base_term

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``; None if compacted away (below base) or absent."""
        if index == self.base_index:
            return self.base_term
        if index < self.base_index or index > self.last_index:
            return None
        return self.entries[index - self.base_index - 1].term

    def entry(self, index: int) -> LogEntry:
        return self.entries[index - self.base_index - 1]

    def slice(self, start: int, max_entries: int) -> list[LogEntry]:
        lo = start - self.base_index - 1
        return self.entries[lo : lo + max_entries]

    def _truncate_mem(self, index: int) -> None:
        if index <= self.last_index:
            del self.entries[max(0, index - self.base_index - 1) :]

    def append(self, entries: list[LogEntry], sync: bool = True) -> None:
        """Append (and fsync unless ``sync`` is False: then call ``sync()`` before relying on
        it); entries must continue the log."""
        if not entries:
            return
        buf = bytearray()
        for e in entries:
            if e.index != self.last_index + 1:
                raise ValueError(f"append of index {e.index} after {self.last_index}")
            self.entries.append(e)
            buf += _record(["e", e.to_wire()])
        self._file.write(bytes(buf))
        if sync:
            self._file.fsync()

    def sync(self) -> None:
        self._file.fsync()

    def truncate_from(self, index: int) -> None:
        """Drop entries at ``index`` and after (a conflicting suffix), durably."""
        if index > self.last_index:
            return
        self._truncate_mem(index)
        self._file.write(_record(["t", index]))
        self._file.fsync()

    def compact(self, index: int, term: int) -> None:
        """Forget entries up to ``index`` (now covered by a snapshot); rewrite the file."""
        if index <= self.base_index:
            return
        keep = [e for e in self.entries if e.index > index]
        if index > self.last_index or self.term_at(index) != term:
            keep = []
        self.base_index, self.base_term, self.entries = index, term, keep
        self._rewrite()

    def _rewrite(self) -> None:
        buf = bytearray(_record(["b", self.base_index, self.base_term]))
        for e in self.entries:
            buf += _record(["e", e.to_wire()])
        self._file.close()
        self._disk.replace_file(self.path, bytes(buf), durable=True)
        self._file = self._disk.open_append(self.path)

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class HardState:
    term: int
    voted_for: str | None


class HardStateStore:
    """Current term and vote, written atomically with fsync before any reply depends on them."""

    def __init__(self, path: Path, disk: Disk = LOCAL_DISK) -> None:
        self.path = path
        self._disk = disk

    def load(self) -> HardState:
        if not self._disk.exists(self.path):
            return HardState(0, None)
        raw = msgpack.unpackb(self._disk.read_bytes(self.path), raw=False)
        return HardState(int(raw["term"]), raw.get("voted_for"))

    def save(self, state: HardState) -> None:
        self._disk.replace_file(
            self.path,
            msgpack.packb({"term": state.term, "voted_for": state.voted_for}, use_bin_type=True),
            durable=True,
        )


@dataclass(frozen=True)
class Snapshot:
    index: int
    term: int
    data: bytes


class SnapshotStore:
    """The latest state machine snapshot, replaced atomically."""

    def __init__(self, path: Path, disk: Disk = LOCAL_DISK) -> None:
        self.path = path
        self._disk = disk

    def load(self) -> Snapshot | None:
        if not self._disk.exists(self.path):
            return None
        raw = msgpack.unpackb(self._disk.read_bytes(self.path), raw=False)
        return Snapshot(int(raw["index"]), int(raw["term"]), bytes(raw["data"]))

    def save(self, snap: Snapshot) -> None:
        self._disk.replace_file(
            self.path,
            msgpack.packb(
                {"index": snap.index, "term": snap.term, "data": snap.data}, use_bin_type=True
            ),
            durable=True,
        )


class CommitMarker:
    """A hint of the last known commit index, so a restart replays the log at once.

    Not fsynced: losing it only delays recovery until the leader repeats the commit index.
    """

    def __init__(self, path: Path, disk: Disk = LOCAL_DISK) -> None:
        self.path = path
        self._disk = disk

    def load(self) -> int:
        try:
            return int(self._disk.read_bytes(self.path).decode().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def save(self, index: int) -> None:
        self._disk.replace_file(self.path, str(index).encode(), durable=False)
