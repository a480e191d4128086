"""The partition store: WAL durability and recovery, MVCC reads, versioned index entries."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemasync.storage import (
    IndexWrite,
    KeyWrite,
    PartitionStore,
    PreparedTxn,
    Storage,
    WalCorrupt,
    WriteAheadLog,
)


def _txn(txn_id: str, cts: int, *writes: KeyWrite, iw: tuple[IndexWrite, ...] = ()) -> PreparedTxn:
    return PreparedTxn(txn_id, "n1", cts, tuple(writes), iw)


def test_mvcc_reads_see_the_version_at_their_timestamp(tmp_path: Path) -> None:
    async def main() -> None:
        store = PartitionStore(tmp_path, 7, 0)
        await store.commit_single(_txn("a", 100, KeyWrite(1, 1, {1: "x"})))
        await store.commit_single(_txn("b", 200, KeyWrite(1, 2, {1: "y", 2: 5})))
        await store.commit_single(_txn("c", 300, KeyWrite(1, 2, None)))
        assert store.read(1, 99) is None
        v = store.read(1, 150)
        assert v is not None and v.values == {1: "x"} and v.schema_version == 1
        v = store.read(1, 200)
        assert v is not None and v.values == {1: "y", 2: 5} and v.commit_ts == 200
        v = store.read(1, 10_000)
        assert v is not None and v.values is None
        assert [k for k, _ in store.scan(250)] == [1]
        assert list(store.scan(300)) == []
        store.close()

    asyncio.run(main())


def test_recovery_replays_commits_and_keeps_prepared_in_doubt(tmp_path: Path) -> None:
    async def main() -> None:
        store = PartitionStore(tmp_path, 1, 2)
        await store.commit_single(_txn("a", 10, KeyWrite(5, 1, {1: 1})))
        await store.prepare(_txn("b", 20, KeyWrite(6, 1, {1: 2})))
        await store.prepare(_txn("c", 30, KeyWrite(7, 1, {1: 3})))
        await store.commit_prepared("b", 20)
        await store.prepare(_txn("d", 40, KeyWrite(8, 1, {1: 4})))
        await store.abort_prepared("d")
        store.close()

        again = PartitionStore(tmp_path, 1, 2)
        assert again.latest(5) is not None and again.latest(6) is not None
        assert again.latest(7) is None  # prepared, not decided: invisible
        assert again.latest(8) is None
        assert [t.txn_id for t in again.prepared()] == ["c"]
        assert again.outcome("b") == (True, 20)
        assert again.outcome("d") == (False, None)
        await again.commit_prepared("c", 30)
        again.close()

        third = PartitionStore(tmp_path, 1, 2)
        v = third.latest(7)
        assert v is not None and v.values == {1: 3} and v.commit_ts == 30
        assert third.prepared() == []
        third.close()

    asyncio.run(main())


def test_a_torn_tail_is_cut_and_a_corrupt_middle_refused(tmp_path: Path) -> None:
    async def main() -> None:
        store = PartitionStore(tmp_path, 1, 0)
        for i in range(5):
            await store.commit_single(_txn(f"t{i}", 10 + i, KeyWrite(i, 1, {1: i})))
        store.close()

    asyncio.run(main())
    path = tmp_path / "t1_p0.wal"
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # the last record was being written when the power went
    store = PartitionStore(tmp_path, 1, 0)
    assert [k for k, _ in store.scan(1000)] == [0, 1, 2, 3]
    store.close()
    assert path.stat().st_size < len(data) - 3  # cut back to the last intact record

    raw = bytearray(path.read_bytes())
    raw[12] ^= 0xFF  # flip a byte inside the first record
    path.write_bytes(bytes(raw))
    with pytest.raises(WalCorrupt):
        WriteAheadLog.read_records(path)


def test_backfill_in_the_past_does_not_hide_a_later_delete(tmp_path: Path) -> None:
    async def main() -> None:
        store = PartitionStore(tmp_path, 3, 1)
        # A writer that maintains the index removed the entry at ts 500 ...
        await store.commit_single(
            _txn("w", 500, KeyWrite(9, 2, None), iw=(IndexWrite(1, ("a",), 9, False),))
        )
        # ... and the backfill, scanning as of ts 400, adds it afterwards.
        await store.backfill([IndexWrite(1, ("a",), 9, True)], 400)
        assert store.index_lookup(1, ("a",), 450) == [9]
        assert store.index_lookup(1, ("a",), 600) == []
        assert [e.key for e in store.index_entries(1, 450)] == [9]
        assert store.index_entries(1, 600) == []
        store.close()
        again = PartitionStore(tmp_path, 3, 1)
        assert again.index_lookup(1, ("a",), 450) == [9]
        assert again.index_lookup(1, ("a",), 600) == []
        again.close()

    asyncio.run(main())


def test_reads_wait_for_prepared_txns_below_their_timestamp(tmp_path: Path) -> None:
    async def main() -> None:
        store = PartitionStore(tmp_path, 1, 0)
        await store.prepare(_txn("p", 100, KeyWrite(1, 1, {1: "v"})))
        # A read below the commit_ts does not wait.
        async with asyncio.timeout(1):
            await store.wait_prepared_below(99)
        # Nor does one on another key.
        async with asyncio.timeout(1):
            await store.wait_prepared_below(200, {2})
        waiter = asyncio.create_task(store.wait_prepared_below(200, {1}))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await store.commit_prepared("p", 100)
        async with asyncio.timeout(1):
            await waiter
        v = store.read(1, 200)
        assert v is not None and v.values == {1: "v"}
        store.close()

    asyncio.run(main())


def test_compaction_keeps_rows_indexes_and_prepared(tmp_path: Path) -> None:
    async def main() -> None:
        storage = Storage(tmp_path, compact_bytes=1)
        store = storage.partition(4, 3)
        for i in range(50):
            await store.commit_single(
                _txn(
                    f"t{i}", 10 + i, KeyWrite(i % 7, 1, {1: i}), iw=(IndexWrite(2, (i,), i, True),)
                )
            )
        await store.prepare(_txn("doubt", 999, KeyWrite(100, 1, {1: "p"})))
        before = store.wal_size()
        storage.maybe_compact()
        assert store.wal_size() < before
        await store.commit_single(_txn("after", 2000, KeyWrite(3, 1, {1: "z"})))
        storage.close()

        storage = Storage(tmp_path)
        (store,) = storage.recover_all()
        assert (store.table_id, store.partition) == (4, 3)
        assert [t.txn_id for t in store.prepared()] == ["doubt"]
        v = store.read(3, 30)
        assert v is not None and v.values == {1: 17} and v.commit_ts == 27
        v = store.latest(3)
        assert v is not None and v.values == {1: "z"}
        assert store.index_lookup(2, (49,), 100) == [49]
        assert store.outcome("t0") == (True, 10)
        storage.close()

    asyncio.run(main())


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from schemasync.storage import KeyWrite, PartitionStore, PreparedTxn

    async def main():
        store = PartitionStore(Path(sys.argv[1]), 1, 0)
        i = 0
        while True:
            i += 1
            await store.commit_single(PreparedTxn(f"t{i}", "n1", i, (KeyWrite(i, 1, {1: i}),)))
            print(i, flush=True)  # acknowledged only after the fsync

    asyncio.run(main())
    """
)


def test_kill_9_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.stdout is not None
    acked = 0
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= 200:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert acked >= 200
    store = PartitionStore(tmp_path, 1, 0)
    keys = [k for k, _ in store.scan(1 << 62)]
    assert keys[:acked] == list(range(1, acked + 1))
    assert keys == list(range(1, len(keys) + 1))  # a prefix: nothing after a gap
    store.close()


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # key
            st.integers(1, 50),  # commit_ts
            st.one_of(st.none(), st.integers(0, 5)),  # value, None = delete
        ),
        max_size=30,
    ),
    st.integers(0, 60),
)
@settings(max_examples=60, deadline=None)
def test_mvcc_matches_a_naive_model_in_any_arrival_order(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, int, int | None]], ts: int
) -> None:
    """Versions may arrive out of timestamp order (a backfill does); the newest at ts wins,
    also after a restart."""
    directory = tmp_path_factory.mktemp("mvcc")

    async def main() -> None:
        store = PartitionStore(directory, 1, 0)
        for n, (key, cts, value) in enumerate(writes):
            values = None if value is None else {1: value}
            iw = (IndexWrite(1, (value,), key, value is not None),)
            await store.commit_single(_txn(f"t{n}", cts, KeyWrite(key, 1, values), iw=iw))
        store.close()

    asyncio.run(main())
    store = PartitionStore(directory, 1, 0)
    for key in range(4):
        mine = [(cts, n, v) for n, (k, cts, v) in enumerate(writes) if k == key and cts <= ts]
        expected = max(mine)[2] if mine else None
        got = store.read(key, ts)
        assert (None if got is None or got.values is None else got.values[1]) == expected
        entry = store.index_entries(1, ts)
        keys_with_entry = {e.key for e in entry if e.values == (expected,)}
        assert (key in keys_with_entry) == (expected is not None)
    store.close()
