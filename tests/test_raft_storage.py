"""Durability of the Raft log, term/vote and snapshot files across reopen and torn writes."""

from __future__ import annotations

from pathlib import Path

from schemasync.raft.storage import (
    HardState,
    HardStateStore,
    LogEntry,
    RaftLog,
    Snapshot,
    SnapshotStore,
)


def entries(start: int, n: int, term: int) -> list[LogEntry]:
    return [
        LogEntry(i, term, i * 10, {"op": "put", "key": f"k{i}"}) for i in range(start, start + n)
    ]


def test_log_survives_reopen_truncate_and_compaction(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = RaftLog(path)
    log.append(entries(1, 10, 1))
    log.truncate_from(8)
    log.append(entries(8, 5, 2))
    log.close()
    log = RaftLog(path)
    assert log.last_index == 12
    assert [log.term_at(i) for i in (7, 8, 12)] == [1, 2, 2]
    log.compact(9, 2)
    assert log.base_index == 9 and log.term_at(9) == 2 and log.term_at(5) is None
    log.append(entries(13, 1, 3))
    log.close()
    log = RaftLog(path)
    assert (log.base_index, log.base_term, log.last_index, log.last_term) == (9, 2, 13, 3)
    assert log.entry(10).safe_ts == 100 and log.entry(13).cmd["key"] == "k13"
    log.close()


def test_torn_tail_is_dropped_and_log_stays_appendable(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = RaftLog(path)
    log.append(entries(1, 3, 1))
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01\x00partial")
    log = RaftLog(path)
    assert log.last_index == 3
    log.append(entries(4, 1, 1))
    log.close()
    assert RaftLog(path).last_index == 4


def test_compaction_past_the_log_resets_it(tmp_path: Path) -> None:
    log = RaftLog(tmp_path / "log")
    log.append(entries(1, 3, 1))
    log.compact(50, 4)
    assert (log.base_index, log.last_index, log.last_term) == (50, 50, 4)
    log.close()


def test_hard_state_and_snapshot_round_trip(tmp_path: Path) -> None:
    hs = HardStateStore(tmp_path / "state")
    assert hs.load() == HardState(0, None)
    hs.save(HardState(7, "n2"))
    assert HardStateStore(tmp_path / "state").load() == HardState(7, "n2")
    snaps = SnapshotStore(tmp_path / "snap")
    assert snaps.load() is None
    snaps.save(Snapshot(12, 3, b"\x01\x02"))
    assert SnapshotStore(tmp_path / "snap").load() == Snapshot(12, 3, b"\x01\x02")
