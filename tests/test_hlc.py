"""Properties of the HLC, activation timestamps and the catalog floor lookup (pure, no I/O)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from schemasync.catalog import CatalogHistory
from schemasync.config import parse_config
from schemasync.hlc import HybridClock, add_ms, ceil_ms, logical, make_ts, physical_ms
from schemasync.metastore import MetaStorage, next_activation_ts
from schemasync.raft import LogEntry
from schemasync.schema_sync import ack_target_ts
from schemasync.toggles import ACK_WAIT_NO_SKEW, HLC_NO_ROUND_UP

MS = 1 << 16


class FakeWall:
    """A wall clock the test moves, forwards or backwards (as libfaketime may)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


steps = st.lists(
    st.one_of(
        st.tuples(st.just("wall"), st.integers(-2000, 2000)),
        st.tuples(st.just("now"), st.just(0)),
        st.tuples(st.just("update"), st.integers(-5000, 5000), st.integers(0, 0xFFFF)),
    ),
    max_size=200,
)


@settings(deadline=None)
@given(steps)
def test_now_and_update_are_strictly_monotonic(ops: list[tuple[int, ...]]) -> None:
    wall = FakeWall(1_700_000_000_000)
    clock = HybridClock(500, wall)
    last = 0
    for op in ops:
        if op[0] == "wall":
            wall.ms += int(op[1])
            continue
        if op[0] == "now":
            ts = clock.now()
        else:
            received = make_ts(wall.ms + int(op[1]), int(op[2]))
            ts = clock.update(received)
            assert ts > received
        assert ts > last
        assert physical_ms(ts) >= wall.ms
        last = ts


@settings(deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 5000))
def test_far_ahead_timestamp_is_counted_not_rejected(skew_ms: int, ahead_ms: int) -> None:
    wall = FakeWall(1_000_000)
    clock = HybridClock(skew_ms, wall)
    ts = clock.update(make_ts(wall.ms + skew_ms + ahead_ms))
    assert ts > make_ts(wall.ms + skew_ms + ahead_ms)
    assert clock.ahead_count == 1
    clock.update(make_ts(wall.ms + skew_ms))
    assert clock.ahead_count == 1


def test_logical_overflow_moves_to_next_millisecond() -> None:
    wall = FakeWall(10)
    clock = HybridClock(500, wall)
    clock.update(make_ts(10, 0xFFFF))
    assert clock.now() > make_ts(10, 0xFFFF)
    assert physical_ms(clock.now()) == 11


@settings(deadline=None)
@given(st.integers(0, 2**47), st.integers(0, 0xFFFF))
def test_ceil_ms_is_the_smallest_whole_millisecond_not_below(ms: int, lg: int) -> None:
    ts = make_ts(ms, lg)
    c = ceil_ms(ts)
    assert logical(c) == 0 and c >= ts
    assert c - ts < MS
    assert (c == ts) == (lg == 0)


@settings(deadline=None)
@given(st.integers(0, 2**40), st.integers(0, 0xFFFF), st.integers(0, 5000))
def test_ack_target_rounds_up_unless_a_toggle_breaks_it(ms: int, lg: int, skew: int) -> None:
    tu = make_ts(ms, lg)
    target = ack_target_ts(tu, skew, frozenset())
    assert target == ceil_ms(add_ms(tu, skew)) and logical(target) == 0
    assert ack_target_ts(tu, skew, frozenset({HLC_NO_ROUND_UP})) == add_ms(tu, skew)
    assert ack_target_ts(tu, skew, frozenset({ACK_WAIT_NO_SKEW})) == tu


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10_000), st.integers(1, 2000)), max_size=60))
def test_activation_strictly_increases_even_when_delay_shrinks(
    steps_: list[tuple[int, int]],
) -> None:
    previous = 0
    safe_ts = make_ts(1_000)
    for gap, delay in steps_:
        safe_ts += gap
        tu = next_activation_ts(previous, safe_ts, delay)
        assert tu > previous
        assert tu >= add_ms(safe_ts, delay)
        previous = tu


def _metastore(tmp: Path) -> MetaStorage:
    cfg = parse_config(
        {
            "name": "n1",
            "data_dir": str(tmp),
            "voters": ["n1"],
            "nodes": {
                "n1": {"host": "127.0.0.1", "client_port": 1, "metastore_port": 2, "peer_port": 3}
            },
        }
    )

    async def no_rpc(*_: object) -> dict[str, object]:
        raise AssertionError("no RPC in a pure test")

    return MetaStorage(cfg, HybridClock(500), no_rpc)


def _floor(history: CatalogHistory, ts: int) -> int:
    return max(c.version for c in history if c.activation_ts <= ts)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 800)), min_size=1, max_size=25),
    st.lists(st.integers(0, 200_000), max_size=30),
)
def test_active_catalog_is_the_floor_lookup_of_applied_ddl(
    tmp_path_factory: object, ddl_steps: list[tuple[int, int]], probes_ms: list[int]
) -> None:
    """Apply real DDL entries through the Meta Storage state machine and check the lookup."""
    tmp = tmp_path_factory.mktemp("ms")  # type: ignore[attr-defined]
    ms = _metastore(tmp)
    safe_ts = make_ts(1_000)
    index = 0
    for i, (gap_ms, delay) in enumerate(ddl_steps):
        safe_ts = add_ms(safe_ts, gap_ms)
        index += 1
        stmt = "CREATE TABLE t0 (a INT32)" if i == 0 else f"ALTER TABLE t0 ADD COLUMN c{i} INT64"
        cmd = {
            "op": "ddl",
            "stmt": stmt,
            "expected_version": ms.catalogs.latest().version,
            "delay_ms": delay,
            "request_id": f"r{i}",
        }
        result = ms.apply(LogEntry(index, 1, safe_ts, cmd), replay=False)
        assert result["status"] == "ok" and result["version"] == i + 2
        assert ms.safe_time.current == safe_ts
    versions = list(ms.catalogs)
    assert [c.version for c in versions] == list(range(1, len(ddl_steps) + 2))
    acts = [c.activation_ts for c in versions]
    assert acts == sorted(set(acts))
    for c in versions[1:]:
        assert c.activation_ts >= add_ms(c.safe_ts, c.delay_ms)
    for p in probes_ms:
        ts = add_ms(make_ts(1_000), p)
        assert ms.catalogs.active(ts).version == _floor(ms.catalogs, ts)
    # A stale CAS is refused, and replaying a request id answers the version it made.
    stale = {"op": "ddl", "stmt": "DROP TABLE t0", "expected_version": 1, "delay_ms": 1}
    assert ms.apply(LogEntry(index + 1, 1, add_ms(safe_ts, 1), stale), False)["status"] == (
        "conflict"
    )
    again = {**cmd, "expected_version": 1}
    assert ms.apply(LogEntry(index + 2, 1, add_ms(safe_ts, 2), again), False)["version"] == len(
        versions
    )
    ms.raft.log.close()


def test_stale_sync_time_does_not_move_safe_time(tmp_path: Path) -> None:
    ms = _metastore(tmp_path)
    ms.apply(LogEntry(1, 2, make_ts(100), {"op": "sync_time", "term": 2}), replay=False)
    assert ms.safe_time.current == make_ts(100)
    ms.apply(LogEntry(2, 3, make_ts(200), {"op": "sync_time", "term": 2}), replay=False)
    assert ms.safe_time.current == make_ts(100)
    ms.raft.log.close()
