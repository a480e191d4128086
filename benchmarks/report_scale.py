"""Report generation time for synthetic histories of 10^4, 10^5 and 10^6 events.

Writes a seeded synthetic run directory per size (txns with op schema versions, probes, DDLs
with catalog.jsonl, nemesis windows, status samples, a results.json with anomalies), then
times each phase of `render_report` (read, plots, HTML with the anomaly pictures, the
per-process timeline.html, JUnit); the history carries monitor samples every 250 ms.
Target: <= 30 s at 10^6. "cpu s" is the process's CPU time, the fairer number on a shared
machine. With --browser, also times how long headless Chromium takes to load report.html (its
op table ready) and timeline.html (first frame drawn).

    .venv/bin/python benchmarks/report_scale.py [--sizes 10000,100000,1000000] [--browser]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reports.anomaly_pictures import anomaly_pictures
from reports.html import build_report_html, page_title
from reports.junit import write_junit
from reports.plots import render_plots
from reports.process_timeline import build_timeline_html
from reports.render import repro_command
from reports.rundata import load_run

START_WALL_MS = 1_760_000_000_000
NODES = ("n1", "n2", "n3", "n4", "n5")
EVENTS_PER_S = 1_000
DD_MS, CS_MS = 500, 500
MONITOR_MS = 250.0


def hlc(ms: float) -> int:
    return (START_WALL_MS + int(ms)) << 16


def monitor_sample(rng: random.Random, ms: float, tsv: Any) -> dict[str, Any]:
    """Every node's admin view at `ms`: learners trail the voters' safe time."""
    value: dict[str, Any] = {}
    for i, node in enumerate(NODES):
        lag = rng.uniform(80, 160) if i < 3 else rng.uniform(200, 900)
        safe_ms = ms - lag
        value[node] = {
            "catalog_version": tsv(hlc(safe_ms))[1],
            "safe_ts": hlc(safe_ms),
            "safe_lag_ms": round(lag, 1),
            "role": "leader" if i == 0 else "follower" if i < 3 else "learner",
            "term": 1,
            "commit_index": int(ms // 10),
            "hlc_offset_ms": round(rng.uniform(-2, 2), 2),
        }
    return value


def write_synthetic_run(run_dir: Path, events: int, seed: int = 7) -> dict[str, Any]:
    """A run directory with about `events` history events; returns a few facts about it."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    duration_ms = events / EVENTS_PER_S * 1000
    # catalog: a DDL on t1 every ~2 s
    catalog: list[dict[str, Any]] = [
        {
            "catalog_version": 1,
            "activation_ts": 0,
            "safe_ts": 0,
            "delay_ms": DD_MS,
            "ddl": "",
            "tables": {},
        }
    ]
    ddl_at = []
    ms = 300.0
    version, table_sv = 1, 0
    while ms < duration_ms - 1500:
        version += 1
        table_sv += 1
        stmt = (
            "CREATE TABLE t1 (c1 INT32)"
            if version == 2
            else f"ALTER TABLE t1 ADD COLUMN c{version} INT32"
        )
        catalog.append(
            {
                "catalog_version": version,
                "activation_ts": hlc(ms + DD_MS),
                "safe_ts": hlc(ms),
                "delay_ms": DD_MS,
                "ddl": stmt,
                "tables": {
                    "t1": {"id": 1, "schema_version": table_sv, "columns": [], "indexes": []}
                },
            }
        )
        ddl_at.append((ms, version, stmt))
        ms += rng.uniform(1500, 2500)
    activations = [
        (
            c["activation_ts"],
            c.get("tables", {}).get("t1", {}).get("schema_version"),
            c["catalog_version"],
        )
        for c in catalog
    ]

    def tsv(ts: int) -> tuple[int, int]:
        sv, cv = 1, 1
        for act, s, v in activations:
            if act <= ts:
                sv, cv = s or 1, v
        return sv, cv

    lines: list[str] = []
    index = 0

    def emit(t_ms: float, ev: dict[str, Any]) -> int:
        nonlocal index
        ev = {"index": index, "time": int(t_ms * 1e6), **ev}
        lines.append(json.dumps(ev, separators=(",", ":")))
        index += 1
        return index - 1

    # one merged, time-ordered stream of invoke/complete pairs (completions right after)
    t = 100.0
    step = 1000.0 / EVENTS_PER_S * 2
    next_ddl = 0
    next_proc = 20
    procs = list(range(1, 11))
    windows = []
    w_start = 3000.0
    while w_start < duration_ms - 3000:
        kind = rng.choice(("partition", "clock", "lagging-learner", "kill"))
        windows.append((w_start, w_start + rng.uniform(1000, 4000), kind))
        w_start += rng.uniform(8000, 15000)
    w_i = 0
    open_w: list[tuple[float, float, str]] = []
    witness: list[int] = []
    next_sample = 250.0
    while index < events - 4:
        t += rng.expovariate(1 / step)
        while next_sample <= t:  # the controller's monitor, every 250 ms (history.md)
            emit(next_sample, {"type": "info", "process": "monitor", "f": "sample",
                               "value": monitor_sample(rng, next_sample, tsv)})  # fmt: skip
            next_sample += MONITOR_MS
        while w_i < len(windows) and windows[w_i][0] <= t:
            w = windows[w_i]
            value: dict[str, Any] = {"targets": [rng.choice(NODES)]}
            if w[2] == "clock":
                value["offsets"] = {n: round(rng.uniform(-0.4, 0.4), 3) for n in NODES}
            emit(w[0], {"type": "info", "process": "nemesis", "f": f"start-{w[2]}", "value": value})
            open_w.append(w)
            w_i += 1
        for w in [w for w in open_w if w[1] <= t]:
            emit(w[1], {"type": "info", "process": "nemesis", "f": f"stop-{w[2]}", "value": {}})
            open_w.remove(w)
        if next_ddl < len(ddl_at) and ddl_at[next_ddl][0] <= t:
            at, v, stmt = ddl_at[next_ddl]
            inv = {"stmt": stmt, "table": "t1", "kind": "create_table" if v == 2 else "add_column"}
            emit(t, {"type": "invoke", "process": 0, "f": "ddl", "value": inv})
            lat = DD_MS + CS_MS + rng.uniform(5, 60)
            emit(
                t + lat,
                {
                    "type": "ok",
                    "process": 0,
                    "f": "ddl",
                    "node": "n1",
                    "value": {**inv, "catalog_version": v, "activation_ts": hlc(at + DD_MS)},
                },
            )
            next_ddl += 1
            continue
        node = rng.choice(NODES)
        r = rng.random()
        if r < 0.1:
            p = 15
            i = emit(
                t,
                {
                    "type": "invoke",
                    "process": p,
                    "f": "probe",
                    "value": {"table": None, "ts": None},
                },
            )
            sv, cv = tsv(hlc(t + 1))
            stale = rng.random() < 0.001
            c = emit(
                t + rng.uniform(0.5, 5),
                {
                    "type": "ok",
                    "process": p,
                    "f": "probe",
                    "node": node,
                    "value": {
                        "ts": hlc(t + 1),
                        "catalog_version": cv - 1 if stale else cv,
                        "table_schema_version": None,
                        "columns": None,
                    },
                },
            )
            if stale and len(witness) < 200:
                witness += [i, c]
            continue
        if r < 0.105:
            # admin.status of every node, recorded by the nemesis as one event
            views = {
                n: {
                    "hlc_now": hlc(t),
                    "wall_ms": START_WALL_MS + int(t),
                    "safe_ts": hlc(t - rng.uniform(50, 300)),
                    "catalog_version": tsv(hlc(t))[1],
                }
                for n in NODES
            }
            emit(
                t, {"type": "info", "process": "nemesis", "f": "status", "value": {"views": views}}
            )
            continue
        slot = rng.randrange(len(procs))
        p = procs[slot]
        ops: list[dict[str, Any]] = [
            {"op": rng.choice("rwd"), "table": "t1", "key": rng.randrange(10_000)}
            for _ in range(rng.randint(1, 3))
        ]
        for o in ops:
            if o["op"] == "w":
                o["row"] = {"c1": o["key"]}
        emit(t, {"type": "invoke", "process": p, "f": "txn", "value": {"ops": ops}})
        lat = rng.lognormvariate(2.5, 0.8)
        sv, _ = tsv(hlc(t + 1))
        done = {
            "txn_id": f"{node}-{index}",
            "begin_ts": hlc(t),
            "commit_ts": hlc(t + lat),
            "ops": [
                {**o, "op_ts": hlc(t + 1), "node": node, "schema_version": sv, "result": None}
                for o in ops
            ],
            "tables": {"t1": {"base_ts": hlc(t), "schema_version": sv}},
            "participants": [
                {"node": node, "table": "t1", "partition": 0, "commit_schema_version": sv}
            ],
        }
        u = rng.random()
        if u < 0.03:
            err = {
                "code": rng.choice(("INCOMPATIBLE_SCHEMA", "LOCK_CONFLICT", "TABLE_NOT_FOUND")),
                "message": "aborted",
                "retriable": True,
            }
            emit(
                t + lat,
                {
                    "type": "fail",
                    "process": p,
                    "f": "txn",
                    "node": node,
                    "value": done,
                    "error": err,
                },
            )
        elif u < 0.035:
            err = {"code": "TIMEOUT", "message": "no reply", "retriable": True}
            emit(
                t + lat + 1000,
                {
                    "type": "info",
                    "process": p,
                    "f": "txn",
                    "node": node,
                    "value": {},
                    "error": err,
                },
            )
            procs[slot] = next_proc
            next_proc += 1
        else:
            emit(t + lat, {"type": "ok", "process": p, "f": "txn", "node": node, "value": done})
    (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run_dir / "catalog.jsonl").write_text(
        "".join(json.dumps(c) + "\n" for c in catalog), encoding="utf-8"
    )
    run = {
        "test": f"synthetic-{events}",
        "seed": seed,
        "backend": "local",
        "target": "schemasync",
        "clock": "hlc",
        "nodes": list(NODES),
        "voters": list(NODES[:3]),
        "learners": list(NODES[3:]),
        "config": {
            "delay_duration_ms": DD_MS,
            "max_clock_skew_ms": CS_MS,
            "idle_safe_time_interval_ms": 250,
            "toggles": ["no-safe-time-wait"],
        },
        "nemesis": {"kinds": ["partition", "clock", "lagging-learner", "kill"]},
        "workload": {"name": "synthetic"},
        "start_wall_ms": START_WALL_MS,
        "harness_version": "bench",
    }
    (run_dir / "run.json").write_text(json.dumps(run), encoding="utf-8")
    anomalies = [
        {
            "class": "ap-violation",
            "events": witness[i : i + 2],
            "nodes": ["n4"],
            "explanation": "a probe answered a catalog version older than cat(ts).",
        }
        for i in range(0, len(witness), 2)
    ]
    results = {
        "valid": not anomalies,
        "anomalies": anomalies,
        "not_applicable": [],
        "stats": {},
        "errors": [],
    }
    (run_dir / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return {"events": index, "anomalies": len(anomalies)}


def time_report(run_dir: Path) -> dict[str, float]:
    """The phases of render_report (results.json present, so no analysis), timed."""
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    data = load_run(run_dir)
    t1 = time.perf_counter()
    plots = render_plots(data, run_dir / "plots")
    t2 = time.perf_counter()
    pictures = anomaly_pictures(data)
    page = build_report_html(data, plots, repro_command(run_dir), pictures=pictures)
    (run_dir / "report.html").write_text(page, encoding="utf-8")
    t3 = time.perf_counter()
    timeline = build_timeline_html(data, page_title(data))
    (run_dir / "timeline.html").write_text(timeline, encoding="utf-8")
    t4 = time.perf_counter()
    write_junit(data.results or {}, data.run, run_dir / "junit.xml")
    t5 = time.perf_counter()
    cpu = time.process_time() - cpu0
    return {
        "cpu": cpu,
        "ops": len(data.ops),
        "pictures": len(pictures),
        "read": t1 - t0,
        "plots": t2 - t1,
        "html": t3 - t2,
        "timeline": t4 - t3,
        "junit": t5 - t4,
        "total": t5 - t0,
    }


def time_browser(page: Path, ready: str, frames: str = "[]") -> tuple[float, list[float]]:
    """Seconds until headless Chromium has loaded `page` and `ready` (a JS expression) holds,
    then what `frames` (a JS expression giving an array of ms per frame drawn) returns."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        started = time.perf_counter()
        driver.get(page.resolve().as_uri())
        WebDriverWait(driver, 120).until(lambda d: d.execute_script(f"return {ready}"))
        loaded = time.perf_counter() - started
        return loaded, [float(x) for x in driver.execute_script(f"return {frames}")]
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--browser", action="store_true", help="also time Chromium's load")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run dirs here")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="report-scale-"))
    print(
        f"{'events':>9} {'ops':>8} {'hist MB':>8} {'read s':>7} {'plots s':>8} {'html s':>7}"
        f" {'tl s':>6} {'total s':>8} {'cpu s':>7} {'page MB':>8} {'tl MB':>6} {'vs 30 s':>8}"
        + (
            f" {'browser s':>10} {'tl load s':>10} {'frame ms':>9} {'zoom ms':>8}"
            if args.browser
            else ""
        )
    )
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            run_dir = root / f"run-{size}"
            write_synthetic_run(run_dir, size)
            t = time_report(run_dir)
            hist_mb = (run_dir / "history.jsonl").stat().st_size / 1e6
            page_mb = (run_dir / "report.html").stat().st_size / 1e6
            tl_mb = (run_dir / "timeline.html").stat().st_size / 1e6
            line = (
                f"{size:>9} {int(t['ops']):>8} {hist_mb:>8.1f} {t['read']:>7.2f}"
                f" {t['plots']:>8.2f} {t['html']:>7.2f} {t['timeline']:>6.2f}"
                f" {t['total']:>8.2f} {t['cpu']:>7.2f} {page_mb:>8.1f} {tl_mb:>6.1f}"
                f" {t['total'] / 30:>8.2f}"
            )
            if args.browser:
                report_ready = "document.getElementById('timeline').dataset.ready === '1'"
                line += f" {time_browser(run_dir / 'report.html', report_ready)[0]:>10.2f}"
                timeline_ready = "document.body.dataset.ready === '1'"
                # one redraw of the whole run, then of a 5 s window (zoomed in), in ms
                frames = (
                    "(() => { const ms = () => +document.body.dataset.drawMs;"
                    " document.getElementById('pt-all').click(); const all = ms();"
                    " ptZoomTo(10000, 15000); return [all, ms()]; })()"
                )
                load, (whole, zoomed) = time_browser(
                    run_dir / "timeline.html", timeline_ready, frames
                )
                line += f" {load:>10.2f} {whole:>9.1f} {zoomed:>8.1f}"
            print(line, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
