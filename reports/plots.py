"""The plots of a run (matplotlib Agg, PNG and SVG), all on the workload's clock: 0 is the
first client invoke (reports.rundata), so setup never reads as an empty stretch or as downtime.

Every time-axis plot shades the nemesis windows by kind and marks each DDL activation, so a
latency spike or a version lag can be read against the fault and the schema change behind it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from reports.node_samples import Samples
from reports.rundata import OUTCOMES, RunData

OUTCOME_COLOURS = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff7f0e", "pending": "#7f7f7f"}
# One colour per fault kind, far apart in hue: clock and pause used to be two near cyans.
FAULT_COLOURS = {
    "partition": "#1f77b4",  # blue
    "partition-learner": "#6baed6",  # light blue: a partition of the learners only
    "clock": "#e6ab02",  # amber
    "clock-skew": "#e6ab02",
    "pause": "#e7298a",  # magenta
    "kill": "#a6761d",  # brown
    "delay": "#66a61e",  # olive green
    "lagging-learner": "#7570b3",  # slate violet
}
# Okabe-Ito: a qualitative palette that stays distinct for colour-blind readers
QUALITATIVE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#000000",
)
MARKERS = "osD^vP*X<>ph"
ACTIVATION_COLOUR = "#6a3d9a"
MAX_SCATTER_OK = 60_000  # ok points kept in latency-raw; every fail/info is always drawn
MAX_BINS = 200


@dataclass(frozen=True)
class PlotFile:
    """One rendered plot: a stable name (used as the HTML anchor), a title, both formats."""

    name: str
    title: str
    png: Path
    svg: Path


def _bin_width(end_s: float) -> float:
    raw = max(end_s, 1.0) / MAX_BINS
    for nice in (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if raw <= nice:
            return float(nice)
    return float(math.ceil(raw / 600) * 600)


def _edges(end_s: float) -> np.ndarray:
    width = _bin_width(end_s)
    return np.arange(0.0, max(end_s, width) + width, width)


def _farthest(candidates: Sequence[str], used: Sequence[str]) -> str:
    """The candidate colour farthest (in RGB) from every colour already used."""
    taken = [np.array(to_rgb(c)) for c in used]

    def distance(colour: str) -> float:
        rgb = np.array(to_rgb(colour))
        return min((float(np.linalg.norm(rgb - u)) for u in taken), default=0.0)

    return max(candidates, key=distance)


def nemesis_colours(kinds: set[str]) -> dict[str, str]:
    """Each fault kind's colour: the fixed one of a known kind, else the first free colour."""
    out = {k: FAULT_COLOURS[k] for k in sorted(kinds) if k in FAULT_COLOURS}
    for kind in sorted(kinds - set(out)):
        out[kind] = _farthest(QUALITATIVE, list(out.values()))
    return dict(sorted(out.items()))


def kind_styles(kinds: set[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) per DDL kind: both differ, so twelve kinds stay twelve in print."""
    return {
        k: (QUALITATIVE[i % len(QUALITATIVE)], MARKERS[i % len(MARKERS)])
        for i, k in enumerate(sorted(kinds))
    }


def _decorate(ax: Axes, data: RunData, legend: bool = True) -> None:
    """Shade nemesis windows by kind and mark DDL activations on a time axis."""
    colours = nemesis_colours({w.kind for w in data.windows})
    for kind, colour in colours.items():
        # one collection per kind: a long run has hundreds of windows and activations
        boxes = [
            [(w.start_s, 0), (w.start_s, 1), (end, 1), (end, 0)]
            for w in data.windows
            if w.kind == kind
            for end in (max(w.end_s, w.start_s + 0.05),)
        ]
        ax.add_collection(
            PolyCollection(
                boxes,
                facecolors=colour,
                edgecolors="none",
                alpha=0.13,
                transform=ax.get_xaxis_transform(),
            ),
            autolim=False,
        )
    acts = [a for a in data.activations if a.time_s is not None]
    if not acts and not data.hlc_comparable:
        # A target without comparable clocks: the DDL acknowledgement is the best marker.
        times = [
            t + lat / 1000.0
            for t, lat, o in zip(
                data.ddl_time_s, data.ddl_latency_ms, data.ddl_outcome, strict=True
            )
            if o == "ok"
        ]
    else:
        times = [a.time_s for a in acts if a.time_s is not None]
    if times:
        # ticks standing on the time axis, not full-height lines: 55 activations in a minute
        # would otherwise hatch over every series
        ax.plot(
            times,
            [0.0] * len(times),
            linestyle="none",
            marker="|",
            markersize=11,
            markeredgewidth=1.6,
            color=ACTIVATION_COLOUR,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            zorder=4,
        )
    ax.set_xlim(0, max(data.end_s, 1.0))
    ax.set_xlabel("time since the workload started (s)")
    ax.grid(True, alpha=0.25, linewidth=0.5)
    if not legend:
        return
    handles: list[Any] = [
        Patch(color=c, alpha=0.3, label=f"nemesis: {k}") for k, c in colours.items()
    ]
    if times:
        handles.append(
            plt.Line2D(
                [],
                [],
                color=ACTIVATION_COLOUR,
                linestyle="none",
                marker="|",
                markersize=10,
                markeredgewidth=1.6,
                label="DDL activation",
            )
        )
    existing, labels = ax.get_legend_handles_labels()
    if handles or existing:
        ax.legend(
            handles=list(existing) + handles,
            labels=list(labels) + [str(h.get_label()) for h in handles],
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            frameon=False,
        )


def _empty(ax: Axes, why: str) -> None:
    ax.text(
        0.5,
        0.5,
        why,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=10,
        color="#555555",
    )


def _figure(rows: int = 1, height: float = 3.6) -> tuple[Figure, list[Axes]]:
    fig, axes = plt.subplots(rows, 1, figsize=(11, height * rows), squeeze=False, sharex=True)
    return fig, [a for a in axes[:, 0]]


def _anomaly_marks(ax: Axes, data: RunData) -> None:
    """Red ticks at the top of an axis at every anomaly witness event."""
    times = sorted(data.event_time_s.values())
    if times:
        ax.plot(
            times,
            [1.0] * len(times),
            linestyle="none",
            marker="v",
            color="#b30000",
            markersize=6,
            transform=ax.get_xaxis_transform(),
            label="anomaly witness",
            clip_on=False,
        )


def plot_latency_raw(data: RunData) -> Figure:
    fig, (ax,) = _figure(height=4.2)
    ops = data.ops
    ax.set_title("Latency of every op, coloured by outcome")
    ax.set_ylabel("latency (ms)")
    if len(ops) == 0:
        _empty(ax, "no client ops in the history")
    else:
        ok = np.flatnonzero(ops.outcome == 0)
        if len(ok) > MAX_SCATTER_OK:
            ok = ok[:: math.ceil(len(ok) / MAX_SCATTER_OK)]
        for code, name in enumerate(OUTCOMES):
            sel = ok if code == 0 else np.flatnonzero(ops.outcome == code)
            if len(sel) == 0:
                continue
            ax.scatter(
                ops.start_s[sel],
                np.maximum(ops.latency_ms[sel], 0.01),
                s=3 if code == 0 else 7,
                c=OUTCOME_COLOURS[name],
                alpha=0.5 if code == 0 else 0.85,
                linewidths=0,
                label=f"{name} ({int(np.sum(ops.outcome == code))})",
                rasterized=True,
            )
        ax.set_yscale("log")
        _anomaly_marks(ax, data)
    _decorate(ax, data)
    return fig


def _quantiles(start: np.ndarray, lat: np.ndarray, edges: np.ndarray, qs: Sequence[float]):
    order = np.argsort(start, kind="stable")
    start, lat = start[order], lat[order]
    cuts = np.searchsorted(start, edges)
    out = np.full((len(qs), len(edges) - 1), np.nan)
    for i in range(len(edges) - 1):
        chunk = lat[cuts[i] : cuts[i + 1]]
        if len(chunk):
            out[:, i] = np.quantile(chunk, qs)
    return out


def plot_latency_quantiles(data: RunData) -> Figure:
    ops = data.ops
    names = [n for n in ("txn", "ddl", "probe") if n in ops.f_names]
    fig, axes = _figure(rows=max(1, len(names)), height=2.8)
    axes[0].set_title("Latency quantiles over time (ops by invoke time)")
    edges = _edges(data.end_s)
    mids = (edges[:-1] + edges[1:]) / 2
    qs = (0.5, 0.95, 0.99, 1.0)
    styles = ("-", "--", "-.", ":")
    if not names:
        _empty(axes[0], "no txn, ddl or probe ops in the history")
        _decorate(axes[0], data)
    for ax, name in zip(axes, names, strict=False):
        sel = ops.f == ops.f_names.index(name)
        sel &= ops.outcome != OUTCOMES.index("pending")
        q = _quantiles(ops.start_s[sel], ops.latency_ms[sel], edges, qs)
        for row, p, style in zip(q, qs, styles, strict=True):
            label = "max" if p == 1.0 else f"p{round(p * 100)}"
            ax.plot(mids, row, linestyle=style, linewidth=1.2, label=label)
        ax.set_ylabel(f"{name} latency (ms)")
        if np.isfinite(q).any():
            ax.set_yscale("log")
        if name == "ddl" and data.ddl_floor_ms is not None:
            ax.axhline(data.ddl_floor_ms, color="black", linewidth=0.8, label="floor DD + CSmax")
        _decorate(ax, data)
    return fig


def _stack_by_code(data: RunData, sel: np.ndarray, edges: np.ndarray):
    """Counts per time bin of each outcome label: ok, then each error code seen."""
    ops = data.ops
    labels: list[str] = []
    rows: list[np.ndarray] = []
    start = ops.start_s[sel] + ops.latency_ms[sel] / 1000.0
    outcome, error = ops.outcome[sel], ops.error[sel]
    if np.any(outcome == 0):
        labels.append("ok")
        rows.append(np.histogram(start[outcome == 0], edges)[0])
    bad = outcome != 0
    for code in sorted(set(error[bad].tolist())):
        name = ops.error_names[code] if code >= 0 else "unknown"
        mask = bad & (error == code)
        for o in sorted(set(outcome[mask].tolist())):
            labels.append(f"{OUTCOMES[o]}: {name}")
            rows.append(np.histogram(start[mask & (outcome == o)], edges)[0])
    return labels, rows


def _code_colours(labels: Sequence[str], data: RunData) -> list[str]:
    """One colour per error code, the same in every panel: fail dark, info light."""
    cmap = matplotlib.colormaps["tab20"]
    pairs = [p for p in range(10) if p != 2]  # tab20 pair 2 is the green of "ok"
    out: list[Any] = []
    for label in labels:
        if label == "ok":
            out.append(OUTCOME_COLOURS["ok"])
            continue
        outcome, _, code = label.partition(": ")
        names = data.ops.error_names
        pair = pairs[(names.index(code) + 1 if code in names else 0) % len(pairs)]
        out.append(cmap(pair * 2 + (0 if outcome == "fail" else 1)))
    return out


def plot_throughput(data: RunData) -> Figure:
    fig, (top, bottom) = _figure(rows=2, height=3.2)
    ops = data.ops
    edges = _edges(data.end_s)
    width = edges[1] - edges[0]
    top.set_title(f"Throughput (completions/s, {width:g} s bins) and txn abort rate")
    top.set_ylabel("ops/s")
    bottom.set_ylabel("txn non-ok fraction")
    if len(ops) == 0:
        _empty(top, "no client ops in the history")
    else:
        labels, rows = _stack_by_code(data, ops.outcome != 3, edges)
        top.stackplot(
            edges[:-1],
            *[r / width for r in rows],
            labels=labels,
            colors=_code_colours(labels, data),
            step="post",
        )
    if "txn" in ops.f_names:
        sel = (ops.f == ops.f_names.index("txn")) & (ops.outcome != 3)
        labels, rows = _stack_by_code(data, sel, edges)
        total = np.maximum(sum(rows), 1) if rows else np.ones(len(edges) - 1)
        bad = [(lab, r / total) for lab, r in zip(labels, rows, strict=True) if lab != "ok"]
        if bad:
            bottom.stackplot(
                edges[:-1],
                *[r for _, r in bad],
                labels=[lab for lab, _ in bad],
                colors=_code_colours([lab for lab, _ in bad], data),
                step="post",
            )
        else:
            _empty(bottom, "no txn aborted")
        bottom.set_ylim(0, 1)
    else:
        _empty(bottom, "no txn ops in the history")
    _decorate(top, data)
    _decorate(bottom, data)
    return fig


def _by_node(samples: Samples) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    if not samples.node:
        return {}
    nodes = np.asarray(samples.node)
    xs, ys = np.asarray(samples.time_s), np.asarray(samples.value)
    return {str(n): (xs[nodes == n], ys[nodes == n]) for n in sorted(set(samples.node))}


def plot_schema_versions(data: RunData) -> Figure:
    fig, (top, bottom) = _figure(rows=2, height=3.4)
    top.set_title("Catalog version per node against the authoritative catalog")
    top.set_ylabel("catalog version")
    acts = [a for a in data.activations if a.time_s is not None]
    if acts:
        # versions activated during setup (before 0) are where the line starts
        before = [a.catalog_version for a in acts if (a.time_s or 0.0) <= 0.0]
        later = [a for a in acts if (a.time_s or 0.0) > 0.0]
        xs = [0.0] + [a.time_s for a in later if a.time_s is not None] + [max(data.end_s, 1.0)]
        ys = [before[-1] if before else 1] + [a.catalog_version for a in later]
        ys.append(ys[-1])
        top.step(xs, ys, where="post", color="black", linewidth=1.6, label="authoritative")
    markers = "os^Dv<>px*"
    probes = _by_node(data.probe_versions)
    status = _by_node(data.status_versions)
    for i, (node, (x, y)) in enumerate(probes.items()):
        top.scatter(x, y, s=9, marker=markers[i % len(markers)], label=f"{node} (probe)", alpha=0.7)
    for node, (x, y) in status.items():
        top.plot(x, y, drawstyle="steps-post", linewidth=0.9, label=f"{node} (applied)")
    wrong = [
        (t, v)
        for t, v, a in zip(
            data.probe_versions.time_s,
            data.probe_versions.value,
            data.probe_authoritative.value,
            strict=True,
        )
        if not math.isnan(a) and a != v
    ]
    if wrong:
        top.scatter(
            [t for t, _ in wrong],
            [v for _, v in wrong],
            s=60,
            facecolors="none",
            edgecolors="#b30000",
            linewidths=1.2,
            label="answer != cat(ts)",
        )
    top.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not (acts or probes or status):
        _empty(top, "no catalog.jsonl, probe answers or status samples")
    bottom.set_title("Op schema version minus the authoritative tsv(t, op_ts), by primary")
    bottom.set_ylabel("version skew")
    skew = _by_node(data.op_version_skew)
    for i, (node, (x, y)) in enumerate(skew.items()):
        cap = MAX_SCATTER_OK // max(1, len(skew))
        if len(x) > cap:
            keep = np.flatnonzero(y != 0)
            step = np.arange(0, len(x), math.ceil(len(x) / cap))
            idx = np.union1d(keep, step)
            x, y = x[idx], y[idx]
        bottom.scatter(
            x,
            y + (i - (len(skew) - 1) / 2) * 0.08,
            s=6,
            marker=markers[i % len(markers)],
            label=node,
            alpha=0.6,
            rasterized=True,
        )
    if not skew:
        _empty(bottom, "no txn op reported an op_ts and schema_version")
    bottom.axhline(0, color="black", linewidth=0.8)
    low, high = bottom.get_ylim()
    bottom.set_ylim(min(low, -1.5), max(high, 1.5))
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    _decorate(top, data)
    _decorate(bottom, data)
    return fig


def plot_clock(data: RunData) -> Figure:
    fig, (top, bottom) = _figure(rows=2, height=3.2)
    if data.monitor.lag_ms.node:
        top.set_title(f"Safe-time lag per node ({data.monitor.samples} monitor samples)")
    else:
        top.set_title("Safe-time lag per node (HLC now - safe time, at nemesis events)")
    top.set_ylabel("lag (ms)")
    lag = _by_node(data.safe_time_lag_ms)
    for node, (x, y) in lag.items():
        top.plot(x, y, marker=".", linewidth=0.9, markersize=3, label=node)
    if not lag:
        _empty(top, "no status samples with safe_ts in the history")
    bottom.set_title("Measured clock offset per node")
    bottom.set_ylabel("offset (s)")
    offs = _by_node(data.clock_offsets_s)
    for node, (x, y) in offs.items():
        order = np.argsort(x, kind="stable")
        bottom.plot(x[order], y[order], marker="o", markersize=3, linewidth=0.9, label=node)
    if not offs:
        _empty(bottom, "no clock nemesis offsets or status samples recorded")
    bottom.axhline(0, color="black", linewidth=0.6)
    cfg = data.run.get("config") or {}
    cs = cfg.get("max_clock_skew_ms")
    if isinstance(cs, int | float) and offs:
        for sign in (1, -1):
            bottom.axhline(sign * cs / 1000.0, color="#b30000", linestyle="--", linewidth=0.7)
    _decorate(top, data)
    _decorate(bottom, data)
    return fig


def plot_ddl_latency(data: RunData) -> Figure:
    fig, (ax,) = _figure(height=3.8)
    ax.set_title("DDL latency against its floor DD + CSmax")
    ax.set_ylabel("DDL latency (ms)")
    if not data.ddl_time_s:
        _empty(ax, "no DDL in the history")
    else:
        t = np.asarray(data.ddl_time_s)
        lat = np.asarray(data.ddl_latency_ms)
        outcome = np.asarray(data.ddl_outcome)
        kinds = np.asarray(data.ddl_kind)
        styles = kind_styles(set(data.ddl_kind))
        for kind, (colour, marker) in styles.items():
            for name in ("ok", "fail", "info"):
                sel = (kinds == kind) & (outcome == name)
                if not np.any(sel):
                    continue
                # ok filled, fail hollow with a red edge, info hollow in the kind's colour
                ax.scatter(
                    t[sel],
                    lat[sel],
                    marker=marker,
                    s=30,
                    facecolors=colour if name == "ok" else "none",
                    edgecolors=OUTCOME_COLOURS["fail"] if name == "fail" else colour,
                    linewidths=1.2,
                    alpha=0.85,
                    label=kind if name == "ok" else f"{kind} ({name})",
                )
    floor = data.ddl_floor_ms
    if floor is not None:
        ax.axhline(floor, color="black", linewidth=1.0, label=f"floor DD + CSmax = {floor:g} ms")
    _decorate(ax, data)
    return fig


def plot_anomalies(data: RunData) -> Figure:
    fig, (ax,) = _figure(height=3.4)
    anomalies = list((data.results or {}).get("anomalies") or [])
    valid = (data.results or {}).get("valid", "not analyzed")
    verdict = {True: "valid", False: "invalid"}.get(valid, str(valid))  # type: ignore[call-overload]
    ax.set_title(f"Anomalies on the timeline (verdict: {verdict})")
    classes = sorted({str(a.get("class")) for a in anomalies})
    for number, anomaly in enumerate(anomalies, start=1):
        times = sorted(
            data.event_time_s[i] for i in anomaly.get("events") or [] if i in data.event_time_s
        )
        if not times:
            continue
        y = classes.index(str(anomaly.get("class")))
        ax.plot([times[0], times[-1]], [y, y], color="#b30000", linewidth=2.5, alpha=0.6)
        ax.scatter(times, [y] * len(times), color="#b30000", s=30, zorder=3)
        ax.annotate(f"#{number}", (times[0], y), textcoords="offset points", xytext=(2, 6))
    if classes:
        ax.set_yticks(range(len(classes)), classes)
        ax.set_ylim(-0.7, len(classes) - 0.3)
    else:
        ax.set_yticks([])
        _empty(ax, "no anomaly found" if valid is True else f"no anomaly ({verdict})")
    _decorate(ax, data)
    return fig


PLOTS: tuple[tuple[str, str, Callable[[RunData], Figure]], ...] = (
    ("latency-raw", "Latency of every op", plot_latency_raw),
    ("latency-quantiles", "Latency quantiles", plot_latency_quantiles),
    ("throughput", "Throughput and abort rate by error code", plot_throughput),
    (
        "schema-versions",
        "Schema version per node vs the authoritative catalog",
        plot_schema_versions,
    ),
    ("clock", "Safe-time lag and clock offsets", plot_clock),
    ("ddl-latency", "DDL latency vs DD + CSmax", plot_ddl_latency),
    ("anomalies", "Anomalies on the timeline", plot_anomalies),
)


def _rasterize_dense(fig: Figure, points: int = 2_000) -> None:
    """Dense point clouds become one embedded image in the SVG; axes and text stay vector."""
    for ax in fig.axes:
        for line in ax.lines:
            if np.size(line.get_xdata()) > points:
                line.set_rasterized(True)
        for coll in ax.collections:
            offsets = coll.get_offsets()
            if offsets is not None and np.shape(offsets)[0] > points:
                coll.set_rasterized(True)


def render_plots(data: RunData, out_dir: Path, dpi: int = 90) -> list[PlotFile]:
    """Write every plot as PNG and SVG into out_dir; returns them in report order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for name, title, build in PLOTS:
        fig = build(data)
        try:
            _rasterize_dense(fig)
            fig.tight_layout()
            png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
            fig.savefig(png, dpi=dpi)
            fig.savefig(svg)
        finally:
            plt.close(fig)
        files.append(PlotFile(name, title, png, svg))
    return files
