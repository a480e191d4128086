"""timeline.html: Jepsen's per-process timeline, one lane per process, drawn on a canvas.

A lane holds one process at a time: a process that replaces a crashed one (after an `info`)
continues in a lane that is free by then, labelled with its first process and how many follow.

Each op is a bar from its invoke to its completion coloured by outcome; fault windows are bands
across every lane and labelled bars in the nemesis lane; each DDL activation is a line across
all lanes, so a transaction straddling one is a bar the line crosses. The page is one file with
its data inline (no fetch): columns of integers, so 10^5 ops stay a few MB and draw in one frame.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

import numpy as np

from reports.plots import ACTIVATION_COLOUR, OUTCOME_COLOURS, nemesis_colours
from reports.rundata import OUTCOMES, RunData
from reports.templating import render

SUMMARY_CHARS = 80  # a hover shows the op; the report's table has the whole of it


def _lanes(process: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Lane names (nemesis first) and each op's lane. A process replaced after an `info` gets
    a new number; its successor takes over the lane of one that has finished (lowest free
    lane first), as Jepsen draws a worker thread, so a run keeps about `concurrency` lanes
    instead of one more per timeout."""
    if len(process) == 0:
        return ["nemesis"], np.zeros(0, dtype=np.int64)
    procs, inverse = np.unique(process, return_inverse=True)
    first = np.full(len(procs), np.inf)
    last = np.full(len(procs), -np.inf)
    np.minimum.at(first, inverse, start)
    np.maximum.at(last, inverse, end)
    free: list[int] = []  # lanes whose process has finished, as a heap
    busy: list[tuple[float, int]] = []  # (last end, lane) of running processes, as a heap
    lane_of = np.zeros(len(procs), dtype=np.int64)
    members: list[list[int]] = []
    for p in np.argsort(first, kind="stable").tolist():
        while busy and busy[0][0] < first[p]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(members)
        if lane == len(members):
            members.append([])
        members[lane].append(int(procs[p]))
        lane_of[p] = lane + 1
        heapq.heappush(busy, (float(last[p]), lane))
    names = ["nemesis"] + [f"p{m[0]}" + (f" +{len(m) - 1}" if len(m) > 1 else "") for m in members]
    return names, lane_of[inverse]


def _ms(seconds: np.ndarray) -> list[int]:
    return np.round(seconds * 1000.0).astype(np.int64).tolist()


def timeline_payload(data: RunData) -> dict[str, Any]:
    """The page's data: ops as parallel columns sorted by invoke time (ms on the workload's
    clock), plus fault windows, activations and DDL acknowledgements."""
    ops = data.ops
    order = np.argsort(ops.start_s, kind="stable")
    start = ops.start_s[order]
    pending = ops.outcome[order] == OUTCOMES.index("pending")
    end = start + ops.latency_ms[order] / 1000.0
    end[pending] = max(data.end_s, float(end.max()) if len(end) else 0.0)
    lane_names, lanes = _lanes(ops.process[order], start, end)
    witness = set(data.witness_events)
    is_witness = np.isin(ops.invoke_index[order], list(witness)) | np.isin(
        ops.complete_index[order], list(witness)
    )
    acks = [
        {"t": round((t + lat / 1000.0) * 1000.0), "kind": kind}
        for t, lat, kind, outcome in zip(
            data.ddl_time_s, data.ddl_latency_ms, data.ddl_kind, data.ddl_outcome, strict=True
        )
        if outcome == "ok"
    ]
    return {
        "lanes": lane_names,
        "outcomes": list(OUTCOMES),
        "outcome_colours": [OUTCOME_COLOURS[o] for o in OUTCOMES],
        "f_names": list(ops.f_names),
        "node_names": list(ops.node_names),
        "error_names": list(ops.error_names),
        "start": _ms(start),
        "end": _ms(end),
        "lane": lanes.tolist(),
        "proc": ops.process[order].tolist(),
        "out": ops.outcome[order].tolist(),
        "f": ops.f[order].tolist(),
        "node": ops.node[order].tolist(),
        "err": ops.error[order].tolist(),
        "inv": ops.invoke_index[order].tolist(),
        "witness": np.flatnonzero(is_witness).tolist(),
        "sum": [ops.summary[i][:SUMMARY_CHARS] for i in order.tolist()],
        "end_ms": round(max(data.end_s, 0.001) * 1000.0),
        "faults": [
            {"kind": w.kind, "start": round(w.start_s * 1000), "end": round(w.end_s * 1000)}
            for w in data.windows
        ],
        "fault_colours": nemesis_colours({w.kind for w in data.windows}),
        "activations": [
            {"v": a.catalog_version, "t": round(a.time_s * 1000), "ddl": a.ddl[:SUMMARY_CHARS]}
            for a in data.activations
            if a.time_s is not None
        ],
        "activation_colour": ACTIVATION_COLOUR,
        "acks": acks,
    }


def build_timeline_html(data: RunData, title: str, report_href: str = "report.html") -> str:
    payload: Mapping[str, Any] = timeline_payload(data)
    return render(
        "timeline.html",
        title=title,
        report_href=report_href,
        lane_count=len(payload["lanes"]),
        op_count=len(data.ops),
        payload=payload,
    )
