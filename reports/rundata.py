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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contract.rundir import CATALOG, HISTORY, RESULTS, RUN_JSON, RUN_MARKERS
from reports.node_samples import MonitorReader, MonitorTrack, Samples, nemesis_offsets, node_views

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
    witnesses = witness_indices(results)
    nodes = [str(n) for n in run.get("nodes") or []]
    raw_start = run.get("start_wall_ms")
    comparable = run.get("clock", "hlc") != "none" and isinstance(raw_start, int)
    history = run_dir / HISTORY
    origin_ns = workload_origin_ns(history) if contents else 0
    # the controller's wall clock (epoch ms) at the workload's 0: what HLCs are placed against
    start_wall_ms = (raw_start if isinstance(raw_start, int) else 0) + origin_ns / 1e6

    def hlc_s(ts: Any) -> float | None:
        if not comparable or not isinstance(ts, int):
            return None
        return ((ts >> 16) - start_wall_ms) / 1000.0

    f_ids, node_ids, err_ids = _Interner(), _Interner(), _Interner()
    cols: dict[str, list[Any]] = {
        k: [] for k in ("inv", "cmp", "proc", "f", "out", "node", "err", "start", "lat", "sum")
    }
    pending: dict[Any, tuple[int, int, str, dict[str, Any]]] = {}
    nemesis_events: list[dict[str, Any]] = []
    open_windows: dict[str, list[dict[str, Any]]] = {}
    closed: list[NemesisWindow] = []
    probe_v: tuple[list[str], list[float], list[float]] = ([], [], [])
    probe_a: tuple[list[str], list[float], list[float]] = ([], [], [])
    skew: tuple[list[str], list[float], list[float]] = ([], [], [])
    offs: tuple[list[str], list[float], list[float]] = ([], [], [])
    lag: tuple[list[str], list[float], list[float]] = ([], [], [])
    status_v: tuple[list[str], list[float], list[float]] = ([], [], [])
    ddl_t: list[float] = []
    ddl_l: list[float] = []
    ddl_k: list[str] = []
    ddl_o: list[str] = []
    ddl_v: list[int | None] = []
    witness_done: dict[int, dict[str, Any]] = {}
    event_time: dict[int, float] = {}
    witness_raw: dict[int, dict[str, Any]] = {}
    monitor = MonitorReader()
    count = 0
    last_ns = 0
    workload_end_ns = origin_ns
    outcome_id = {name: i for i, name in enumerate(OUTCOMES)}

    def add(sample: tuple[list[str], list[float], list[float]], n: str, t: float, v: float):
        sample[0].append(n)
        sample[1].append(t)
        sample[2].append(v)

    def status_sample(
        node: Any, t: float, value: Mapping[str, Any], with_offset: bool = True
    ) -> None:
        if not isinstance(node, str):
            return
        safe, now = value.get("safe_ts"), value.get("hlc_now")
        if isinstance(safe, int) and isinstance(now, int):
            add(lag, node, t, float((now >> 16) - (safe >> 16)))
        cv = value.get("catalog_version")
        if isinstance(cv, int):
            add(status_v, node, t, float(cv))
        wall, hlc_now = value.get("wall_ms"), value.get("hlc_now")
        if not with_offset:
            return
        if isinstance(wall, int) and comparable:
            # The node's faked wall clock against the controller's: a measured clock offset.
            sent = start_wall_ms + t * 1000.0
            add(offs, node, t, (wall - sent) / 1000.0)
        elif isinstance(hlc_now, int) and comparable:
            add(offs, node, t, ((hlc_now >> 16) - start_wall_ms - t * 1000.0) / 1000.0)

    node_set = set(nodes)

    def nemesis_samples(t: float, value: Mapping[str, Any]) -> None:
        """Measured clock offsets and safe-time lag from a nemesis event's value."""
        took = value.get("elapsed_ms")
        before_t = t - took / 1000.0 if isinstance(took, int | float) else t
        measured = False
        for view in node_views(value, node_set):
            when = before_t if "before" in view.path else t
            fields = view.fields
            off = fields.get("wall_offset_s", fields.get("hlc_offset_s", fields.get("offset_s")))
            if isinstance(off, int | float) and not isinstance(off, bool):
                off = float(off)
                add(offs, view.node, when, off)
                measured = True
            if "hlc_now" in fields or "wall_ms" in fields:
                # a whole admin.status view: lag, applied version, offset from its clocks
                status_sample(view.node, when, fields, with_offset=not isinstance(off, float))
                measured = measured or "wall_ms" in fields or "hlc_now" in fields
                continue
            safe = fields.get("safe_ts")
            if isinstance(safe, int) and comparable:
                ref = start_wall_ms + when * 1000.0  # the controller's clock at the event
                add(lag, view.node, when, float(ref - (safe >> 16)))
        if not measured:
            for node, off in nemesis_offsets(value, nodes).items():
                add(offs, node, t, off)
        for sample in value.get("status") or []:
            if isinstance(sample, dict):
                status_sample(sample.get("node"), t, sample)

    activation, table_versions = catalog.activation, catalog.tables
    bisect_right = bisect.bisect_right
    skew_node, skew_t, skew_v = skew
    fh = history.open(encoding="utf-8") if contents and history.exists() else None
    try:
        for line in fh or ():
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line of a killed controller
            count += 1
            idx = ev.get("index", count - 1)
            t_ns = ev.get("time", last_ns)
            last_ns = t_ns
            t = (t_ns - origin_ns) / 1e9
            if idx in witnesses:
                witness_raw[idx] = ev
                event_time[idx] = t
            proc = ev.get("process")
            typ = ev.get("type")
            f = ev.get("f", "")
            value = ev.get("value") or {}
            if proc == "monitor":
                if f == "sample" and isinstance(value, dict):
                    monitor.add(t, value, hlc_s)
                continue
            if proc == "nemesis":
                nemesis_events.append(
                    {"index": idx, "time_s": t, "f": f, "value": value, "type": typ}
                )
                if f.startswith("start-"):
                    kind = f[len("start-") :]
                    open_windows.setdefault(kind, []).append({"t": t, "i": idx, "v": value})
                elif f in CLOSE_ALL:
                    for kind, stack in open_windows.items():
                        for w in stack:
                            closed.append(NemesisWindow(kind, w["t"], t, w["i"], idx, w["v"]))
                    open_windows.clear()
                elif f.startswith(CLOSING_PREFIXES):
                    kind = f.split("-", 1)[1]
                    waiting = open_windows.get(kind)
                    if waiting:
                        fault = value.get("fault") if isinstance(value, dict) else None
                        same = [w for w in waiting if w["v"].get("fault") == fault]
                        w = same[0] if fault is not None and same else waiting[0]
                        waiting.remove(w)
                        closed.append(NemesisWindow(kind, w["t"], t, w["i"], idx, w["v"]))
                if isinstance(value, dict):
                    nemesis_samples(t, value)
                continue
            if typ == "invoke":
                pending[proc] = (idx, t_ns, f, value)
                continue
            inv = pending.pop(proc, None)
            if inv is None:
                continue
            inv_idx, inv_ns, inv_f, inv_value = inv
            node = ev.get("node")
            err = ev.get("error") or {}
            lat_ms = (t_ns - inv_ns) / 1e6
            start = (inv_ns - origin_ns) / 1e9
            if inv_f != "final-read":
                workload_end_ns = max(workload_end_ns, t_ns)
            cols["inv"].append(inv_idx)
            cols["cmp"].append(idx)
            cols["proc"].append(proc if isinstance(proc, int) else -1)
            cols["f"].append(f_ids(inv_f))
            cols["out"].append(outcome_id.get(typ, 2))
            cols["node"].append(node_ids(node if isinstance(node, str) else None))
            code = err.get("code") if isinstance(err, dict) else None
            cols["err"].append(err_ids(code if isinstance(code, str) else None))
            cols["start"].append(start)
            cols["lat"].append(lat_ms)
            cols["sum"].append(_summary(inv_f, inv_value))
            if inv_idx in witnesses:
                event_time[inv_idx] = start
            if inv_idx in witnesses or idx in witnesses:
                witness_done[inv_idx] = ev
            if not isinstance(value, dict):
                continue
            if inv_f == "ddl":
                ddl_t.append(start)
                ddl_l.append(lat_ms)
                ddl_k.append(str(inv_value.get("kind", "?")))
                ddl_o.append(typ)
                version = value.get("catalog_version")
                ddl_v.append(version if isinstance(version, int) else None)
            elif inv_f == "probe" and typ == "ok" and isinstance(node, str):
                ts, cv = value.get("ts"), value.get("catalog_version")
                ts_s = hlc_s(ts)
                x = ts_s if ts_s is not None else t
                if isinstance(cv, int):
                    add(probe_v, node, x, float(cv))
                    want = catalog.cat(ts) if isinstance(ts, int) else None
                    add(probe_a, node, x, float(want) if want is not None else float("nan"))
            elif inv_f == "txn":
                for op in value.get("ops") or ():
                    if not isinstance(op, dict):
                        continue
                    op_ts, sv = op.get("op_ts"), op.get("schema_version")
                    if op_ts.__class__ is not int or sv.__class__ is not int:
                        continue
                    pos = bisect_right(activation, op_ts) - 1
                    want = table_versions[pos].get(str(op.get("table"))) if pos >= 0 else None
                    if want is None:
                        continue
                    skew_node.append(str(op.get("node") or node))
                    skew_t.append(((op_ts >> 16) - start_wall_ms) / 1000.0 if comparable else t)
                    skew_v.append(float(sv - want))
            elif inv_f == "status" and typ == "ok":
                status_sample(node or value.get("node"), t, value)
    finally:
        if fh is not None:
            fh.close()
    end_s = (last_ns - origin_ns) / 1e9
    for proc, (inv_idx, inv_ns, inv_f, inv_value) in pending.items():
        cols["inv"].append(inv_idx)
        cols["cmp"].append(-1)
        cols["proc"].append(proc if isinstance(proc, int) else -1)
        cols["f"].append(f_ids(inv_f))
        cols["out"].append(outcome_id["pending"])
        cols["node"].append(-1)
        cols["err"].append(-1)
        cols["start"].append((inv_ns - origin_ns) / 1e9)
        cols["lat"].append(max(0.0, (last_ns - inv_ns) / 1e6))
        cols["sum"].append(_summary(inv_f, inv_value))
    for kind, stack in open_windows.items():
        for w in stack:
            closed.append(NemesisWindow(kind, w["t"], end_s, w["i"], None, w["v"]))
    order = np.argsort(np.asarray(cols["inv"], dtype=np.int64), kind="stable")
    ops = Ops(
        invoke_index=np.asarray(cols["inv"], dtype=np.int64)[order],
        complete_index=np.asarray(cols["cmp"], dtype=np.int64)[order],
        process=np.asarray(cols["proc"], dtype=np.int64)[order],
        f=np.asarray(cols["f"], dtype=np.int16)[order],
        outcome=np.asarray(cols["out"], dtype=np.int8)[order],
        node=np.asarray(cols["node"], dtype=np.int16)[order],
        error=np.asarray(cols["err"], dtype=np.int16)[order],
        start_s=np.asarray(cols["start"], dtype=np.float64)[order],
        latency_ms=np.asarray(cols["lat"], dtype=np.float64)[order],
        f_names=f_ids.names(),
        node_names=node_ids.names(),
        error_names=err_ids.names(),
        summary=tuple(cols["sum"][i] for i in order),
    )
    activations = tuple(
        Activation(
            catalog_version=int(c.get("catalog_version", 0)),
            activation_ts=int(c.get("activation_ts", 0)),
            time_s=hlc_s(int(c.get("activation_ts", 0))),
            ddl=str(c.get("ddl", "")),
        )
        for c in catalog.lines
        if int(c.get("catalog_version", 0)) > 1
    )
    track = monitor.track()
    if track.offsets_s.node:  # a steady 250 ms series reads better alone than with snapshots
        offs = (
            list(track.offsets_s.node),
            list(track.offsets_s.time_s),
            list(track.offsets_s.value),
        )
    if track.lag_ms.node:  # the monitor's series replace the few nemesis-time snapshots
        lag = (list(track.lag_ms.node), list(track.lag_ms.time_s), list(track.lag_ms.value))
    if track.versions.node:
        status_v = (
            list(track.versions.node),
            list(track.versions.time_s),
            list(track.versions.value),
        )
    return RunData(
        run_dir=run_dir,
        run=run,
        results=results,
        event_count=count,
        end_s=end_s,
        ops=ops,
        windows=tuple(sorted(closed, key=lambda w: w.start_s)),
        nemesis_events=tuple(nemesis_events),
        activations=activations,
        probe_versions=Samples(tuple(probe_v[0]), tuple(probe_v[1]), tuple(probe_v[2])),
        probe_authoritative=Samples(tuple(probe_a[0]), tuple(probe_a[1]), tuple(probe_a[2])),
        op_version_skew=Samples(tuple(skew[0]), tuple(skew[1]), tuple(skew[2])),
        clock_offsets_s=Samples(tuple(offs[0]), tuple(offs[1]), tuple(offs[2])),
        safe_time_lag_ms=Samples(tuple(lag[0]), tuple(lag[1]), tuple(lag[2])),
        status_versions=Samples(tuple(status_v[0]), tuple(status_v[1]), tuple(status_v[2])),
        ddl_time_s=tuple(ddl_t),
        ddl_latency_ms=tuple(ddl_l),
        ddl_kind=tuple(ddl_k),
        ddl_outcome=tuple(ddl_o),
        event_time_s=event_time,
        witness_events=witness_raw,
        origin_s=origin_ns / 1e9,
        workload_end_s=(workload_end_ns - origin_ns) / 1e9,
        monitor=track,
        witness_completions=witness_done,
        ddl_version=tuple(ddl_v),
    )
