"""The self-contained report.html of one run: verdict, anomalies, plots, op timeline, config.

Everything the page needs is inside it (CSS, JS, plots as base64 PNG, ops as embedded JSON), so it
works from a file:// URL, from `schemachaos serve`, or attached to a CI job, with no fetches. The
page is templates/report.html through reports.templating (autoescaped); this module only
gathers what it shows, as plain data.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reports.anomaly_pictures import AnomalyPicture, anomaly_pictures
from reports.expectation import allow_of, expect_of, judge
from reports.plots import PlotFile, nemesis_colours
from reports.rundata import OUTCOMES, RunData
from reports.stats_tables import stats_tables
from reports.templating import render

MAX_EMBEDDED_OPS = 120_000  # above this the timeline embeds a sample plus every non-ok op
MAX_WITNESS_EVENTS = 2_000
MAX_ANOMALY_ROWS = 1_000
MAX_NEMESIS_ROWS = 2_000
MAX_WITNESS_LINKS = 50  # per anomaly row; the rest are counted
RUN_KEYS = (
    "test",
    "seed",
    "backend",
    "target",
    "clock",
    "nodes",
    "voters",
    "learners",
    "harness_version",
)


def verdict_of(results: Mapping[str, Any] | None) -> tuple[str, str]:
    """(css class, headline) of a verdict; shared with `serve` so both read the same."""
    if results is None:
        return "unknown", "NOT ANALYZED"
    valid = results.get("valid")
    anomalies = results.get("anomalies") or []
    if valid is True:
        return "valid", "VALID: no anomaly found"
    if valid is False:
        classes = Counter(str(a.get("class")) for a in anomalies)
        listed = ", ".join(f"{c} ×{n}" for c, n in sorted(classes.items()))
        return (
            "invalid",
            f"INVALID: {len(anomalies)} anomal{'y' if len(anomalies) == 1 else 'ies'}"
            + (f" ({listed})" if listed else ""),
        )
    return "unknown", "UNKNOWN: the run could not be judged"


@dataclass(frozen=True)
class Banner:
    """The report's header: the verdict held against the scenario's `expect`, as --gate is."""

    css_class: str  # valid | invalid | unknown | expected (anomalies found, all expected)
    headline: str
    gate: str  # pass | fail | unknown
    detail: str  # one line: what was expected and what was found


def banner_of(
    results: Mapping[str, Any] | None, expect: Sequence[str], allow: Sequence[str] = ()
) -> Banner:
    """The header a person sees and the exit code `run --gate` gives agree: a toggle run that
    found exactly the classes it expects (and any it allows) is a pass, even though its
    verdict is invalid."""
    verdict_class, verdict_text = verdict_of(results)
    verdict = judge(results, expect, allow)
    gate = {"matched": "pass", "mismatched": "fail", "unknown": "unknown"}[verdict.status]
    wanted = ", ".join(verdict.expect) or "a valid run (no anomaly)"
    detail = f"gate: {gate} · the scenario expects {wanted} · {verdict.describe()}"
    if (not verdict.expect and not verdict.allowed) or verdict.status == "unknown":
        return Banner(verdict_class, verdict_text, gate, detail)
    if verdict.passed:
        return Banner("expected", f"AS EXPECTED: {verdict_text}", gate, detail)
    return Banner("invalid", f"NOT AS EXPECTED: {verdict.describe()}", gate, detail)


def _anomalies(results: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for number, a in enumerate(((results or {}).get("anomalies") or [])[:MAX_ANOMALY_ROWS], 1):
        events = [i for i in a.get("events") or [] if isinstance(i, int)]
        rows.append(
            {
                "number": number,
                "cls": str(a.get("class")),
                "nodes": ", ".join(str(n) for n in a.get("nodes") or []),
                "explanation": str(a.get("explanation", "")),
                "events": events[:MAX_WITNESS_LINKS],
                "more_events": max(0, len(a.get("events") or []) - MAX_WITNESS_LINKS),
            }
        )
    return rows


def _plots(plots: Sequence[PlotFile], page_dir: Path) -> list[dict[str, str]]:
    """Each plot, linked relative to the page (which may be written outside the run)."""
    return [
        {
            "name": p.name,
            "title": p.title,
            "svg": p.svg.relative_to(page_dir).as_posix(),
            "png": p.png.relative_to(page_dir).as_posix(),
            "data": base64.b64encode(p.png.read_bytes()).decode("ascii"),
        }
        for p in plots
    ]


def _config_rows(data: RunData) -> list[tuple[str, str]]:
    """run.json's main fields and config as (key, JSON text) rows, then the start and sizes."""
    run = data.run
    rows: list[tuple[str, Any]] = [(k, run[k]) for k in RUN_KEYS if k in run]
    rows += [(f"config.{k}", v) for k, v in sorted((run.get("config") or {}).items())]
    if isinstance(run.get("start_wall_ms"), int):
        start = dt.datetime.fromtimestamp(run["start_wall_ms"] / 1000, tz=dt.UTC)
        rows.append(("start (UTC)", start.isoformat(timespec="seconds")))
    rows.append(("events in history.jsonl", data.event_count))
    rows.append(("client ops", len(data.ops)))
    return [(k, json.dumps(v, default=str)) for k, v in rows]


def _duration(data: RunData) -> str:
    """The workload's own length, the one a person asked for with --time-limit; setup before
    it and final reads after it are said, not added in."""
    text = f"workload {data.workload_end_s:.1f} s"
    extra = []
    if data.origin_s >= 0.05:
        extra.append(f"setup {data.origin_s:.1f} s before it")
    if data.end_s - data.workload_end_s >= 0.05:
        extra.append(f"healing and final reads {data.end_s - data.workload_end_s:.1f} s after")
    return text + (f" ({', '.join(extra)})" if extra else "")


def _harness_line(run: Mapping[str, Any]) -> str:
    prov = run.get("provenance")
    if not isinstance(prov, Mapping):  # a run from before provenance, or a foreign one
        return f"harness {run.get('harness_version') or '?'}"
    version = prov.get("harness_version") or run.get("harness_version") or "?"
    commit = str(prov.get("git_commit") or "unknown")
    commit = commit[:12] + (" (dirty)" if prov.get("git_dirty") else "")
    return f"harness {version} at {commit}"


def _tree_state(dirty: Any) -> str:
    return "dirty" if dirty is True else "clean" if dirty is False else "unknown"


def _provenance(run: Mapping[str, Any]) -> list[tuple[str, Any]] | None:
    """run.json's provenance as rows: what a stored run was made and judged with."""
    prov = run.get("provenance")
    if not isinstance(prov, Mapping):
        return None
    target = prov.get("target") or {}
    images = prov.get("images") or {}
    return [
        ("harness", prov.get("harness_version")),
        ("git commit", prov.get("git_commit")),
        ("working tree", _tree_state(prov.get("git_dirty"))),
        ("target", f"{target.get('name', '?')} ({target.get('version', 'unknown')})"),
        *((f"image {k}", v) for k, v in sorted(images.items())),
        ("Python", prov.get("python")),
        ("PySpark", prov.get("pyspark")),
        ("Java", prov.get("java")),
    ]


def _unavailability(stats: Mapping[str, Any], origin_s: float) -> list[dict[str, str]]:
    """The checker's windows (on the history's clock) on the workload's clock, as text."""
    rows = []
    for u in (stats.get("unavailability") or [])[:MAX_NEMESIS_ROWS]:
        if not isinstance(u, Mapping):
            continue
        times = [u.get(k) for k in ("from_s", "to_s", "duration_s")]
        numbers = [float(t) for t in times if isinstance(t, int | float)]
        if len(numbers) != 3:
            continue
        start, end, took = numbers
        rows.append({"node": str(u.get("node")), "from_s": f"{start - origin_s:.3f}",
                     "to_s": f"{end - origin_s:.3f}", "duration_s": f"{took:.3f}"})  # fmt: skip
    return rows


def _ops_payload(data: RunData, max_ops: int) -> dict[str, Any]:
    ops = data.ops
    total = len(ops)
    witness = set(data.witness_events)
    if total > max_ops:
        keep = ops.outcome != 0
        if witness:
            w = np.fromiter(witness, dtype=np.int64)
            keep |= np.isin(ops.invoke_index, w) | np.isin(ops.complete_index, w)
        rest = np.flatnonzero(~keep)
        room = max(0, max_ops - int(keep.sum()))
        if room and len(rest):
            keep[rest[:: max(1, -(-len(rest) // room))]] = True
        pos = np.flatnonzero(keep)
    else:
        pos = np.arange(total)
    witness_events = {str(i): data.witness_events[i] for i in sorted(witness)[:MAX_WITNESS_EVENTS]}
    return {
        "total_ops": total,
        "sampled": bool(len(pos) < total),
        "end_s": data.end_s,
        "outcomes": list(OUTCOMES),
        "f_names": list(ops.f_names),
        "node_names": list(ops.node_names),
        "error_names": list(ops.error_names),
        "inv": ops.invoke_index[pos].tolist(),
        "cmp": ops.complete_index[pos].tolist(),
        "proc": ops.process[pos].tolist(),
        "f": ops.f[pos].tolist(),
        "out": ops.outcome[pos].tolist(),
        "node": ops.node[pos].tolist(),
        "err": ops.error[pos].tolist(),
        "t": np.round(ops.start_s[pos] * 1000).astype(np.int64).tolist(),
        "lat": np.round(ops.latency_ms[pos], 2).tolist(),
        "sum": [ops.summary[i] for i in pos.tolist()],
        "nemesis": [{"kind": w.kind, "start": w.start_s, "end": w.end_s} for w in data.windows],
        "nemesis_colours": nemesis_colours({w.kind for w in data.windows}),
        "activations": [
            {"v": a.catalog_version, "t": a.time_s, "ddl": a.ddl} for a in data.activations
        ],
        "witness": witness_events,
        "witness_time": {str(i): t for i, t in data.event_time_s.items()},
    }


def page_title(data: RunData) -> str:
    """The test's name as every page of one run shows it."""
    return f"schemachaos · {data.run.get('test', data.run_dir.name)}"


def build_report_html(
    data: RunData,
    plots: Sequence[PlotFile],
    repro_command: str,
    max_ops: int = MAX_EMBEDDED_OPS,
    pictures: Sequence[AnomalyPicture] | None = None,
    timeline_href: str = "timeline.html",
    page_dir: Path | None = None,
) -> str:
    """The page; `pictures` are the anomalies' SVGs (drawn here when not given); `page_dir`
    is where it is written (the run directory unless `report --out` names another)."""
    results = data.results or {}
    run = data.run
    banner = banner_of(data.results, expect_of(run), allow_of(run))
    if pictures is None:
        pictures = anomaly_pictures(data)
    subtitle = (
        f"test {run.get('test', '?')} · seed {run.get('seed', '?')} · "
        f"{run.get('backend', '?')} backend · {data.event_count} events · "
        f"{len(data.ops)} ops · {_duration(data)} · "
        f"toggles {', '.join((run.get('config') or {}).get('toggles') or []) or 'none'} · "
        f"{_harness_line(run)}"
    )
    anomalies = results.get("anomalies") or []
    return render(
        "report.html",
        title=f"{page_title(data)} · {banner.headline}",
        pictures=pictures,
        timeline_href=timeline_href,
        banner=banner,
        valid_json=json.dumps(results.get("valid") if data.results is not None else None),
        subtitle=subtitle,
        errors=[str(e) for e in results.get("errors") or []],
        anomalies=_anomalies(data.results),
        more_anomalies=max(0, len(anomalies) - MAX_ANOMALY_ROWS),
        not_applicable=[str(c) for c in results.get("not_applicable") or []],
        plots=_plots(plots, data.run_dir if page_dir is None else page_dir),
        windows=data.windows,
        nemesis_events=data.nemesis_events[:MAX_NEMESIS_ROWS],
        planned=run.get("nemesis"),
        config_rows=_config_rows(data),
        provenance=_provenance(run),
        workload=run.get("workload"),
        run=dict(run),
        repro=repro_command,
        stats_tables=stats_tables(data),
        unavailability=_unavailability(results.get("stats") or {}, data.origin_s),
        ops=_ops_payload(data, max_ops),
    )
