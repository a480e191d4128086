"""The run's monitor: every 250 ms, every node's admin status as one history sample.

Lag plots need a steady series, not a point per fault, so the controller reads all nodes at
once each tick (history.md "Monitor samples"). A node that does not answer within the sample's
timeout is recorded as `{"error": CODE}` and never delays the other nodes or the next tick; a
monitor that cannot sample at all only logs, it never fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from contract.target import ClientError

log = logging.getLogger("schemachaos.monitor")

INTERVAL_S = 0.25
SAMPLE_TIMEOUT_S = 0.2  # below the interval, so a dead node cannot push the next tick back
READ_LIMIT_S = 5.0  # a read stuck this long is abandoned and its connection replaced
LOGICAL_BITS = 16  # history.md "Timestamps": physical_ms << 16 | logical
HLC_FIELDS = ("catalog_version", "safe_ts", "role", "term", "commit_index")


class StatusClient(Protocol):
    """The part of a TargetClient the monitor uses."""

    async def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class StatusSource(Protocol):
    """What the monitor needs of a Target: a client per node, and the kind of its clock."""

    clock: str

    async def client(self, node: str) -> StatusClient: ...


class SampleSink(Protocol):
    def monitor(self, value: dict) -> dict: ...


@dataclass(frozen=True)
class StatusRead:
    """One node's answer (or error code), with the controller's clocks at the read's midpoint."""

    node: str
    status: Mapping[str, Any] | None
    error: str | None
    mid_wall_ms: float  # time.time() at the midpoint, ms
    mid_mono_ms: float  # time.monotonic() at the midpoint, ms: for deltas between reads


def hlc_physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def sample_value(reads: list[StatusRead], clock: str) -> dict[str, dict[str, Any]]:
    """The monitor event's value from one tick's reads (pure: unit-tested on its own).

    With an HLC clock, each node gets the history.md fields plus `safe_lag_ms` (its safe time
    behind the leader's HLC, or the highest HLC read this tick when no leader answered,
    carried forward to this node's read moment) and `hlc_offset_ms` (its HLC physical time
    minus the controller's wall clock at the read's midpoint). Other clocks (postgres' LSNs)
    have no time meaning: the scalar fields they report are recorded as they are.
    """
    value: dict[str, dict[str, Any]] = {}
    answered = [r for r in reads if r.status is not None]
    reference = _hlc_reference(answered) if clock == "hlc" else None
    for read in reads:
        if read.status is None:
            value[read.node] = {"error": read.error or "UNKNOWN"}
        elif clock == "hlc":
            value[read.node] = _hlc_fields(read, reference)
        else:
            value[read.node] = {
                k: v
                for k, v in read.status.items()
                if k != "node" and (v is None or isinstance(v, str | int | float | bool))
            }
    return value


def _int_field(status: Mapping[str, Any], key: str) -> int | None:
    v = status.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _hlc_reference(reads: list[StatusRead]) -> tuple[float, float] | None:
    """(HLC physical ms, monotonic ms when read) of the leader, else of the highest HLC."""
    timed = [(r, _int_field(r.status or {}, "hlc_now")) for r in reads]
    with_hlc = [(r, h) for r, h in timed if h is not None]
    if not with_hlc:
        return None
    leaders = [(r, h) for r, h in with_hlc if (r.status or {}).get("role") == "leader"]
    # a deposed leader cut off from the others may still say "leader": the newest term wins
    read, hlc = max(
        leaders or with_hlc,
        key=lambda pair: (_int_field(pair[0].status or {}, "term") or 0, pair[1]),
    )
    return float(hlc_physical_ms(hlc)), read.mid_mono_ms


def _hlc_fields(read: StatusRead, reference: tuple[float, float] | None) -> dict[str, Any]:
    status = read.status or {}
    fields: dict[str, Any] = {k: status[k] for k in HLC_FIELDS if k in status}
    safe_ts = _int_field(status, "safe_ts")
    if reference is not None and safe_ts is not None:
        ref_ms, ref_mono = reference
        # the leader's HLC as it would read at this node's moment: reads differ by a few ms
        at_this_read = ref_ms + (read.mid_mono_ms - ref_mono)
        fields["safe_lag_ms"] = round(at_this_read - hlc_physical_ms(safe_ts), 3)
    hlc_now = _int_field(status, "hlc_now")
    if hlc_now is not None:
        fields["hlc_offset_ms"] = round(hlc_physical_ms(hlc_now) - read.mid_wall_ms, 3)
    return fields


def error_code(e: BaseException) -> str:
    if isinstance(e, ClientError):
        return e.code
    if isinstance(e, TimeoutError):
        return "TIMEOUT"
    if isinstance(e, OSError | ConnectionError | EOFError):
        return "UNAVAILABLE"
    return type(e).__name__


class ClusterMonitor:
    """Samples every node each `interval_s` until `stop` is set; one open client per node.

    A read that misses its sample's timeout is not cancelled (cancelling drops the node's
    connection, and reconnecting costs more than the read): the sample says TIMEOUT, the read
    finishes in the background, and no second read of that node starts before it has. Only a
    read stuck for `read_limit_s` is cancelled and its client replaced.
    """

    def __init__(
        self,
        target: StatusSource,
        nodes: list[str],
        recorder: SampleSink,
        interval_s: float = INTERVAL_S,
        sample_timeout_s: float = SAMPLE_TIMEOUT_S,
        read_limit_s: float = READ_LIMIT_S,
    ) -> None:
        self._target = target
        self._nodes = list(nodes)
        self._recorder = recorder
        self._interval_s = interval_s
        self._sample_timeout_s = sample_timeout_s
        self._read_limit_s = read_limit_s
        self._clients: dict[str, StatusClient] = {}
        self._reading: dict[str, asyncio.Task[StatusRead]] = {}
        self.samples = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Tick on a fixed grid (no drift from slow reads) until stop; never raises."""
        try:
            async with asyncio.TaskGroup() as tasks:
                start = time.monotonic()
                tick = 0
                while not stop.is_set():
                    await self._sample(tasks)
                    tick += 1
                    # a late tick is skipped, not bunched: samples stay ~interval apart
                    tick = max(tick, int((time.monotonic() - start) / self._interval_s))
                    delay = start + tick * self._interval_s - time.monotonic()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(0.0, delay)):
                            await stop.wait()
                for task in self._reading.values():
                    task.cancel()
                await asyncio.gather(*self._reading.values(), return_exceptions=True)
                for node in list(self._clients):
                    tasks.create_task(self._close(self._clients.pop(node)))
        except Exception as e:  # the workload goes on without samples
            log.warning("monitor stopped after %d samples: %s", self.samples, e)

    async def _sample(self, tasks: asyncio.TaskGroup) -> None:
        fresh: dict[str, asyncio.Task[StatusRead]] = {}
        for node in self._nodes:
            previous = self._reading.get(node)
            if previous is None or previous.done():
                fresh[node] = self._reading[node] = tasks.create_task(self._read(node, tasks))
        if fresh:
            await asyncio.wait(fresh.values(), timeout=self._sample_timeout_s)
        reads = []
        for node in self._nodes:
            task = fresh.get(node)
            if task is not None and task.done():
                reads.append(task.result())
            else:  # still reading (this tick's read or an older one)
                now_wall, now_mono = time.time() * 1000, time.monotonic() * 1000
                reads.append(StatusRead(node, None, "TIMEOUT", now_wall, now_mono))
        try:
            self._recorder.monitor(sample_value(reads, self._target.clock))
            self.samples += 1
        except Exception as e:  # e.g. the history closed under us: skip this sample
            log.debug("monitor sample not recorded: %s", e)

    async def _read(self, node: str, tasks: asyncio.TaskGroup) -> StatusRead:
        """One status read; never raises (but for cancellation)."""
        t0_wall, t0_mono = time.time() * 1000, time.monotonic() * 1000
        try:
            async with asyncio.timeout(self._read_limit_s):
                client = self._clients.get(node)
                if client is None:
                    client = self._clients[node] = await self._target.client(node)
                    t0_wall, t0_mono = time.time() * 1000, time.monotonic() * 1000
                status = await client.status()
        except Exception as e:
            # whatever failed, a fresh connection next time: the old one may be half-read
            stale = self._clients.pop(node, None)
            if stale is not None:
                tasks.create_task(self._close(stale))
            return StatusRead(
                node, None, error_code(e), time.time() * 1000, time.monotonic() * 1000
            )
        t1_wall, t1_mono = time.time() * 1000, time.monotonic() * 1000
        return StatusRead(
            node, dict(status), None, (t0_wall + t1_wall) / 2, (t0_mono + t1_mono) / 2
        )

    @staticmethod
    async def _close(client: StatusClient) -> None:
        try:
            async with asyncio.timeout(5):
                await client.close()
        except Exception as e:
            log.debug("closing monitor client: %s", e)
