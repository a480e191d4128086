"""Per-node observations over time: the controller's monitor samples and what a nemesis
measured on each node (clock offsets, safe times, status views).

Apart from rundata so the run reader stays about pairing ops and placing events on the
workload's clock; these are the shapes and readers of the sampled series it collects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Nemesis value keys that may hold per-node clock offsets in seconds.
OFFSET_KEYS = ("offsets", "offsets_s", "clock_offsets", "clock_offsets_s", "offset_s", "offset")


@dataclass(frozen=True)
class Samples:
    """Per-node point observations over time (probe answers, offsets, safe-time lag...)."""

    node: tuple[str, ...] = ()
    time_s: tuple[float, ...] = ()
    value: tuple[float, ...] = ()


@dataclass(frozen=True)
class MonitorTrack:
    """The controller's monitor samples (history.md), per node: when present they are the lag,
    version and safe-time series of record, sampled every few hundred ms through the run."""

    samples: int = 0  # monitor events read
    safe_s: Samples = Samples()  # each node's safe time placed on the workload's clock
    lag_ms: Samples = Samples()  # safe_lag_ms as the monitor computed it
    versions: Samples = Samples()  # applied catalog_version
    offsets_s: Samples = Samples()  # the node's HLC against the controller's clock
    errors: Mapping[str, int] = field(default_factory=dict)  # node -> unreadable samples


def nemesis_offsets(value: Mapping[str, Any], nodes: Iterable[str]) -> dict[str, float]:
    """Per-node clock offsets (seconds) a clock nemesis wrote, in any of the usual shapes."""
    known = set(nodes)
    for key in (*OFFSET_KEYS, "written"):
        got = value.get(key)
        if isinstance(got, dict):
            return {str(n): float(v) for n, v in got.items() if isinstance(v, int | float)}
        if isinstance(got, int | float) and not isinstance(got, bool):
            targets = value.get("nodes") or value.get("node") or []
            if isinstance(targets, str):
                targets = [targets]
            return {str(n): float(got) for n in targets}
    return {n: float(v) for n, v in value.items() if n in known and isinstance(v, int | float)}


@dataclass(frozen=True)
class NodeView:
    """What a nemesis measured on one node: where in its value, and the node's fields."""

    path: tuple[str, ...]
    node: str
    fields: Mapping[str, Any]


def node_views(value: Any, nodes: set[str], path: tuple[str, ...] = ()) -> list[NodeView]:
    """Every {node: {...}} mapping nested in a nemesis value (measured offsets, learner views)."""
    out: list[NodeView] = []
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in nodes and isinstance(sub, dict):
                out.append(NodeView(path, key, sub))
            elif isinstance(sub, dict | list):
                out.extend(node_views(sub, nodes, (*path, str(key))))
    elif isinstance(value, list) and len(path) < 8:
        for sub in value:
            out.extend(node_views(sub, nodes, path))
    return out


class MonitorReader:
    """Collects monitor samples as they stream by; a node the monitor could not read
    (`{"error": CODE}`) is counted, not plotted."""

    def __init__(self) -> None:
        self.samples = 0
        self.series: dict[str, tuple[list[str], list[float], list[float]]] = {
            k: ([], [], []) for k in ("safe", "lag", "version", "offset")
        }
        self.errors: dict[str, int] = {}

    def _put(self, key: str, node: str, t: float, v: Any) -> None:
        if isinstance(v, int | float) and not isinstance(v, bool):
            nodes, times, values = self.series[key]
            nodes.append(node)
            times.append(t)
            values.append(float(v))

    def add(self, t: float, value: Mapping[str, Any], hlc_s: Callable[[Any], float | None]) -> None:
        self.samples += 1
        for node, fields in value.items():
            if not isinstance(fields, dict):
                continue
            if "error" in fields:
                self.errors[node] = self.errors.get(node, 0) + 1
                continue
            self._put("safe", node, t, hlc_s(fields.get("safe_ts")))
            self._put("lag", node, t, fields.get("safe_lag_ms"))
            self._put("version", node, t, fields.get("catalog_version"))
            off = fields.get("hlc_offset_ms")
            self._put("offset", node, t, off / 1000.0 if isinstance(off, int | float) else None)

    def track(self) -> MonitorTrack:
        def samples(key: str) -> Samples:
            nodes, times, values = self.series[key]
            return Samples(tuple(nodes), tuple(times), tuple(values))

        return MonitorTrack(
            samples=self.samples,
            safe_s=samples("safe"),
            lag_ms=samples("lag"),
            versions=samples("version"),
            offsets_s=samples("offset"),
            errors=dict(self.errors),
        )


class SeriesBuilder:
    """One Samples series as it is collected, a row at a time."""

    def __init__(self) -> None:
        self.node: list[str] = []
        self.time_s: list[float] = []
        self.value: list[float] = []

    def add(self, node: str, t: float, value: float) -> None:
        self.node.append(node)
        self.time_s.append(t)
        self.value.append(value)

    def samples(self) -> Samples:
        return Samples(tuple(self.node), tuple(self.time_s), tuple(self.value))


class NodeSeries:
    """What the run's own events measured of each node, beside the monitor: clock offsets,
    safe-time lag and applied catalog versions, from status ops and nemesis values.

    `start_wall_ms` is the controller's wall clock at the workload's 0; `comparable` says
    whether the nodes' clocks (wall_ms, HLCs) can be placed against it at all."""

    def __init__(self, nodes: Iterable[str], start_wall_ms: float, comparable: bool) -> None:
        self.nodes = list(nodes)
        self._node_set = set(self.nodes)
        self.start_wall_ms = start_wall_ms
        self.comparable = comparable
        self.offsets_s = SeriesBuilder()
        self.lag_ms = SeriesBuilder()
        self.versions = SeriesBuilder()

    def status(
        self, node: Any, t: float, value: Mapping[str, Any], with_offset: bool = True
    ) -> None:
        """A node's admin status view at `t`: its lag, applied version and clock offset."""
        if not isinstance(node, str):
            return
        safe, now = value.get("safe_ts"), value.get("hlc_now")
        if isinstance(safe, int) and isinstance(now, int):
            self.lag_ms.add(node, t, float((now >> 16) - (safe >> 16)))
        cv = value.get("catalog_version")
        if isinstance(cv, int):
            self.versions.add(node, t, float(cv))
        wall, hlc_now = value.get("wall_ms"), value.get("hlc_now")
        if not with_offset:
            return
        if isinstance(wall, int) and self.comparable:
            # The node's faked wall clock against the controller's: a measured clock offset.
            sent = self.start_wall_ms + t * 1000.0
            self.offsets_s.add(node, t, (wall - sent) / 1000.0)
        elif isinstance(hlc_now, int) and self.comparable:
            offset = ((hlc_now >> 16) - self.start_wall_ms - t * 1000.0) / 1000.0
            self.offsets_s.add(node, t, offset)

    def nemesis(self, t: float, value: Mapping[str, Any]) -> None:
        """Measured clock offsets and safe-time lag from a nemesis event's value; a view taken
        `before` the fault is placed `elapsed_ms` earlier."""
        took = value.get("elapsed_ms")
        before_t = t - took / 1000.0 if isinstance(took, int | float) else t
        measured = False
        for view in node_views(value, self._node_set):
            when = before_t if "before" in view.path else t
            fields = view.fields
            off = fields.get("wall_offset_s", fields.get("hlc_offset_s", fields.get("offset_s")))
            if isinstance(off, int | float) and not isinstance(off, bool):
                off = float(off)
                self.offsets_s.add(view.node, when, off)
                measured = True
            if "hlc_now" in fields or "wall_ms" in fields:
                # a whole admin.status view: lag, applied version, offset from its clocks
                self.status(view.node, when, fields, with_offset=not isinstance(off, float))
                measured = True
                continue
            safe = fields.get("safe_ts")
            if isinstance(safe, int) and self.comparable:
                ref = self.start_wall_ms + when * 1000.0  # the controller's clock at the event
                self.lag_ms.add(view.node, when, float(ref - (safe >> 16)))
        if not measured:
            for node, offset in nemesis_offsets(value, self.nodes).items():
                self.offsets_s.add(node, t, offset)
        for sample in value.get("status") or []:
            if isinstance(sample, dict):
                self.status(sample.get("node"), t, sample)
