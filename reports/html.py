"""The self-contained report.html of one run: verdict, anomalies, plots, op timeline, config.

Everything the page needs is inside it (CSS, JS, plots as base64 PNG, ops as embedded JSON), so it
works from a file:// URL, from `schemachaos serve`, or attached to a CI job, with no fetches.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from reports.plots import PlotFile, nemesis_colours
from reports.rundata import OUTCOMES, RunData

MAX_EMBEDDED_OPS = 120_000  # above this the timeline embeds a sample plus every non-ok op
MAX_WITNESS_EVENTS = 2_000
MAX_ANOMALY_ROWS = 1_000
MAX_NEMESIS_ROWS = 2_000
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


def _template(name: str) -> str:
    return resources.files("reports").joinpath("templates", name).read_text(encoding="utf-8")


def _fill(template: str, values: Mapping[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _json_block(value: Any, limit: int = 200_000) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > limit:
        text = text[:limit] + "\n... (truncated)"
    return f"<pre>{_e(text)}</pre>"


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


def _anomaly_table(results: Mapping[str, Any] | None) -> str:
    anomalies = list((results or {}).get("anomalies") or [])
    if not anomalies:
        return '<p id="no-anomalies">No anomaly was found.</p>'
    rows = []
    for number, a in enumerate(anomalies[:MAX_ANOMALY_ROWS], start=1):
        events = a.get("events") or []
        links = " ".join(
            f'<a class="ev" href="#ev-{int(i)}" data-ev="{int(i)}">{int(i)}</a>'
            for i in events[:50]
            if isinstance(i, int)
        )
        if len(events) > 50:
            links += f" <span class='note'>+{len(events) - 50} more</span>"
        rows.append(
            f'<tr class="anomaly" id="anomaly-{number}"><td class="num">{number}</td>'
            f'<td class="cls">{_e(a.get("class"))}</td>'
            f"<td>{_e(', '.join(str(n) for n in a.get('nodes') or []))}</td>"
            f"<td>{_e(a.get('explanation', ''))}</td><td>{links}</td></tr>"
        )
    more = ""
    if len(anomalies) > MAX_ANOMALY_ROWS:
        more = f"<p class='note'>{len(anomalies) - MAX_ANOMALY_ROWS} more in results.json.</p>"
    return (
        '<table id="anomaly-table"><thead><tr><th>#</th><th>class</th><th>nodes</th>'
        "<th>explanation</th><th>witness events</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + more
    )


def _plots(plots: Sequence[PlotFile], run_dir: Path) -> str:
    out = []
    for p in plots:
        data = base64.b64encode(p.png.read_bytes()).decode("ascii")
        svg = p.svg.relative_to(run_dir).as_posix()
        png = p.png.relative_to(run_dir).as_posix()
        out.append(
            f'<figure class="plot" id="plot-{_e(p.name)}"><figcaption>{_e(p.title)}'
            f'<a href="{_e(svg)}">SVG</a><a href="{_e(png)}">PNG</a></figcaption>'
            f'<img alt="{_e(p.title)}" src="data:image/png;base64,{data}"></figure>'
        )
    return "\n".join(out)


def _nemesis(data: RunData) -> str:
    parts = []
    if data.windows:
        rows = "".join(
            f"<tr><td>{_e(w.kind)}</td><td class='num'>{w.start_s:.3f}</td>"
            f"<td class='num'>{w.end_s:.3f}</td><td class='num'>{w.end_s - w.start_s:.3f}</td>"
            f"<td><a class='ev' href='#ev-{w.start_index}' data-ev='{w.start_index}'>"
            f"{w.start_index}</a></td></tr>"
            for w in data.windows
        )
        parts.append(
            "<h3>Fault windows</h3><table id='nemesis-windows'><thead><tr><th>kind</th>"
            "<th>start (s)</th><th>end (s)</th><th>duration (s)</th><th>event</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if data.nemesis_events:
        rows = "".join(
            f"<tr id='nem-{int(ev['index'])}'><td class='num'>{ev['index']}</td>"
            f"<td class='num'>{ev['time_s']:.3f}</td><td>{_e(ev['f'])}</td>"
            f"<td><code>{_e(json.dumps(ev['value'], sort_keys=True, default=str)[:400])}</code>"
            "</td></tr>"
            for ev in data.nemesis_events[:MAX_NEMESIS_ROWS]
        )
        parts.append(
            "<h3>Nemesis events</h3><table id='nemesis-events'><thead><tr><th>event</th>"
            "<th>time (s)</th><th>f</th><th>value</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    else:
        parts.append("<p>No nemesis event in the history.</p>")
    planned = data.run.get("nemesis")
    if planned:
        parts.append(
            "<details><summary>Planned schedule (run.json)</summary>"
            f"{_json_block(planned)}</details>"
        )
    return "\n".join(parts)


def _config(data: RunData) -> str:
    run = data.run
    rows = [(k, run[k]) for k in RUN_KEYS if k in run]
    cfg = run.get("config") or {}
    rows += [(f"config.{k}", v) for k, v in sorted(cfg.items())]
    if isinstance(run.get("start_wall_ms"), int):
        start = dt.datetime.fromtimestamp(run["start_wall_ms"] / 1000, tz=dt.UTC)
        rows.append(("start (UTC)", start.isoformat(timespec="seconds")))
    rows.append(("events in history.jsonl", data.event_count))
    rows.append(("client ops", len(data.ops)))
    body = "".join(
        f"<tr><td>{_e(k)}</td><td><code>{_e(json.dumps(v, default=str))}</code></td></tr>"
        for k, v in rows
    )
    workload = run.get("workload")
    extra = (
        f"<details><summary>Workload</summary>{_json_block(workload)}</details>" if workload else ""
    )
    return (
        f"<table class='kv' id='config-table'>{body}</table>{extra}"
        f"<details><summary>run.json</summary>{_json_block(dict(run))}</details>"
    )


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


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element (no `</script>` can close it early)."""
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")


def build_report_html(
    data: RunData,
    plots: Sequence[PlotFile],
    repro_command: str,
    max_ops: int = MAX_EMBEDDED_OPS,
) -> str:
    results = data.results
    verdict_class, verdict_text = verdict_of(results)
    run = data.run
    subtitle = (
        f"test {run.get('test', '?')} · seed {run.get('seed', '?')} · "
        f"{run.get('backend', '?')} backend · {data.event_count} events · "
        f"{len(data.ops)} ops · {data.end_s:.1f} s · "
        f"toggles {', '.join((run.get('config') or {}).get('toggles') or []) or 'none'}"
    )
    errors = [str(e) for e in (results or {}).get("errors") or []]
    not_applicable = [str(c) for c in (results or {}).get("not_applicable") or []]
    error_html = ""
    if errors:
        items = "".join(f"<li>{_e(e)}</li>" for e in errors)
        error_html = (
            "<section id='errors'><h2>Why the verdict is unknown</h2>"
            f"<ul class='errors'>{items}</ul></section>"
        )
    anomalies = _anomaly_table(results)
    if not_applicable:
        anomalies += f"<p class='note'>Not applicable here: {_e(', '.join(not_applicable))}.</p>"
    valid = (results or {}).get("valid")
    values = {
        "title": _e(f"schemachaos · {run.get('test', data.run_dir.name)} · {verdict_text}"),
        "css": _template("report.css"),
        "verdict_class": verdict_class,
        "verdict_value": _e(json.dumps(valid)),
        "verdict_text": _e(verdict_text),
        "subtitle": _e(subtitle),
        "errors": error_html,
        "anomalies": anomalies,
        "plots": _plots(plots, data.run_dir),
        "nemesis": _nemesis(data),
        "config": _config(data),
        "repro": _e(repro_command),
        "stats": _json_block((results or {}).get("stats") or {}),
        "ops_json": _script_json(_ops_payload(data, max_ops)),
        "timeline_js": _template("timeline.js"),
    }
    return _fill(_template("report.html"), values)
