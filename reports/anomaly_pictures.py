"""One SVG per anomaly, as Elle draws one per cycle: its witness ops against the DDL's
acknowledgement, its activation and each node's safe time.

Every witness op is a row: a bar from invoke to completion (the controller's clock) with its
op_ts, commit_ts or probe ts placed on the same axis through the run's HLC origin. The DDL whose
activation is nearest the witnesses is drawn as its own row, with a line at its ack and a line
at its activation_ts across the picture. With monitor samples, each node gets a row coloured by
whether its safe time had passed that activation, so "served before it could know" is visible.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup

from reports.plots import ACTIVATION_COLOUR, OUTCOME_COLOURS
from reports.rundata import OUTCOMES, Activation, RunData
from reports.templating import render_fragment

MAX_PICTURES = 50
EXPLANATION_CHARS = 150
MAX_ROWS = 12  # witness ops drawn per picture; the rest are counted
WIDTH, GUTTER, ROW, TOP = 960, 190, 26, 60
PLOT_WIDTH = WIDTH - GUTTER - 20  # the time axis, between the row labels and the right edge
TS_MARKS = (("op_ts", "op_ts", "diamond"), ("commit_ts", "commit_ts", "square"))
SAFE_BEHIND, SAFE_PAST = "#c7c7c7", "#4c9a6a"


@dataclass(frozen=True)
class AnomalyPicture:
    number: int  # the anomaly's row in results.json, from 1 (the report's #)
    cls: str
    file_name: str  # anomalies/<class>-<number>.svg
    svg: Markup


@dataclass(frozen=True)
class _Op:
    label: str
    start: float
    end: float
    outcome: str
    marks: tuple[tuple[str, float, str], ...]  # (label, time_s, shape)


class _OpIndex:
    """Event index -> op row: ops are sorted by invoke index; completions get their own order."""

    def __init__(self, data: RunData) -> None:
        self.invokes = data.ops.invoke_index
        self.by_complete = np.argsort(data.ops.complete_index, kind="stable")
        self.completes = data.ops.complete_index[self.by_complete]

    def row(self, event: int) -> int | None:
        for keys, rows in ((self.invokes, None), (self.completes, self.by_complete)):
            at = int(np.searchsorted(keys, event))
            if at < len(keys) and keys[at] == event:
                return at if rows is None else int(rows[at])
        return None


def _ops_of(data: RunData, index: _OpIndex, events: Sequence[int]) -> list[_Op]:
    """The ops the witness events belong to (an invoke or a completion names the same op)."""
    ops = data.ops
    rows: list[_Op] = []
    seen: set[int] = set()
    for idx in events:
        pos = index.row(idx)
        if pos is None or pos in seen:
            continue
        seen.add(pos)
        inv = int(ops.invoke_index[pos])
        done = data.witness_completions.get(inv) or {}
        raw = done.get("value")
        value: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        marks: list[tuple[str, float, str]] = []
        for key, label, shape in (*TS_MARKS, ("ts", "ts", "circle")):
            t = data.hlc_to_s(value[key]) if isinstance(value.get(key), int) else None
            if t is not None:
                marks.append((label, t, shape))
        for op in value.get("ops") or []:
            op_ts = op.get("op_ts") if isinstance(op, dict) else None
            t = data.hlc_to_s(op_ts) if isinstance(op_ts, int) else None
            if t is not None:
                marks.append((f"op_ts {op.get('table', '?')}:{op.get('key', '?')}", t, "diamond"))
        f = ops.f_names[ops.f[pos]] if ops.f[pos] >= 0 else "?"
        node = ops.node_names[ops.node[pos]] if ops.node[pos] >= 0 else "?"
        start = float(ops.start_s[pos])
        rows.append(
            _Op(
                label=f"#{inv} p{ops.process[pos]} {f} on {node}",
                start=start,
                end=start + float(ops.latency_ms[pos]) / 1000.0,
                outcome=OUTCOMES[ops.outcome[pos]],
                marks=tuple(marks),
            )
        )
    return rows


def _nearest_activation(data: RunData, lo: float, hi: float) -> Activation | None:
    placed = [a for a in data.activations if a.time_s is not None]
    if not placed:
        return None
    return min(placed, key=lambda a: max(lo - (a.time_s or 0.0), (a.time_s or 0.0) - hi, 0.0))


def _ddl_op(data: RunData, version: int) -> tuple[float, float] | None:
    """(invoke, ack) of the DDL whose acknowledgement carried `version`."""
    for t, lat, v in zip(data.ddl_time_s, data.ddl_latency_ms, data.ddl_version, strict=False):
        if v == version:
            return t, t + lat / 1000.0
    return None


def _safe_rows(data: RunData, activation: Activation, lo: float, hi: float) -> list[dict[str, Any]]:
    """Per node: segments between monitor samples coloured by whether safe time >= activation,
    and the first sample at which it was."""
    mon = data.monitor.safe_s
    if not mon.node or activation.time_s is None:
        return []
    nodes = np.asarray(mon.node)
    times, safe = np.asarray(mon.time_s), np.asarray(mon.value)
    out = []
    for node in sorted(set(mon.node)):
        sel = nodes == node
        t, s = times[sel], safe[sel]
        order = np.argsort(t, kind="stable")
        t, s = t[order], s[order]
        keep = (t >= lo) & (t <= hi)
        # one sample either side so the row spans the whole window
        idx = np.flatnonzero(keep)
        if len(idx) == 0:
            continue
        first, last = max(0, int(idx[0]) - 1), min(len(t) - 1, int(idx[-1]) + 1)
        t, s = t[first : last + 1], s[first : last + 1]
        past = s >= activation.time_s
        segs = [
            {
                "t0": float(t[i]),
                "t1": float(t[i + 1]) if i + 1 < len(t) else float(t[i]),
                "past": bool(past[i]),
                "lag_ms": float((t[i] - s[i]) * 1000.0),
            }
            for i in range(len(t))
        ]
        crossing = np.flatnonzero(past)
        out.append(
            {
                "node": node,
                "segs": segs,
                "crossed": float(t[crossing[0]]) if len(crossing) else None,
            }
        )
    return out


@dataclass(frozen=True)
class _Axis:
    """The picture's time window (seconds on the workload's clock) and where a time lands."""

    lo: float
    hi: float

    def x(self, t: float) -> float:
        return round(GUTTER + (t - self.lo) / (self.hi - self.lo) * PLOT_WIDTH, 1)


def _picture(
    data: RunData, index: _OpIndex, number: int, anomaly: Mapping[str, Any]
) -> AnomalyPicture | None:
    cls = str(anomaly.get("class"))
    events = [i for i in anomaly.get("events") or [] if isinstance(i, int)]
    ops = _ops_of(data, index, events[: 2 * MAX_ROWS])
    if not ops:
        return None
    shown = ops[:MAX_ROWS]
    hidden = max(0, len(ops) - MAX_ROWS) + max(0, len(events) - 2 * MAX_ROWS)
    times = [t for op in shown for t in (op.start, op.end, *(m[1] for m in op.marks))]
    activation = _nearest_activation(data, min(times), max(times))
    ddl = _ddl_op(data, activation.catalog_version) if activation else None
    axis = _axis(times, activation, ddl)
    safe = _safe_rows(data, activation, axis.lo, axis.hi) if activation is not None else []
    rows = _rows(axis, shown, activation, ddl)
    words = str(anomaly.get("explanation", ""))[:600]
    explanation = textwrap.wrap(words, EXPLANATION_CHARS)[:4]
    top = TOP + 14 * max(0, len(explanation) - 1)
    y_safe = top + len(rows) * ROW + (18 if hidden else 0) + (12 if safe else 0)
    svg = render_fragment(
        "anomaly.svg",
        width=WIDTH,
        height=y_safe + len(safe) * ROW + 46,
        gutter=GUTTER,
        top=top,
        row_h=ROW,
        plot_right=GUTTER + PLOT_WIDTH,
        title=f"#{number} {cls}",
        explanation=explanation,
        rows=rows,
        hidden=hidden,
        lines=_lines(axis, activation, ddl),
        ticks=_ticks(axis),
        safe=[_safe_drawn(axis, row) for row in safe],
        y_safe=y_safe,
        safe_past=SAFE_PAST,
        safe_behind=SAFE_BEHIND,
        version=activation.catalog_version if activation else None,
        no_monitor=activation is not None and not data.monitor.safe_s.node,
        hlc_note=not data.hlc_comparable,
        outcome_colours=OUTCOME_COLOURS,
    )
    return AnomalyPicture(number, cls, f"{_file_safe(cls)}-{number}.svg", svg)


def _axis(
    times: Sequence[float], activation: Activation | None, ddl: tuple[float, float] | None
) -> _Axis:
    """The witnesses' span, widened to the DDL's invoke, ack and activation, and padded."""
    lo, hi = min(times), max(times)
    if activation is not None and activation.time_s is not None:
        lo, hi = min(lo, activation.time_s), max(hi, activation.time_s)
    if ddl is not None:
        lo, hi = min(lo, ddl[0]), max(hi, ddl[1])
    pad = max((hi - lo) * 0.06, 0.02)
    return _Axis(lo - pad, hi + pad)


def _rows(
    axis: _Axis,
    shown: Sequence[_Op],
    activation: Activation | None,
    ddl: tuple[float, float] | None,
) -> list[dict[str, Any]]:
    """The DDL's own row (invoke to ack) when it is known, then a bar per witness op."""
    x = axis.x
    rows: list[dict[str, Any]] = []
    if activation is not None and ddl is not None:
        rows.append(
            {
                "label": f"DDL v{activation.catalog_version}",
                "title": activation.ddl,
                "x0": x(ddl[0]),
                "x1": x(ddl[1]),
                "colour": "#555555",
                "marks": [],
            }
        )
    for op in shown:
        rows.append(
            {
                "label": op.label,
                "title": f"{op.label} {op.outcome} {op.start:.3f} s -> {op.end:.3f} s",
                "x0": x(op.start),
                "x1": max(x(op.end), x(op.start) + 4),
                "colour": OUTCOME_COLOURS[op.outcome],
                "marks": [
                    {"label": label, "x": x(t), "shape": shape, "t": t}
                    for label, t, shape in op.marks
                ],
            }
        )
    return rows


def _ticks(axis: _Axis) -> list[dict[str, Any]]:
    step = _tick_step(axis.hi - axis.lo)
    return [
        {"x": axis.x(t), "label": f"{t:.3f}".rstrip("0").rstrip(".") + " s"}
        # rounded to the step, so a tick at 0 never reads "-0 s"
        for t in (
            round(float(v) / step) * step + 0.0
            for v in np.arange(np.ceil(axis.lo / step) * step, axis.hi, step)
        )
    ]


def _lines(
    axis: _Axis, activation: Activation | None, ddl: tuple[float, float] | None
) -> list[dict[str, Any]]:
    """Lines across the picture: the DDL's ack (dashed) and its activation_ts."""
    lines = []
    if ddl is not None and activation is not None:
        lines.append({"x": axis.x(ddl[1]), "label": f"v{activation.catalog_version} acked",
                      "colour": "#000000", "dash": "5 3"})  # fmt: skip
    if activation is not None and activation.time_s is not None:
        lines.append({"x": axis.x(activation.time_s), "label": f"v{activation.catalog_version} "
                      "activation_ts", "colour": ACTIVATION_COLOUR, "dash": ""})  # fmt: skip
    return lines


def _safe_drawn(axis: _Axis, row: Mapping[str, Any]) -> dict[str, Any]:
    """A node's safe-time row (`_safe_rows`) clipped to the window, in picture coordinates."""
    lo, hi = axis.lo, axis.hi
    return {
        "node": row["node"],
        "segs": [
            {**s, "x0": axis.x(max(s["t0"], lo)), "x1": axis.x(min(max(s["t1"], s["t0"]), hi))}
            for s in row["segs"]
            if s["t1"] >= lo and s["t0"] <= hi
        ],
        "crossed_x": axis.x(row["crossed"]) if row["crossed"] is not None else None,
    }


def _file_safe(cls: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in cls) or "anomaly"


def _tick_step(span: float) -> float:
    raw = max(span, 1e-3) / 8
    scale = 10 ** np.floor(np.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * scale:
            return float(m * scale)
    return float(10 * scale)


def anomaly_pictures(data: RunData) -> list[AnomalyPicture]:
    """A picture for each anomaly of results.json that names witness events in the history
    (at most MAX_PICTURES); an anomaly whose events are not ops has none."""
    anomalies = list((data.results or {}).get("anomalies") or [])
    out: list[AnomalyPicture] = []
    if not anomalies:
        return out
    index = _OpIndex(data)
    for number, anomaly in enumerate(anomalies[:MAX_PICTURES], start=1):
        if isinstance(anomaly, Mapping):
            picture = _picture(data, index, number, anomaly)
            if picture is not None:
                out.append(picture)
    return out
