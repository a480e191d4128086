"""The measurements of anomalies.md that are not failures: outcome counts, error rates over time
and around each DDL activation, latency quantiles, schema lag, safe-time waits, unavailability
windows per node, and the nemesis windows with what happened inside them.

Each statistic is one aggregate over the frames, grouped by run (one Spark job for every run of
a batch); only small results come back to the driver.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checker.catalog_index import MAX_TS, Interval, IntervalLookup
from checker.contract import value_or_none
from checker.facts import Ack
from checker.frames import SCHEMA_ERRORS, RunFrames

QUANTILES = [0.5, 0.9, 0.99]
MAX_SERIES = 5000


@dataclass(frozen=True)
class StatsOptions:
    """Knobs of the statistics (defaults suit minute-long runs)."""

    ddl_window_s: float = 1.0
    unavailable_after_s: float = 2.0


# The statistics are one union of tagged rows, collected once (one Spark job, not one per
# statistic or per run): each kind fills the columns it needs and leaves the rest null.
_STAT_COLUMNS = (
    ("kind", "string"),
    ("k", "bigint"),
    ("s1", "string"),
    ("s2", "string"),
    ("s3", "string"),
    ("n", "bigint"),
    ("n2", "bigint"),
    ("d1", "double"),
    ("d2", "double"),
    ("d3", "double"),
    ("q1", "array<double>"),
    ("q2", "array<double>"),
)


def _tagged(df: DataFrame, kind: str, **cols: Column) -> DataFrame:
    out = [F.lit(kind).alias("kind"), F.col("run").cast("bigint").alias("run")]
    for name, typ in _STAT_COLUMNS[1:]:
        out.append((cols[name] if name in cols else F.lit(None)).cast(typ).alias(name))
    return df.select(*out)


def compute_stats(
    frames: RunFrames,
    runs: Mapping[int, dict[str, Any]],
    ack_lookup: IntervalLookup | None,
    options: StatsOptions = StatsOptions(),
) -> dict[int, dict[str, Any]]:
    """Every statistic of each run of `frames` (by run id; `runs` holds each one's run.json) as
    plain JSON-ready data."""
    floor_ms = {run: _floor_ms(runs[run]) for run in frames.runs}
    windows, windows_frame = _nemesis_window_spans(frames)
    ddl, ddl_frame = _ddl_window_spans(frames, runs, options)
    parts = [
        _outcomes_frame(frames),
        _latency_frame(frames, floor_ms),
        _safe_time_waits_frame(frames),
        _unavailability_frame(frames, options),
    ]
    if ack_lookup is not None:
        parts.append(_schema_lag_frame(frames, ack_lookup))
    parts.extend(f for f in (ddl_frame, windows_frame) if f is not None)
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    rows: dict[tuple[int, str], list[Any]] = {}
    for r in union.collect():
        rows.setdefault((int(r["run"]), str(r["kind"])), []).append(r)
    out: dict[int, dict[str, Any]] = {}
    for run in frames.runs:
        # The workload runs from the first client invoke to the last completion before the
        # final reads: setup before it and the final phase after it are not downtime.
        facts = frames.known(run)
        end_time = facts.end_time
        start = facts.workload_start or 0
        workload_end = facts.workload_end or end_time
        one: dict[str, Any] = {
            "duration_s": end_time / 1e9,
            "workload_start_s": start / 1e9,
            "workload_end_s": workload_end / 1e9,
            "workload_duration_s": (workload_end - start) / 1e9,
        }
        one.update(_outcomes(rows.get((run, "outcome"), [])))
        one["latency"] = _latency(rows.get((run, "latency"), []), floor_ms[run])
        one["ddl_windows"] = _ddl_windows(ddl[run], rows.get((run, "ddl"), []))
        if ack_lookup is not None:
            one["schema_lag"] = _schema_lag(rows.get((run, "lag"), []))
        one["safe_time_waits"] = _safe_time_waits(rows.get((run, "waits"), []))
        nodes = [str(n) for n in runs[run].get("nodes", [])]
        one["unavailability"] = _unavailability(
            rows.get((run, "bucket"), []), nodes, (start, workload_end), options
        )
        one["nemesis_windows"] = _nemesis_windows(windows[run], rows.get((run, "window"), []))
        one["restarts"] = restarts(facts.nemesis, one["unavailability"], workload_end / 1e9)
        out[run] = one
    return out


def _floor_ms(run: Mapping[str, Any]) -> int:
    """DD + CSmax, each an int64 in run.json; their sum is kept within one (a Spark literal)."""
    config = run.get("config", {})
    return min(
        int(config.get("delay_duration_ms", 0)) + int(config.get("max_clock_skew_ms", 0)), MAX_TS
    )


def restarts(
    nemesis: Sequence[Mapping[str, Any]], windows: list[dict[str, Any]], end_s: float
) -> list[dict[str, Any]]:
    """For each node the kill nemesis restarted (its `stop-kill`, recorded once the node
    answers its admin API again): seconds from the restart to its next successful op, read
    from the unavailability windows (0 when none covers the restart). `served` is false when
    the node was killed again, or the workload ended, before it served anything: then the
    seconds are a lower bound. A liveness fact, judged by `expect = ["unavailability"]`."""
    kills: list[tuple[float, list[str]]] = []
    stops: list[tuple[float, list[str]]] = []
    for e in nemesis:
        if e["f"] not in ("start-kill", "stop-kill"):
            continue
        value = value_or_none(e["value_json"])
        nodes = value.get("nodes") if isinstance(value, dict) else None
        if not isinstance(nodes, list) or not isinstance(e["time"], int):
            continue
        at = e["time"] / 1e9
        (kills if e["f"] == "start-kill" else stops).append((at, [str(n) for n in nodes]))
    out = []
    for at, nodes in stops:
        for node in nodes:
            horizon = min([k for k, killed in kills if k > at and node in killed] + [end_s])
            covering = [w for w in windows if w["node"] == node and w["from_s"] <= at < w["to_s"]]
            end = max((w["to_s"] for w in covering), default=at)
            out.append(
                {
                    "node": node,
                    "at_s": at,
                    "unavailable_s": round(max(0.0, min(end, horizon) - at), 3),
                    "served": end < horizon,
                }
            )
    return out[:MAX_SERIES]


def _outcomes_frame(frames: RunFrames) -> DataFrame:
    per_second = frames.completions.groupBy(
        "run",
        F.floor(F.col("time") / F.lit(1_000_000_000)).alias("second"),
        "f",
        "type",
        "error_code",
    ).count()
    return _tagged(
        per_second,
        "outcome",
        k=F.col("second"),
        s1=F.col("f"),
        s2=F.col("type"),
        s3=F.col("error_code"),
        n=F.col("count"),
    )


def _outcomes(per_second: list[Any]) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    by_code: dict[str, dict[str, int]] = {}
    series: dict[int, dict[str, Any]] = {}
    for r in per_second:
        n = int(r["n"])
        f, typ, code, sec = str(r["s1"]), str(r["s2"]), r["s3"], int(r["k"])
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


def _latency_frame(frames: RunFrames, floor_ms: Mapping[int, int]) -> DataFrame:
    ok = frames.completions.where(F.col("type") == "ok").withColumn(
        "ms", F.col("latency_ns") / F.lit(1e6)
    )
    # each run's own floor: one CASE branch per run
    cases = [(F.col("run") == F.lit(run), F.lit(max(ms, 1))) for run, ms in floor_ms.items()]
    floor = F.when(*cases[0])
    for case in cases[1:]:
        floor = floor.when(*case)
    ratio = F.when(F.col("f") == "ddl", F.col("ms") / floor)
    agg = ok.groupBy("run", "f").agg(
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx("ms", QUANTILES).alias("q"),
        F.max("ms").alias("max"),
        F.percentile_approx(ratio, QUANTILES).alias("rq"),
    )
    return _tagged(
        agg,
        "latency",
        s1=F.col("f"),
        n=F.col("n"),
        d1=F.col("max"),
        q1=F.col("q"),
        q2=F.col("rq"),
    )


def _latency(rows: list[Any], floor_ms: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:
        # null where no latency of the kind fits in 64 bits (frames: latency_ns)
        top = None if r["d1"] is None else float(r["d1"])
        entry: dict[str, Any] = {"n": int(r["n"]), "max_ms": top}
        for q, v in zip(QUANTILES, r["q1"] or [], strict=False):
            entry[f"p{int(q * 100)}_ms"] = float(v)
        if r["s1"] == "ddl" and r["q2"]:
            entry["floor_ms"] = floor_ms
            for q, v in zip(QUANTILES, r["q2"], strict=False):
                entry[f"p{int(q * 100)}_ratio_to_floor"] = float(v)
        out[str(r["s1"])] = entry
    return out


def _ddl_window_spans(
    frames: RunFrames, runs: Mapping[int, dict[str, Any]], options: StatsOptions
) -> tuple[dict[int, dict[int, dict[str, Any]]], DataFrame | None]:
    """The window of each DDL ack of each run (without counts yet) and the frame that counts
    them."""
    half = int(options.ddl_window_s * 1e9)
    per_run: dict[int, dict[int, dict[str, Any]]] = {}
    intervals: list[Interval] = []
    for run in frames.runs:
        per, centers = _ddl_windows_of(frames.known(run).acks, runs[run], options)
        per_run[run] = per
        intervals.extend(
            Interval(c - half, c + half, (i,), run=run) for i, (c, _) in centers.items()
        )
    if not any(per_run.values()):
        return per_run, None
    return per_run, _window_counts(frames, intervals, "ddl_index", "ddl")


def _ddl_windows_of(
    acks: Sequence[Ack], run: Mapping[str, Any], options: StatsOptions
) -> tuple[dict[int, dict[str, Any]], dict[int, tuple[int, str]]]:
    """One run's DDL windows (by ack index, without counts yet) and their centers."""
    start_wall_ms = int(run.get("start_wall_ms", 0))
    centers: dict[int, tuple[int, str]] = {}
    for a in acks:
        if run.get("clock") == "hlc" and start_wall_ms:
            center = ((int(a.activation_ts or 0) >> 16) - start_wall_ms) * 1_000_000
            basis = "activation"
        else:
            center, basis = a.time, "ack"
        centers[a.index] = (center, basis)
    per: dict[int, dict[str, Any]] = {}
    for a in acks:
        i = a.index
        per[i] = {
            "ddl_index": i,
            "catalog_version": a.catalog_version,
            "stmt": a.stmt,
            "center_s": centers[i][0] / 1e9,
            "centered_on": centers[i][1],
            "window_s": options.ddl_window_s,
            "completions": 0,
            "ok": 0,
            "fail": 0,
            "info": 0,
            "errors": {},
        }
    return per, centers


def _ddl_windows(per: dict[int, dict[str, Any]], rows: list[Any]) -> list[dict]:
    for r in rows:
        p = per[int(r["k"])]
        n = int(r["n"])
        p["completions"] += n
        p[str(r["s2"])] = p.get(str(r["s2"]), 0) + n
        if r["s3"] is not None:
            p["errors"][r["s3"]] = p["errors"].get(r["s3"], 0) + n
    for p in per.values():
        p["error_rate"] = (p["fail"] + p["info"]) / p["completions"] if p["completions"] else 0.0
    return [per[k] for k in sorted(per)][:MAX_SERIES]


def _schema_lag_frame(frames: RunFrames, ack_lookup: IntervalLookup) -> DataFrame:
    probes = ack_lookup.join(frames.probes.where(F.col("asked_ts").isNull()), "invoke_time")
    # versions are any int64: where the difference overflows, try_subtract's null counts as no lag
    required = F.coalesce(F.col("req_v"), F.col("catalog_version"))
    lag = F.greatest(F.try_subtract(required, F.col("catalog_version")), F.lit(0))
    agg = probes.groupBy("run", "node").agg(
        F.count(F.lit(1)).alias("probes"),
        F.max(lag).alias("max_lag"),
        F.avg(lag).alias("mean_lag"),
        F.count(F.when(lag > 0, 1)).alias("lagging"),
    )
    return _tagged(
        agg,
        "lag",
        s1=F.col("node"),
        n=F.col("probes"),
        k=F.col("max_lag"),
        d1=F.col("mean_lag"),
        n2=F.col("lagging"),
    )


def _schema_lag(rows: list[Any]) -> dict[str, Any]:
    return {
        str(r["s1"]): {
            "probes": int(r["n"]),
            "max_versions_behind": int(r["k"] or 0),
            "mean_versions_behind": float(r["d1"] or 0.0),
            "probes_behind": int(r["n2"]),
        }
        for r in rows
    }


def _safe_time_waits_frame(frames: RunFrames) -> DataFrame:
    w = frames.completions.where(F.col("safe_time_waits").isNotNull())
    agg = w.groupBy("run", "node").agg(
        F.max("safe_time_waits.count").alias("count"),
        F.max("safe_time_waits.total_ms").alias("total_ms"),
        F.max("safe_time_waits.max_ms").alias("max_ms"),
    )
    return _tagged(
        agg,
        "waits",
        s1=F.col("node"),
        d1=F.col("count"),
        d2=F.col("total_ms"),
        d3=F.col("max_ms"),
    )


def _safe_time_waits(rows: list[Any]) -> dict[str, Any]:
    return {
        str(r["s1"]): {
            "count": int(r["d1"] or 0),
            "total_ms": float(r["d2"] or 0),
            "max_ms": float(r["d3"] or 0),
        }
        for r in rows
    }


def _unavailability_frame(frames: RunFrames, options: StatsOptions) -> DataFrame:
    """The first and last success of each node in each T-wide bucket of time (see
    _unavailability)."""
    threshold = max(1, int(options.unavailable_after_s * 1e9))
    ok = frames.completions.where(
        (F.col("type") == "ok") & F.col("node").isNotNull() & (F.col("f") != "final-read")
    )
    agg = ok.groupBy("run", "node", F.expr(f"time div {threshold}L").alias("bucket")).agg(
        F.min("time").alias("first"), F.max("time").alias("last")
    )
    return _tagged(agg, "bucket", s1=F.col("node"), n=F.col("first"), n2=F.col("last"))


def _unavailability(
    buckets: list[Any], nodes: list[str], workload: tuple[int, int], options: StatsOptions
) -> list[dict[str, Any]]:
    """Spans longer than the threshold, inside the workload's span, in which a node completed
    no op of the workload successfully (times stay on the history's clock).

    A gap longer than the threshold T never lies inside one T-wide bucket of time, so the first
    and last success of each bucket per node (an aggregate combined before any shuffle) is all
    the driver needs to find every such gap exactly."""
    threshold = max(1, int(options.unavailable_after_s * 1e9))
    start, end = workload
    spans: dict[str, list[tuple[int, int]]] = {n: [(start, start), (end, end)] for n in nodes}
    for r in buckets:
        spans.setdefault(str(r["s1"]), []).append((int(r["n"]), int(r["n2"])))
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


def _nemesis_window_spans(
    frames: RunFrames,
) -> tuple[dict[int, list[dict[str, Any]]], DataFrame | None]:
    """The nemesis windows of each run (start/stop paired) and, if any has a length, the frame
    counting the completions inside each."""
    per_run: dict[int, list[dict[str, Any]]] = {}
    spans: list[Interval] = []
    for run in frames.runs:
        facts = frames.known(run)
        windows = _nemesis_windows_of(facts.nemesis, facts.end_time)
        run_spans = [
            Interval(
                int(w["from_s"] * 1e9),
                max(int(w["to_s"] * 1e9), int(w["from_s"] * 1e9) + 1),
                (i,),
                run=run,
            )
            for i, w in enumerate(windows)
            if w["to_s"] > w["from_s"]
        ]
        # a run's windows get counts only when one of them has a length, as when judged alone
        if run_spans:
            for w in windows:
                w.update({"ok": 0, "fail": 0, "info": 0, "errors": {}})
        per_run[run] = windows
        spans.extend(run_spans)
    if not spans:
        return per_run, None
    return per_run, _window_counts(frames, spans, "window", "window")


def _window_counts(
    frames: RunFrames, windows: Sequence[Interval], name: str, kind: str
) -> DataFrame:
    """The completions of each window (its id in `name`) by type and error, as `kind` rows."""
    lookup = IntervalLookup(frames.events.sparkSession, windows, [(name, T.LongType())])
    counts = (
        lookup.join(frames.completions, "time", "inner")
        .groupBy("run", name, "type", "error_code")
        .count()
    )
    return _tagged(
        counts, kind, k=F.col(name), s2=F.col("type"), s3=F.col("error_code"), n=F.col("count")
    )


def _nemesis_windows_of(
    nemesis: Sequence[Mapping[str, Any]], end_time: int
) -> list[dict[str, Any]]:
    """One run's nemesis windows, start/stop paired (without counts yet)."""
    windows: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for e in nemesis:
        f = str(e["f"])
        value = value_or_none(e["value_json"])
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
    return windows


def _nemesis_windows(windows: list[dict[str, Any]], rows: list[Any]) -> list[dict[str, Any]]:
    for r in rows:
        w = windows[int(r["k"])]
        w[str(r["s2"])] = w.get(str(r["s2"]), 0) + int(r["n"])
        if r["s3"] is not None:
            w["errors"][r["s3"]] = w["errors"].get(r["s3"], 0) + int(r["n"])
    return windows[:MAX_SERIES]
