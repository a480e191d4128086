"""The measurements of anomalies.md that are not failures: outcome counts, error rates over time
and around each DDL activation, latency quantiles, schema lag, safe-time waits, unavailability
windows per node, and the nemesis windows with what happened inside them.

Each statistic is one aggregate over the frames (a handful of Spark jobs); only small results
come back to the driver.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from checker.catalog_index import Interval, IntervalLookup
from checker.frames import SCHEMA_ERRORS, RunFrames
from checker.ingest import CLIENT_PROCESS

QUANTILES = [0.5, 0.9, 0.99]
MAX_SERIES = 5000


@dataclass(frozen=True)
class StatsOptions:
    """Knobs of the statistics (defaults suit minute-long runs)."""

    ddl_window_s: float = 1.0
    unavailable_after_s: float = 2.0


def compute_stats(
    frames: RunFrames,
    run: dict[str, Any],
    ack_lookup: IntervalLookup | None,
    options: StatsOptions = StatsOptions(),
) -> dict[str, Any]:
    """Every statistic as plain JSON-ready data."""
    spark = frames.events.sparkSession
    config = run.get("config", {})
    floor_ms = int(config.get("delay_duration_ms", 0)) + int(config.get("max_clock_skew_ms", 0))
    # The workload runs from the first client invoke to the last completion before the final
    # reads: setup before it and the final phase after it are not downtime.
    client = F.col("process").rlike(CLIENT_PROCESS)
    done = F.col("type").isin("ok", "fail", "info") & (F.col("f") != "final-read")
    span = frames.events.agg(
        F.max("time").alias("end"),
        F.min(F.when((F.col("type") == "invoke") & client, F.col("time"))).alias("start"),
        F.max(F.when(done & client, F.col("time"))).alias("workload_end"),
    ).first()
    end_time = int(span["end"] or 0) if span is not None else 0
    start = int(span["start"] or 0) if span is not None else 0
    workload_end = int(span["workload_end"] or end_time) if span is not None else end_time
    out: dict[str, Any] = {
        "duration_s": end_time / 1e9,
        "workload_start_s": start / 1e9,
        "workload_end_s": workload_end / 1e9,
        "workload_duration_s": (workload_end - start) / 1e9,
    }
    out.update(_outcomes(frames))
    out["latency"] = _latency(frames, floor_ms)
    out["ddl_windows"] = _ddl_windows(frames, run, options)
    if ack_lookup is not None:
        out["schema_lag"] = _schema_lag(frames, ack_lookup)
    out["safe_time_waits"] = _safe_time_waits(frames)
    nodes = [str(n) for n in run.get("nodes", [])]
    out["unavailability"] = _unavailability(frames, nodes, (start, workload_end), options)
    out["nemesis_windows"] = _nemesis_windows(frames, spark, end_time)
    return out


def _outcomes(frames: RunFrames) -> dict[str, Any]:
    per_second = (
        frames.completions.groupBy(
            F.floor(F.col("time") / F.lit(1_000_000_000)).alias("second"),
            "f",
            "type",
            "error_code",
        )
        .count()
        .collect()
    )
    counts: dict[str, dict[str, int]] = {}
    by_code: dict[str, dict[str, int]] = {}
    series: dict[int, dict[str, Any]] = {}
    for r in per_second:
        n = int(r["count"])
        f, typ, code, sec = str(r["f"]), str(r["type"]), r["error_code"], int(r["second"])
        c = counts.setdefault(f, {"ok": 0, "fail": 0, "info": 0})
        c[typ] = c.get(typ, 0) + n
        s = series.setdefault(sec, {"second": sec, "completions": 0, "errors": {}})
        s["completions"] += n
        if code is not None:
            by_code.setdefault(f, {})
            by_code[f][code] = by_code[f].get(code, 0) + n
            s["errors"][code] = s["errors"].get(code, 0) + n
    txn_total = sum(counts.get("txn", {}).values())
    schema_aborts = sum(n for code, n in by_code.get("txn", {}).items() if code in SCHEMA_ERRORS)
    seconds = [series[k] for k in sorted(series)][:MAX_SERIES]
    for s in seconds:
        s["error_rate"] = sum(s["errors"].values()) / s["completions"] if s["completions"] else 0
    return {
        "counts": counts,
        "errors_by_code": by_code,
        "errors_per_second": seconds,
        "txn_aborted_by_schema_change": {
            "count": schema_aborts,
            "share": schema_aborts / txn_total if txn_total else 0.0,
        },
    }


def _latency(frames: RunFrames, floor_ms: int) -> dict[str, Any]:
    ok = frames.completions.where(F.col("type") == "ok").withColumn(
        "ms", F.col("latency_ns") / F.lit(1e6)
    )
    ratio = F.when(F.col("f") == "ddl", F.col("ms") / F.lit(max(floor_ms, 1)))
    rows = (
        ok.groupBy("f")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("ms", QUANTILES).alias("q"),
            F.max("ms").alias("max"),
            F.percentile_approx(ratio, QUANTILES).alias("rq"),
        )
        .collect()
    )
    out: dict[str, Any] = {}
    for r in rows:
        entry: dict[str, Any] = {"n": int(r["n"]), "max_ms": float(r["max"])}
        for q, v in zip(QUANTILES, r["q"] or [], strict=False):
            entry[f"p{int(q * 100)}_ms"] = float(v)
        if r["f"] == "ddl" and r["rq"]:
            entry["floor_ms"] = floor_ms
            for q, v in zip(QUANTILES, r["rq"], strict=False):
                entry[f"p{int(q * 100)}_ratio_to_floor"] = float(v)
        out[str(r["f"])] = entry
    return out


def _ddl_windows(frames: RunFrames, run: dict[str, Any], options: StatsOptions) -> list[dict]:
    acks = frames.ddls.select("index", "time", "catalog_version", "activation_ts", "stmt").collect()
    if not acks:
        return []
    half = int(options.ddl_window_s * 1e9)
    start_wall_ms = int(run.get("start_wall_ms", 0))
    centers: dict[int, tuple[int, str]] = {}
    for a in acks:
        if run.get("clock") == "hlc" and start_wall_ms:
            center = ((int(a["activation_ts"]) >> 16) - start_wall_ms) * 1_000_000
            basis = "activation"
        else:
            center, basis = int(a["time"]), "ack"
        centers[int(a["index"])] = (center, basis)
    lookup = IntervalLookup(
        frames.events.sparkSession,
        [Interval(c - half, c + half, (i,)) for i, (c, _) in centers.items()],
        [("ddl_index", T.LongType())],
    )
    rows = (
        lookup.join(frames.completions, "time", "inner")
        .groupBy("ddl_index", "type", "error_code")
        .count()
        .collect()
    )
    per: dict[int, dict[str, Any]] = {}
    for a in acks:
        i = int(a["index"])
        per[i] = {
            "ddl_index": i,
            "catalog_version": int(a["catalog_version"]),
            "stmt": a["stmt"],
            "center_s": centers[i][0] / 1e9,
            "centered_on": centers[i][1],
            "window_s": options.ddl_window_s,
            "completions": 0,
            "ok": 0,
            "fail": 0,
            "info": 0,
            "errors": {},
        }
    for r in rows:
        p = per[int(r["ddl_index"])]
        n = int(r["count"])
        p["completions"] += n
        p[str(r["type"])] = p.get(str(r["type"]), 0) + n
        if r["error_code"] is not None:
            p["errors"][r["error_code"]] = p["errors"].get(r["error_code"], 0) + n
    for p in per.values():
        p["error_rate"] = (p["fail"] + p["info"]) / p["completions"] if p["completions"] else 0.0
    return [per[k] for k in sorted(per)][:MAX_SERIES]


def _schema_lag(frames: RunFrames, ack_lookup: IntervalLookup) -> dict[str, Any]:
    probes = ack_lookup.join(frames.probes.where(F.col("asked_ts").isNull()), "invoke_time")
    lag = F.greatest(F.coalesce(F.col("req_v"), F.lit(1)) - F.col("catalog_version"), F.lit(0))
    rows = (
        probes.groupBy("node")
        .agg(
            F.count(F.lit(1)).alias("probes"),
            F.max(lag).alias("max_lag"),
            F.avg(lag).alias("mean_lag"),
            F.count(F.when(lag > 0, 1)).alias("lagging"),
        )
        .collect()
    )
    return {
        str(r["node"]): {
            "probes": int(r["probes"]),
            "max_versions_behind": int(r["max_lag"] or 0),
            "mean_versions_behind": float(r["mean_lag"] or 0.0),
            "probes_behind": int(r["lagging"]),
        }
        for r in rows
    }


def _safe_time_waits(frames: RunFrames) -> dict[str, Any]:
    w = frames.completions.where(F.col("safe_time_waits").isNotNull())
    rows = (
        w.groupBy("node")
        .agg(
            F.max("safe_time_waits.count").alias("count"),
            F.max("safe_time_waits.total_ms").alias("total_ms"),
            F.max("safe_time_waits.max_ms").alias("max_ms"),
        )
        .collect()
    )
    return {
        str(r["node"]): {
            "count": int(r["count"] or 0),
            "total_ms": float(r["total_ms"] or 0),
            "max_ms": float(r["max_ms"] or 0),
        }
        for r in rows
    }


def _unavailability(
    frames: RunFrames, nodes: list[str], workload: tuple[int, int], options: StatsOptions
) -> list[dict[str, Any]]:
    """Spans longer than the threshold, inside the workload's span, in which a node completed
    no op of the workload successfully (times stay on the history's clock).

    A gap longer than the threshold T never lies inside one T-wide bucket of time, so the first
    and last success of each bucket per node (an aggregate combined before any shuffle) is all
    the driver needs to find every such gap exactly."""
    threshold = max(1, int(options.unavailable_after_s * 1e9))
    ok = frames.completions.where(
        (F.col("type") == "ok") & F.col("node").isNotNull() & (F.col("f") != "final-read")
    )
    buckets = (
        ok.groupBy("node", F.expr(f"time div {threshold}L").alias("bucket"))
        .agg(F.min("time").alias("first"), F.max("time").alias("last"))
        .collect()
    )
    start, end = workload
    spans: dict[str, list[tuple[int, int]]] = {n: [(start, start), (end, end)] for n in nodes}
    for r in buckets:
        spans.setdefault(str(r["node"]), []).append((int(r["first"]), int(r["last"])))
    gaps = []
    for node in sorted(spans):
        ordered = sorted(spans[node])
        for (_, prev), (nxt, _) in itertools.pairwise(ordered):
            if nxt - prev > threshold:
                gaps.append((node, prev, nxt))
    return [
        {"node": node, "from_s": prev / 1e9, "to_s": nxt / 1e9, "duration_s": (nxt - prev) / 1e9}
        for node, prev, nxt in gaps[:MAX_SERIES]
    ]


def _nemesis_windows(frames: RunFrames, spark: Any, end_time: int) -> list[dict[str, Any]]:
    events = frames.nemesis.orderBy("index").collect()
    windows: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for e in events:
        f = str(e["f"])
        value = json.loads(e["value_json"]) if e["value_json"] else None
        kind, _, what = f.partition("-")
        if kind == "start" and what:
            w: dict[str, Any] = {
                "action": what,
                "start_index": int(e["index"]),
                "from_s": int(e["time"]) / 1e9,
            }
            w["value"] = value
            open_[what] = w
            windows.append(w)
        elif kind in ("stop", "heal", "end", "resume") and what in open_:
            w = open_.pop(what)
            w["end_index"] = int(e["index"])
            w["to_s"] = int(e["time"]) / 1e9
        else:
            windows.append(
                {
                    "action": f,
                    "start_index": int(e["index"]),
                    "from_s": int(e["time"]) / 1e9,
                    "to_s": int(e["time"]) / 1e9,
                    "value": value,
                }
            )
    for w in windows:
        w.setdefault("to_s", end_time / 1e9)
        w.setdefault("end_index", None)
    spans = [
        Interval(
            int(w["from_s"] * 1e9), max(int(w["to_s"] * 1e9), int(w["from_s"] * 1e9) + 1), (i,)
        )
        for i, w in enumerate(windows)
        if w["to_s"] > w["from_s"]
    ]
    if spans:
        lookup = IntervalLookup(spark, spans, [("window", T.LongType())])
        rows = (
            lookup.join(frames.completions, "time", "inner")
            .groupBy("window", "type", "error_code")
            .count()
            .collect()
        )
        for w in windows:
            w.update({"ok": 0, "fail": 0, "info": 0, "errors": {}})
        for r in rows:
            w = windows[int(r["window"])]
            w[str(r["type"])] = w.get(str(r["type"]), 0) + int(r["count"])
            if r["error_code"] is not None:
                w["errors"][r["error_code"]] = w["errors"].get(r["error_code"], 0) + int(r["count"])
    return windows[:MAX_SERIES]
