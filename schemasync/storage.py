"""Durable multi-version storage of one table partition: a write-ahead log and MVCC in memory.

Every committed row version keeps its commit_ts and the table schema version it was written
with (values by column id, so readers can upgrade it); index entries are versioned the same way,
so a backfill can insert entries "in the past" without hiding a later delete. Prepared
transactions are logged (fsync) with their writes and commit_ts, so a restarted primary can
finish them once the coordinator's decision is known.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from schemasync.disk import LOCAL_DISK, Disk

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")  # payload length, crc32 of payload
_MAX_RECORD = 64 * 1024 * 1024
_WAL_NAME = re.compile(r"^t(\d+)_p(\d+)\.wal$")

RowValues = dict[int, Any]
IndexValues = tuple[Any, ...]


@dataclass(frozen=True)
class RowVersion:
    """One committed version of a row; ``values`` is None for a delete (tombstone)."""

    commit_ts: int
    schema_version: int
    values: RowValues | None


@dataclass(frozen=True)
class KeyWrite:
    """A transaction's final write of one key: a whole row by column id, or a delete."""

    key: int
    schema_version: int
    values: RowValues | None


@dataclass(frozen=True)
class IndexWrite:
    """Adds (``present``) or removes the entry (``values``, ``key``) of index ``index_id``."""

    index_id: int
    values: IndexValues
    key: int
    present: bool


@dataclass(frozen=True)
class PreparedTxn:
    """What a participant made durable at prepare: enough to commit it after a restart."""

    txn_id: str
    coordinator: str
    commit_ts: int
    writes: tuple[KeyWrite, ...]
    index_writes: tuple[IndexWrite, ...] = ()


@dataclass(frozen=True)
class IndexEntry:
    index_id: int
    values: IndexValues
    key: int


class WalCorrupt(Exception):
    """A record in the middle of the log failed its checksum: refuse to guess."""


class WriteAheadLog:
    """Append-only log of msgpack records with group commit: one fsync serves every waiter."""

    def __init__(self, path: Path, disk: Disk = LOCAL_DISK) -> None:
        self.path = path
        self._disk = disk
        self._file = disk.open_append(path)
        self._sync_lock = asyncio.Lock()
        self._appended = 0
        self._synced = 0
        self.fsyncs = 0

    @staticmethod
    def read_records(path: Path, disk: Disk = LOCAL_DISK) -> tuple[list[dict[str, Any]], int]:
        """The intact records of a log and the byte length they span (a torn tail is cut)."""
        if not disk.exists(path):
            return [], 0
        data = disk.read_bytes(path)
        records: list[dict[str, Any]] = []
        pos = 0
        while pos + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, pos)
            end = pos + _HEADER.size + length
            if length > _MAX_RECORD or end > len(data):
                break  # torn tail: the crash happened while this record was written
            payload = data[pos + _HEADER.size : end]
            if zlib.crc32(payload) != crc:
                if _only_torn_after(data, end):
                    break
                raise WalCorrupt(f"{path}: bad checksum at offset {pos}")
            records.append(msgpack.unpackb(payload, raw=False, strict_map_key=False))
            pos = end
        return records, pos

    @staticmethod
    def cut_torn_tail(path: Path, disk: Disk = LOCAL_DISK) -> tuple[list[dict[str, Any]], bool]:
        """The intact records; a torn tail is truncated away (durably). True if one was cut."""
        records, good_len = WriteAheadLog.read_records(path, disk)
        if disk.exists(path) and len(disk.read_bytes(path)) > good_len:
            disk.truncate(path, good_len)
            return records, True
        return records, False

    def append(self, record: dict[str, Any]) -> None:
        """Write a record to the OS (not yet durable: call ``sync``)."""
        self._file.write(_frame(record))
        self._appended += 1

    async def sync(self) -> None:
        """Return once every record appended before the call is on disk (fsync)."""
        target = self._appended
        async with self._sync_lock:
            if self._synced >= target:
                return
            upto = self._appended
            await self._disk.fsync_async(self._file)
            self._synced = upto
            self.fsyncs += 1

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the log by ``records`` (compaction): write aside, fsync, rename, fsync dir."""
        data = b"".join(_frame(r) for r in records)
        self._file.close()
        self._disk.replace_file(self.path, data, durable=True)
        self._file = self._disk.open_append(self.path)
        self._synced = self._appended

    def size(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()


def _frame(record: dict[str, Any]) -> bytes:
    payload = msgpack.packb(record, use_bin_type=True)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _only_torn_after(data: bytes, end: int) -> bool:
    """A bad checksum on the last record is a torn write; anywhere else it is corruption."""
    return end >= len(data)


def _encode_writes(writes: Iterable[KeyWrite]) -> list[list[Any]]:
    return [
        [w.key, w.schema_version, None if w.values is None else list(w.values.items())]
        for w in writes
    ]


def _decode_writes(raw: list[list[Any]]) -> tuple[KeyWrite, ...]:
    return tuple(
        KeyWrite(int(k), int(sv), None if vals is None else {int(c): v for c, v in vals})
        for k, sv, vals in raw
    )


def _encode_index_writes(writes: Iterable[IndexWrite]) -> list[list[Any]]:
    return [[w.index_id, list(w.values), w.key, w.present] for w in writes]


def _decode_index_writes(raw: list[list[Any]]) -> tuple[IndexWrite, ...]:
    return tuple(IndexWrite(int(i), tuple(v), int(k), bool(p)) for i, v, k, p in raw)


def _insert_sorted(versions: list[Any], item: Any) -> None:
    """Insert keeping order by timestamp (element 0); equal timestamps keep arrival order."""
    if not versions or versions[-1][0] <= item[0]:
        versions.append(item)
    else:
        bisect.insort_right(versions, item, key=lambda v: v[0])


@dataclass
class _IndexData:
    # (values, key) -> [(ts, present)] sorted by ts
    entries: dict[tuple[IndexValues, int], list[tuple[int, bool]]] = field(default_factory=dict)
    # values -> keys that ever had an entry with these values (for lookups)
    by_values: dict[IndexValues, set[int]] = field(default_factory=dict)


class PartitionStore:
    """Rows and index entries of one (table, partition), durable through its own WAL."""

    def __init__(
        self, directory: Path, table_id: int, partition: int, disk: Disk = LOCAL_DISK
    ) -> None:
        self.table_id = table_id
        self._disk = disk
        self.partition = partition
        self.path = directory / f"t{table_id}_p{partition}.wal"
        self._rows: dict[int, list[tuple[int, int, RowValues | None]]] = {}
        self._indexes: dict[int, _IndexData] = {}
        self._prepared: dict[str, PreparedTxn] = {}
        self._decided: dict[str, int | None] = {}  # txn -> commit_ts, or None if aborted
        self._changed = asyncio.Condition()
        self._inflight = 0  # records appended whose effect is not applied in memory yet
        self._recover()
        self._wal = WriteAheadLog(self.path, disk)

    # -- recovery -------------------------------------------------------------------------
    def _recover(self) -> None:
        records, cut = WriteAheadLog.cut_torn_tail(self.path, self._disk)
        if cut:
            log.warning("%s: cut a torn tail", self.path)
        for record in records:
            self._replay(record)
        if records:
            log.info(
                "%s: recovered %d records, %d keys, %d in-doubt txns",
                self.path,
                len(records),
                len(self._rows),
                len(self._prepared),
            )

    def _replay(self, r: dict[str, Any]) -> None:
        kind = r["k"]
        if kind == "prepare":
            self._prepared[r["txn"]] = PreparedTxn(
                r["txn"],
                r["coord"],
                int(r["cts"]),
                _decode_writes(r["w"]),
                _decode_index_writes(r["iw"]),
            )
        elif kind == "commit":
            txn = self._prepared.pop(r["txn"], None)
            if txn is not None:
                self._apply(txn.writes, txn.index_writes, int(r["cts"]))
            self._decided[r["txn"]] = int(r["cts"])
        elif kind == "abort":
            self._prepared.pop(r["txn"], None)
            self._decided[r["txn"]] = None
        elif kind == "commit1":
            self._apply(_decode_writes(r["w"]), _decode_index_writes(r["iw"]), int(r["cts"]))
            self._decided[r["txn"]] = int(r["cts"])
        elif kind == "backfill":
            self._apply((), _decode_index_writes(r["iw"]), int(r["ts"]))
        elif kind == "snapshot":
            self._load_snapshot(r)
        else:
            raise WalCorrupt(f"{self.path}: unknown record kind {kind!r}")

    # -- applying -------------------------------------------------------------------------
    def _apply(
        self, writes: Iterable[KeyWrite], index_writes: Iterable[IndexWrite], ts: int
    ) -> None:
        for w in writes:
            _insert_sorted(self._rows.setdefault(w.key, []), (ts, w.schema_version, w.values))
        for iw in index_writes:
            data = self._indexes.setdefault(iw.index_id, _IndexData())
            _insert_sorted(data.entries.setdefault((iw.values, iw.key), []), (ts, iw.present))
            data.by_values.setdefault(iw.values, set()).add(iw.key)

    # -- reads ----------------------------------------------------------------------------
    def latest(self, key: int) -> RowVersion | None:
        """The newest committed version of ``key`` (None if never written)."""
        versions = self._rows.get(key)
        if not versions:
            return None
        ts, sv, values = versions[-1]
        return RowVersion(ts, sv, values)

    def read(self, key: int, ts: int) -> RowVersion | None:
        """The version of ``key`` visible at ``ts`` (committed at or before it)."""
        versions = self._rows.get(key)
        if not versions:
            return None
        i = bisect.bisect_right(versions, ts, key=lambda v: v[0])
        if i == 0:
            return None
        cts, sv, values = versions[i - 1]
        return RowVersion(cts, sv, values)

    def scan(self, ts: int) -> Iterator[tuple[int, RowVersion]]:
        """Every key with a live row at ``ts``, in key order."""
        for key in sorted(self._rows):
            version = self.read(key, ts)
            if version is not None and version.values is not None:
                yield key, version

    def index_entries(self, index_id: int, ts: int) -> list[IndexEntry]:
        """Entries of an index present at ``ts``."""
        data = self._indexes.get(index_id)
        if data is None:
            return []
        out = []
        for (values, key), versions in data.entries.items():
            if _present_at(versions, ts):
                out.append(IndexEntry(index_id, values, key))
        out.sort(key=lambda e: (e.key, repr(e.values)))
        return out

    def index_lookup(self, index_id: int, values: IndexValues, ts: int) -> list[int]:
        """Keys whose entry for ``values`` is present at ``ts``."""
        data = self._indexes.get(index_id)
        if data is None:
            return []
        keys = data.by_values.get(values, set())
        return sorted(k for k in keys if _present_at(data.entries[(values, k)], ts))

    def prepared(self) -> list[PreparedTxn]:
        """Transactions prepared here and not yet decided (in doubt after a restart)."""
        return list(self._prepared.values())

    def outcome(self, txn_id: str) -> tuple[bool, int | None] | None:
        """(committed, commit_ts) if this partition knows how ``txn_id`` ended, else None."""
        if txn_id not in self._decided:
            return None
        cts = self._decided[txn_id]
        return (cts is not None, cts)

    def is_prepared(self, txn_id: str) -> bool:
        return txn_id in self._prepared

    async def wait_prepared_below(self, ts: int, keys: set[int] | None = None) -> None:
        """Wait until no prepared txn with commit_ts <= ts (touching ``keys``) is undecided.

        A snapshot read at ts must not miss a commit whose timestamp is below it; the caller
        bounds the wait with its own timeout.
        """

        def blocked() -> bool:
            for txn in self._prepared.values():
                if txn.commit_ts > ts:
                    continue
                if keys is None or any(w.key in keys for w in txn.writes):
                    return True
                if keys is not None and any(iw.key in keys for iw in txn.index_writes):
                    return True
            return False

        async with self._changed:
            await self._changed.wait_for(lambda: not blocked())

    # -- durable writes -------------------------------------------------------------------
    async def prepare(self, txn: PreparedTxn) -> None:
        """Make a txn's writes durable as prepared (fsync) without applying them."""
        if txn.txn_id in self._prepared:
            return
        if not (txn.writes or txn.index_writes):
            self._prepared[txn.txn_id] = txn
            return
        self._inflight += 1
        try:
            self._wal.append(
                {
                    "k": "prepare",
                    "txn": txn.txn_id,
                    "coord": txn.coordinator,
                    "cts": txn.commit_ts,
                    "w": _encode_writes(txn.writes),
                    "iw": _encode_index_writes(txn.index_writes),
                }
            )
            await self._wal.sync()
            if txn.txn_id in self._decided:  # an abort overtook the fsync
                self._wal.append({"k": "abort", "txn": txn.txn_id})
            else:
                self._prepared[txn.txn_id] = txn
        finally:
            self._inflight -= 1

    async def commit_prepared(self, txn_id: str, commit_ts: int) -> bool:
        """Apply a prepared txn at ``commit_ts`` (fsync'd); False if it was not prepared here."""
        txn = self._prepared.get(txn_id)
        if txn is None:
            return False
        self._inflight += 1
        try:
            if txn.writes or txn.index_writes:
                self._wal.append({"k": "commit", "txn": txn_id, "cts": commit_ts})
                await self._wal.sync()
            # The record is durable; only now make the writes visible.
            if self._prepared.pop(txn_id, None) is not None:
                self._apply(txn.writes, txn.index_writes, commit_ts)
            self._decided[txn_id] = commit_ts
        finally:
            self._inflight -= 1
        await self._notify()
        return True

    async def abort_prepared(self, txn_id: str) -> None:
        """Forget a prepared txn. Not fsync'd: a lost abort record is re-asked on recovery."""
        txn = self._prepared.pop(txn_id, None)
        if txn is not None and (txn.writes or txn.index_writes):
            self._wal.append({"k": "abort", "txn": txn_id})
        self._decided[txn_id] = None
        await self._notify()

    async def commit_single(self, txn: PreparedTxn) -> None:
        """One-phase commit (this partition is the only participant): one fsync'd record."""
        self._inflight += 1
        try:
            if txn.writes or txn.index_writes:
                self._wal.append(
                    {
                        "k": "commit1",
                        "txn": txn.txn_id,
                        "cts": txn.commit_ts,
                        "w": _encode_writes(txn.writes),
                        "iw": _encode_index_writes(txn.index_writes),
                    }
                )
                await self._wal.sync()
                self._apply(txn.writes, txn.index_writes, txn.commit_ts)
            self._decided[txn.txn_id] = txn.commit_ts
        finally:
            self._inflight -= 1
        await self._notify()

    async def backfill(self, index_writes: list[IndexWrite], ts: int) -> None:
        """Add index entries as of ``ts`` (durable), without hiding later entry changes."""
        if not index_writes:
            return
        self._inflight += 1
        try:
            self._wal.append({"k": "backfill", "ts": ts, "iw": _encode_index_writes(index_writes)})
            await self._wal.sync()
            self._apply((), index_writes, ts)
        finally:
            self._inflight -= 1

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- compaction -----------------------------------------------------------------------
    def wal_size(self) -> int:
        return self._wal.size()

    def compact(self) -> bool:
        """Rewrite the log as one snapshot record plus the still-prepared txns.

        Skipped (False) while a record is on its way to disk and not yet applied in memory:
        the snapshot would otherwise drop it.
        """
        if self._inflight:
            return False
        records: list[dict[str, Any]] = [self._snapshot_record()]
        for txn in self._prepared.values():
            records.append(
                {
                    "k": "prepare",
                    "txn": txn.txn_id,
                    "coord": txn.coordinator,
                    "cts": txn.commit_ts,
                    "w": _encode_writes(txn.writes),
                    "iw": _encode_index_writes(txn.index_writes),
                }
            )
        self._wal.rewrite(records)
        return True

    def _snapshot_record(self) -> dict[str, Any]:
        rows = [
            [key, [[ts, sv, None if v is None else list(v.items())] for ts, sv, v in versions]]
            for key, versions in self._rows.items()
        ]
        indexes = [
            [index_id, [[list(vals), key, vers] for (vals, key), vers in data.entries.items()]]
            for index_id, data in self._indexes.items()
        ]
        decided = [[t, c] for t, c in self._decided.items()]
        return {"k": "snapshot", "rows": rows, "ix": indexes, "decided": decided}

    def _load_snapshot(self, r: dict[str, Any]) -> None:
        self._rows = {
            int(key): [
                (int(ts), int(sv), None if v is None else {int(c): x for c, x in v})
                for ts, sv, v in versions
            ]
            for key, versions in r["rows"]
        }
        self._indexes = {}
        for index_id, entries in r["ix"]:
            data = _IndexData()
            for vals, key, vers in entries:
                values = tuple(vals)
                data.entries[(values, int(key))] = [(int(ts), bool(p)) for ts, p in vers]
                data.by_values.setdefault(values, set()).add(int(key))
            self._indexes[int(index_id)] = data
        self._decided = {t: (None if c is None else int(c)) for t, c in r["decided"]}
        self._prepared = {}

    def close(self) -> None:
        self._wal.close()


def _present_at(versions: list[tuple[int, bool]], ts: int) -> bool:
    i = bisect.bisect_right(versions, ts, key=lambda v: v[0])
    return i > 0 and versions[i - 1][1]


class Storage:
    """All partition stores of one node, under ``data_dir/storage``; opened lazily."""

    def __init__(
        self, data_dir: Path, compact_bytes: int = 64 * 1024 * 1024, disk: Disk = LOCAL_DISK
    ) -> None:
        self.directory = data_dir / "storage"
        self._disk = disk
        disk.mkdir(self.directory)
        self._stores: dict[tuple[int, int], PartitionStore] = {}
        self.compact_bytes = compact_bytes

    def recover_all(self) -> list[PartitionStore]:
        """Open every partition that has a log on disk (restart recovery)."""
        for name in self._disk.listdir(self.directory):
            m = _WAL_NAME.match(name)
            if m:
                self.partition(int(m.group(1)), int(m.group(2)))
        return list(self._stores.values())

    def partition(self, table_id: int, partition: int) -> PartitionStore:
        store = self._stores.get((table_id, partition))
        if store is None:
            store = PartitionStore(self.directory, table_id, partition, self._disk)
            self._stores[(table_id, partition)] = store
        return store

    def stores(self) -> list[PartitionStore]:
        return list(self._stores.values())

    def maybe_compact(self) -> None:
        for store in self._stores.values():
            if store.wal_size() > self.compact_bytes:
                store.compact()

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
