"""Events a run may carry beyond the model's own, for readers that need them (the report
benchmark): monitor samples through the run, and probes (at an explicit ts) that answer a stale
catalog version.

They draw from a random stream of their own, so asking for them changes none of the model's
txns, DDLs or probes, and asking for none of them draws nothing."""

from __future__ import annotations

import bisect
import random
from typing import Any

from synthetic.model import MS, NODES, ClusterModel

# the leader's safe time trails its clock by this much (ms), the followers' by more
LEADER_LAG_MS = (80.0, 160.0)
FOLLOWER_LAG_MS = (120.0, 400.0)


class ExtraEvents:
    """Monitor samples every `monitor_ms` (none if None) and stale probe answers at
    `stale_probe_rate`, emitted into a model as its run goes."""

    def __init__(self, seed: int, monitor_ms: int | None, stale_probe_rate: float) -> None:
        if monitor_ms is not None and monitor_ms <= 0:
            raise ValueError(f"monitor_ms must be positive, not {monitor_ms}")
        if not 0.0 <= stale_probe_rate <= 1.0:
            raise ValueError(f"stale_probe_rate must be in [0, 1], not {stale_probe_rate}")
        self.rng = random.Random(f"extras-{seed}")
        self.step = None if monitor_ms is None else monitor_ms * MS
        self.next_sample = self.step or 0
        self.stale_probe_rate = stale_probe_rate
        self.stale_processes: list[int] = []
        self.samples = 0  # monitor samples emitted

    def samples_before(self, m: ClusterModel, t: int) -> None:
        """Emit every monitor sample due before controller time t (none emitted before: the
        caller keeps t at or above the model's floor)."""
        if self.step is None:
            return
        while self.next_sample < t:
            m.emit(self.next_sample, self._sample(m, self.next_sample))
            self.samples += 1
            self.next_sample += self.step

    def _sample(self, m: ClusterModel, t: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for i, node in enumerate(NODES):
            lag_ms = self.rng.uniform(*(LEADER_LAG_MS if i == 0 else FOLLOWER_LAG_MS))
            safe_ts = m.ts(max(0, t - int(lag_ms * MS)))
            value[node] = {
                "catalog_version": bisect.bisect_right(m.acts, safe_ts),
                "safe_ts": safe_ts,
                "safe_lag_ms": round(lag_ms, 1),
                "role": "leader" if i == 0 else "follower",
                "term": 1,
                "commit_index": t // (10 * MS),
                "hlc_offset_ms": round(self.rng.uniform(-2, 2), 2),
            }
        return {"type": "info", "process": "monitor", "f": "sample", "value": value}

    def probe(self, m: ClusterModel, t: int, node: str, table: str, ts: int | None) -> None:
        """The model's probe at t; one with an explicit ts answers (at stale_probe_rate) one
        catalog version behind the one at its ts, an ap-violation and nothing else (a null ts
        would make it a stale-schema-read too, after a DDL's ack); a stale probe's process is
        kept in `stale_processes`."""
        answer = self._stale_answer(m, ts)
        m.probe(t, node, table, ts, answer)
        if answer is not None:
            self.stale_processes.append(m.last_event["process"])

    def _stale_answer(self, m: ClusterModel, ts: int | None) -> dict[str, Any] | None:
        if ts is None or self.stale_probe_rate == 0.0:
            return None
        if self.rng.random() >= self.stale_probe_rate:
            return None
        version = bisect.bisect_right(m.acts, ts)
        return {"catalog_version": version - 1} if version > 1 else None
