"""Report generation time for synthetic histories of 10^4, 10^5 and 10^6 events.

Writes a seeded synthetic run directory per size (synthetic.write_synthetic_run: txns with op
schema versions, probes, DDLs with catalog.jsonl, a partition window, monitor samples every
250 ms, a few probes made stale, and a results.json naming those as anomalies), then times
each phase of `render_report` (read, plots, HTML with the anomaly pictures, the per-process
timeline.html, JUnit). Its histories have come from the shared model since 2026-12-07 (three
nodes, one nemesis window, no status views): times before then are of another history.
Target: <= 30 s at 10^6. "cpu s" is the process's CPU time, the fairer number on a shared
machine. With --browser, also times how long headless Chromium takes to load report.html (its
op table ready) and timeline.html (first frame drawn).

    .venv/bin/python benchmarks/report_scale.py [--sizes 10000,100000,1000000] [--browser]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reports.anomaly_pictures import anomaly_pictures
from reports.html import build_report_html, page_title
from reports.junit import write_junit
from reports.plots import render_plots
from reports.process_timeline import build_timeline_html
from reports.render import repro_command
from reports.rundata import load_run
from synthetic import write_synthetic_run

MONITOR_MS = 250
# of the workload's probes at an explicit ts (a twentieth of its events): about 100
# ap-violations at 10^6 events
STALE_PROBE_RATE = 0.002
MAX_ANOMALIES = 100


def write_run(run_dir: Path, events: int, seed: int = 7) -> dict[str, Any]:
    """A synthetic run directory of about `events` events with a results.json naming its stale
    probes as ap-violations, so render_report reads a verdict rather than analyzing (the
    checker finds exactly these: one anomaly a stale probe, witnessed by its answer)."""
    written = write_synthetic_run(
        run_dir, seed, events=events, monitor_ms=MONITOR_MS, stale_probe_rate=STALE_PROBE_RATE
    )
    stale = set(written.stale_probe_processes[:MAX_ANOMALIES])
    answers = []  # the stale probes' ok events: the checker's witness of each
    with (run_dir / "history.jsonl").open(encoding="utf-8") as history:
        for line in history:
            if '"f":"probe"' in line and '"type":"ok"' in line:
                event = json.loads(line)
                if event["process"] in stale:
                    answers.append(event)
    anomalies = [
        {
            "class": "ap-violation",
            "events": [e["index"]],
            "nodes": [e["node"]],
            "explanation": "a probe answered a catalog version older than cat(ts).",
        }
        for e in answers
    ]
    results = {
        "valid": not anomalies,
        "anomalies": anomalies,
        "not_applicable": [],
        "stats": {},
        "errors": [],
    }
    (run_dir / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return {"events": written.events, "anomalies": len(anomalies)}


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
            write_run(run_dir, size)
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
