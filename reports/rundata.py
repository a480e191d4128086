"""A run directory read once into the columns the plots, the report and JUnit need.

The history contract (history.md) is the only input: ops are paired invoke -> completion per
process, nemesis events become windows by kind, catalog.jsonl gives the DDL activations.

Every time here is on one clock for people: seconds since the workload's first client invoke,
not since the history's time 0, which also covers provisioning (and on a first run the image
build): a 60 s test reads as 60 s, and its plots do not open on 40 s of nothing.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contract.rundir import CATALOG, HISTORY, RESULTS, RUN_JSON, RUN_MARKERS
from reports.node_samples import MonitorReader, MonitorTrack, NodeSeries, Samples, SeriesBuilder

OUTCOMES = ("ok", "fail", "info", "pending")
CLOSING_PREFIXES = ("stop-", "heal-")
CLOSE_ALL = frozenset({"heal-all", "heal", "stop-all"})


@dataclass(frozen=True)
class NemesisWindow:
    """One fault interval: a start-KIND event paired with its stop-/heal- event."""

    kind: str
    start_s: float
    end_s: float
    start_index: int
    end_index: int | None
    value: Mapping[str, Any]


@dataclass(frozen=True)
class Activation:
    """A catalog version from catalog.jsonl placed on the run's time axis."""

    catalog_version: int
    activation_ts: int
    time_s: float | None
    ddl: str


@dataclass(frozen=True)
class Ops:
    """Completed (or dangling) client operations as parallel columns, one row per op."""

    invoke_index: np.ndarray  # int64
    complete_index: np.ndarray  # int64, -1 when the op never completed
    process: np.ndarray  # int64
    f: np.ndarray  # int16 into f_names
    outcome: np.ndarray  # int8 into OUTCOMES
    node: np.ndarray  # int16 into node_names, -1 unknown
    error: np.ndarray  # int16 into error_names, -1 none
    start_s: np.ndarray  # float64, invoke time since run start
    latency_ms: np.ndarray  # float64
    f_names: tuple[str, ...]
    node_names: tuple[str, ...]
    error_names: tuple[str, ...]
    summary: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.invoke_index)


@dataclass(frozen=True)
class RunData:
    """A run on the workload's clock: 0 is the first client invoke, `origin_s` after the
    history's time 0 (setup before it has negative times; end_s is the last event)."""

    run_dir: Path
    run: Mapping[str, Any]
    results: Mapping[str, Any] | None
    event_count: int
    end_s: float
    ops: Ops
    windows: tuple[NemesisWindow, ...]
    nemesis_events: tuple[Mapping[str, Any], ...]
    activations: tuple[Activation, ...]
    probe_versions: Samples  # node's catalog_version answer at the probe ts
    probe_authoritative: Samples  # cat(ts) for the same probes, NaN when unknown
    op_version_skew: Samples  # op schema_version - tsv(t, op_ts), by primary
    clock_offsets_s: Samples
    safe_time_lag_ms: Samples
    status_versions: Samples
    ddl_time_s: tuple[float, ...]
    ddl_latency_ms: tuple[float, ...]
    ddl_kind: tuple[str, ...]
    ddl_outcome: tuple[str, ...]
    event_time_s: Mapping[int, float] = field(default_factory=dict)
    witness_events: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    origin_s: float = 0.0  # the first client invoke on the history's clock: the setup time
    workload_end_s: float = 0.0  # the last completion of a workload op (final reads aside)
    monitor: MonitorTrack = field(default_factory=lambda: MonitorTrack())
    # the completion of every op a witness event belongs to, by invoke index (its op_ts...)
    witness_completions: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    ddl_version: tuple[int | None, ...] = ()  # the catalog version each DDL's ack carried

    @property
    def hlc_comparable(self) -> bool:
        return self.run.get("clock", "hlc") != "none" and "start_wall_ms" in self.run

    @property
    def ddl_floor_ms(self) -> float | None:
        cfg = self.run.get("config") or {}
        dd, cs = cfg.get("delay_duration_ms"), cfg.get("max_clock_skew_ms")
        if isinstance(dd, int | float) and isinstance(cs, int | float):
            return float(dd + cs)
        return None

    def hlc_to_s(self, ts: int) -> float | None:
        """HLC -> seconds on the workload's clock, through the controller's start wall clock."""
        if not self.hlc_comparable:
            return None
        return ((ts >> 16) - int(self.run["start_wall_ms"])) / 1000.0 - self.origin_s


class NotARunDirectory(ValueError):
    """A directory holding neither run.json nor history.jsonl: reporting on it would only
    litter it with an UNKNOWN page, so it is refused (bad input) before anything is written."""


def is_run_dir(path: Path) -> bool:
    return any((path / marker).exists() for marker in RUN_MARKERS)


def read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def witness_indices(results: Mapping[str, Any] | None) -> set[int]:
    if not results:
        return set()
    out: set[int] = set()
    for anomaly in results.get("anomalies") or []:
        for idx in anomaly.get("events") or []:
            if isinstance(idx, int):
                out.add(idx)
    return out


class _Catalog:
    """Authoritative floor lookups cat(ts) and tsv(t, ts) over catalog.jsonl."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        lines = sorted(lines, key=lambda c: int(c.get("catalog_version", 0)))
        self.activation = [int(c.get("activation_ts", 0)) for c in lines]
        self.version = [int(c.get("catalog_version", 0)) for c in lines]
        self.tables: list[dict[str, int]] = [
            {
                name: int(t.get("schema_version", 0))
                for name, t in (c.get("tables") or {}).items()
                if isinstance(t, dict)
            }
            for c in lines
        ]
        self.lines = lines

    def _pos(self, ts: int) -> int:
        return bisect.bisect_right(self.activation, ts) - 1

    def cat(self, ts: int) -> int | None:
        pos = self._pos(ts)
        return self.version[pos] if pos >= 0 else None

    def tsv(self, table: str, ts: int) -> int | None:
        pos = self._pos(ts)
        return self.tables[pos].get(table) if pos >= 0 else None


def _read_catalog(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break
    return out


def _summary(f: str, value: Mapping[str, Any] | None) -> str:
    if not value:
        return ""
    if f == "ddl":
        return str(value.get("stmt", ""))[:120]
    if f == "txn":
        parts = []
        for op in (value.get("ops") or [])[:6]:
            if isinstance(op, dict):
                parts.append(f"{op.get('op', '?')} {op.get('table', '?')}:{op.get('key', '?')}")
        more = len(value.get("ops") or []) - len(parts)
        return " ".join(parts) + (f" +{more}" if more > 0 else "")
    if f == "probe":
        return f"{value.get('table')} @ {value.get('ts')}"
    if f == "final-read":
        return str(value.get("index") or value.get("table") or "")
    return ""


class _Interner:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str | None) -> int:
        if name is None:
            return -1
        got = self.ids.get(name)
        if got is None:
            got = self.ids[name] = len(self.ids)
        return got

    def names(self) -> tuple[str, ...]:
        return tuple(self.ids)


def workload_origin_ns(history: Path) -> int:
    """`time` of the first client invoke (a numeric process), 0 without one. Only the setup
    prefix is read: the workload's first invoke comes before almost every other event."""
    if not history.exists():
        return 0
    with history.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                break
            process = ev.get("process")
            if (
                ev.get("type") == "invoke"
                and isinstance(process, int)
                and not isinstance(process, bool)
            ):
                t = ev.get("time")
                return t if isinstance(t, int) else 0
    return 0


def load_run(
    run_dir: Path, results: Mapping[str, Any] | None = None, *, contents: bool = True
) -> RunData:
    """Read history.jsonl (a killed controller's prefix included), catalog.jsonl and run.json,
    with every time on the workload's clock (module docstring). `contents=False`: none of
    the three, only the results (for files that break the contract)."""
    run_dir = Path(run_dir)
    run_path = run_dir / RUN_JSON
    run: dict[str, Any] = read_json(run_path) if contents and run_path.exists() else {}
    if results is None and (run_dir / RESULTS).exists():
        results = read_json(run_dir / RESULTS)
    catalog = _Catalog(_read_catalog(run_dir / CATALOG) if contents else [])
    history = run_dir / HISTORY
    axis = _TimeAxis.of(run, workload_origin_ns(history) if contents else 0)
    scan = _HistoryScan(axis, catalog, witness_indices(results), run.get("nodes") or [])
    if contents and history.exists():
        scan.read(history)
    return scan.run_data(run_dir, run, results)


@dataclass(frozen=True)
class _TimeAxis:
    """The workload's clock (module docstring): history times and HLCs placed on it."""

    origin_ns: int  # the first client invoke on the history's clock
    start_wall_ms: float  # the controller's wall clock (epoch ms) at the workload's 0
    comparable: bool  # HLCs can be placed against that wall clock

    @staticmethod
    def of(run: Mapping[str, Any], origin_ns: int) -> _TimeAxis:
        raw_start = run.get("start_wall_ms")
        comparable = run.get("clock", "hlc") != "none" and isinstance(raw_start, int)
        start_wall_ms = (raw_start if isinstance(raw_start, int) else 0) + origin_ns / 1e6
        return _TimeAxis(origin_ns, start_wall_ms, comparable)

    def hlc_s(self, ts: Any) -> float | None:
        if not self.comparable or not isinstance(ts, int):
            return None
        return ((ts >> 16) - self.start_wall_ms) / 1000.0


class _OpColumns:
    """Client ops as they are paired, one row each (`Ops` once the history is read)."""

    KEYS = ("inv", "cmp", "proc", "f", "out", "node", "err", "start", "lat", "sum")
    OUTCOME_ID: Mapping[str, int] = {name: i for i, name in enumerate(OUTCOMES)}

    def __init__(self) -> None:
        self.f_ids, self.node_ids, self.err_ids = _Interner(), _Interner(), _Interner()
        self.cols: dict[str, list[Any]] = {k: [] for k in self.KEYS}

    def add(
        self,
        invoke: tuple[int, int, Any, str, Any],  # index, ns, process, f, value
        complete_index: int,
        outcome: str,
        node: str | None,
        error: str | None,
        start_s: float,
        latency_ms: float,
    ) -> None:
        inv_idx, _, proc, f, value = invoke
        cols = self.cols
        cols["inv"].append(inv_idx)
        cols["cmp"].append(complete_index)
        cols["proc"].append(proc if isinstance(proc, int) else -1)
        cols["f"].append(self.f_ids(f))
        cols["out"].append(self.OUTCOME_ID.get(outcome, 2))
        cols["node"].append(self.node_ids(node))
        cols["err"].append(self.err_ids(error))
        cols["start"].append(start_s)
        cols["lat"].append(latency_ms)
        cols["sum"].append(_summary(f, value))

    def ops(self) -> Ops:
        """The columns in invoke order."""
        cols = self.cols
        order = np.argsort(np.asarray(cols["inv"], dtype=np.int64), kind="stable")
        return Ops(
            invoke_index=np.asarray(cols["inv"], dtype=np.int64)[order],
            complete_index=np.asarray(cols["cmp"], dtype=np.int64)[order],
            process=np.asarray(cols["proc"], dtype=np.int64)[order],
            f=np.asarray(cols["f"], dtype=np.int16)[order],
            outcome=np.asarray(cols["out"], dtype=np.int8)[order],
            node=np.asarray(cols["node"], dtype=np.int16)[order],
            error=np.asarray(cols["err"], dtype=np.int16)[order],
            start_s=np.asarray(cols["start"], dtype=np.float64)[order],
            latency_ms=np.asarray(cols["lat"], dtype=np.float64)[order],
            f_names=self.f_ids.names(),
            node_names=self.node_ids.names(),
            error_names=self.err_ids.names(),
            summary=tuple(cols["sum"][i] for i in order),
        )


class _FaultWindows:
    """Nemesis events paired into windows: a start-KIND with its stop-/heal- (the same fault
    id when the stop names one), every open one closed by heal-all, the rest at the end."""

    def __init__(self) -> None:
        self.open: dict[str, list[dict[str, Any]]] = {}
        self.closed: list[NemesisWindow] = []

    def event(self, f: str, t: float, idx: int, value: Any) -> None:
        if f.startswith("start-"):
            kind = f[len("start-") :]
            self.open.setdefault(kind, []).append({"t": t, "i": idx, "v": value})
        elif f in CLOSE_ALL:
            for kind, stack in self.open.items():
                for w in stack:
                    self.closed.append(NemesisWindow(kind, w["t"], t, w["i"], idx, w["v"]))
            self.open.clear()
        elif f.startswith(CLOSING_PREFIXES):
            kind = f.split("-", 1)[1]
            waiting = self.open.get(kind)
            if waiting:
                fault = value.get("fault") if isinstance(value, dict) else None
                same = [w for w in waiting if w["v"].get("fault") == fault]
                w = same[0] if fault is not None and same else waiting[0]
                waiting.remove(w)
                self.closed.append(NemesisWindow(kind, w["t"], t, w["i"], idx, w["v"]))

    def windows(self, end_s: float) -> tuple[NemesisWindow, ...]:
        """Every window by start; one still open runs to the history's end."""
        closed = list(self.closed)
        for kind, stack in self.open.items():
            for w in stack:
                closed.append(NemesisWindow(kind, w["t"], end_s, w["i"], None, w["v"]))
        return tuple(sorted(closed, key=lambda w: w.start_s))


class _DdlColumns:
    """Each completed DDL: invoke time, latency, kind, outcome, the version its ack carried."""

    def __init__(self) -> None:
        self.time_s: list[float] = []
        self.latency_ms: list[float] = []
        self.kind: list[str] = []
        self.outcome: list[str] = []
        self.version: list[int | None] = []

    def add(self, start: float, lat_ms: float, invoked: Mapping[str, Any], typ: str, value: Any):
        self.time_s.append(start)
        self.latency_ms.append(lat_ms)
        self.kind.append(str(invoked.get("kind", "?")))
        self.outcome.append(typ)
        version = value.get("catalog_version")
        self.version.append(version if isinstance(version, int) else None)


class _HistoryScan:
    """One pass over history.jsonl: ops paired invoke -> completion per process, nemesis
    windows, the DDLs, the probes' and ops' versions against the catalog, node series."""

    def __init__(
        self, axis: _TimeAxis, catalog: _Catalog, witnesses: set[int], nodes: Sequence[Any]
    ) -> None:
        self.axis, self.catalog, self.witnesses = axis, catalog, witnesses
        self.count = 0
        self.last_ns = 0
        self.workload_end_ns = axis.origin_ns
        self.pending: dict[Any, tuple[int, int, Any, str, Any]] = {}
        self.ops = _OpColumns()
        self.faults = _FaultWindows()
        self.ddl = _DdlColumns()
        self.nemesis_events: list[dict[str, Any]] = []
        self.probe_versions, self.probe_authoritative = SeriesBuilder(), SeriesBuilder()
        self.op_version_skew = SeriesBuilder()
        self.nodes = NodeSeries([str(n) for n in nodes], axis.start_wall_ms, axis.comparable)
        self.monitor = MonitorReader()
        self.event_time: dict[int, float] = {}
        self.witness_raw: dict[int, dict[str, Any]] = {}
        self.witness_done: dict[int, dict[str, Any]] = {}

    def read(self, history: Path) -> None:
        with history.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    break  # a torn last line of a killed controller
                self.event(ev)

    def event(self, ev: dict[str, Any]) -> None:
        self.count += 1
        idx = ev.get("index", self.count - 1)
        t_ns = ev.get("time", self.last_ns)
        self.last_ns = t_ns
        t = (t_ns - self.axis.origin_ns) / 1e9
        if idx in self.witnesses:
            self.witness_raw[idx] = ev
            self.event_time[idx] = t
        proc = ev.get("process")
        f = ev.get("f", "")
        value = ev.get("value") or {}
        if proc == "monitor":
            if f == "sample" and isinstance(value, dict):
                self.monitor.add(t, value, self.axis.hlc_s)
        elif proc == "nemesis":
            self.nemesis_events.append(
                {"index": idx, "time_s": t, "f": f, "value": value, "type": ev.get("type")}
            )
            self.faults.event(f, t, idx, value)
            if isinstance(value, dict):
                self.nodes.nemesis(t, value)
        elif ev.get("type") == "invoke":
            self.pending[proc] = (idx, t_ns, proc, f, value)
        else:
            invoke = self.pending.pop(proc, None)
            if invoke is not None:
                self.completion(ev, invoke, idx, t_ns, t, value)

    def completion(
        self,
        ev: dict[str, Any],
        invoke: tuple[int, int, Any, str, Any],
        idx: int,
        t_ns: int,
        t: float,
        value: Any,
    ) -> None:
        """An op's completion: its row, then what its value says (DDL, probe, txn, status)."""
        inv_idx, inv_ns, _, inv_f, inv_value = invoke
        typ: Any = ev.get("type")  # ok, fail or info by the contract; kept as the file has it
        node = ev.get("node")
        err = ev.get("error") or {}
        lat_ms = (t_ns - inv_ns) / 1e6
        start = (inv_ns - self.axis.origin_ns) / 1e9
        if inv_f != "final-read":
            self.workload_end_ns = max(self.workload_end_ns, t_ns)
        code = err.get("code") if isinstance(err, dict) else None
        self.ops.add(
            invoke,
            idx,
            typ,
            node if isinstance(node, str) else None,
            code if isinstance(code, str) else None,
            start,
            lat_ms,
        )
        if inv_idx in self.witnesses:
            self.event_time[inv_idx] = start
        if inv_idx in self.witnesses or idx in self.witnesses:
            self.witness_done[inv_idx] = ev
        if not isinstance(value, dict):
            return
        if inv_f == "ddl":
            self.ddl.add(start, lat_ms, inv_value, typ, value)
        elif inv_f == "probe" and typ == "ok" and isinstance(node, str):
            self.probe(node, t, value)
        elif inv_f == "txn":
            self.txn_versions(node, t, value)
        elif inv_f == "status" and typ == "ok":
            self.nodes.status(node or value.get("node"), t, value)

    def probe(self, node: str, t: float, value: Mapping[str, Any]) -> None:
        """The version a node answered at the probe's ts, beside the catalog's own cat(ts)."""
        ts, cv = value.get("ts"), value.get("catalog_version")
        ts_s = self.axis.hlc_s(ts)
        x = ts_s if ts_s is not None else t
        if isinstance(cv, int):
            self.probe_versions.add(node, x, float(cv))
            want = self.catalog.cat(ts) if isinstance(ts, int) else None
            self.probe_authoritative.add(node, x, float(want) if want is not None else float("nan"))

    def txn_versions(self, node: Any, t: float, value: Mapping[str, Any]) -> None:
        """Each op's schema_version against tsv(table, op_ts): how far off the op read."""
        activation, table_versions = self.catalog.activation, self.catalog.tables
        axis, skew = self.axis, self.op_version_skew
        for op in value.get("ops") or ():
            if not isinstance(op, dict):
                continue
            op_ts, sv = op.get("op_ts"), op.get("schema_version")
            if op_ts.__class__ is not int or sv.__class__ is not int:
                continue
            pos = bisect.bisect_right(activation, op_ts) - 1
            want = table_versions[pos].get(str(op.get("table"))) if pos >= 0 else None
            if want is None:
                continue
            when = ((op_ts >> 16) - axis.start_wall_ms) / 1000.0 if axis.comparable else t
            skew.add(str(op.get("node") or node), when, float(sv - want))

    def dangling(self) -> None:
        """Ops invoked and never completed: a row each, running to the history's end."""
        origin_ns, last_ns = self.axis.origin_ns, self.last_ns
        for invoke in self.pending.values():
            inv_ns = invoke[1]
            start = (inv_ns - origin_ns) / 1e9
            latency = max(0.0, (last_ns - inv_ns) / 1e6)
            self.ops.add(invoke, -1, "pending", None, None, start, latency)
        self.pending.clear()

    def activations(self) -> tuple[Activation, ...]:
        """Every catalog version after the first, placed on the workload's clock."""
        return tuple(
            Activation(
                catalog_version=int(c.get("catalog_version", 0)),
                activation_ts=int(c.get("activation_ts", 0)),
                time_s=self.axis.hlc_s(int(c.get("activation_ts", 0))),
                ddl=str(c.get("ddl", "")),
            )
            for c in self.catalog.lines
            if int(c.get("catalog_version", 0)) > 1
        )

    def run_data(
        self, run_dir: Path, run: Mapping[str, Any], results: Mapping[str, Any] | None
    ) -> RunData:
        self.dangling()
        origin_ns = self.axis.origin_ns
        end_s = (self.last_ns - origin_ns) / 1e9
        track = self.monitor.track()
        # the monitor's steady 250 ms series read better alone than with the few snapshots
        # the nemeses and status ops took, so they replace them when there are any
        nodes = self.nodes
        return RunData(
            run_dir=run_dir,
            run=run,
            results=results,
            event_count=self.count,
            end_s=end_s,
            ops=self.ops.ops(),
            windows=self.faults.windows(end_s),
            nemesis_events=tuple(self.nemesis_events),
            activations=self.activations(),
            probe_versions=self.probe_versions.samples(),
            probe_authoritative=self.probe_authoritative.samples(),
            op_version_skew=self.op_version_skew.samples(),
            clock_offsets_s=track.offsets_s if track.offsets_s.node else nodes.offsets_s.samples(),
            safe_time_lag_ms=track.lag_ms if track.lag_ms.node else nodes.lag_ms.samples(),
            status_versions=track.versions if track.versions.node else nodes.versions.samples(),
            ddl_time_s=tuple(self.ddl.time_s),
            ddl_latency_ms=tuple(self.ddl.latency_ms),
            ddl_kind=tuple(self.ddl.kind),
            ddl_outcome=tuple(self.ddl.outcome),
            event_time_s=self.event_time,
            witness_events=self.witness_raw,
            origin_s=origin_ns / 1e9,
            workload_end_s=(self.workload_end_ns - origin_ns) / 1e9,
            monitor=track,
            witness_completions=self.witness_done,
            ddl_version=tuple(self.ddl.version),
        )
