"""The nightly summary: what the cells of a night left (run by `harness.nightly`), read.

One Spark job reads every run directory of this night (and of the previous nights, for
trends) and writes `store/nightly/<stamp>/`: cells.json, summary.json, summary.html and trend
plots. Nothing here runs a test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from contract.exit_codes import EXIT_ANOMALIES, EXIT_CRASH, EXIT_UNKNOWN, EXIT_VALID
from contract.rundir import HISTORY, HISTORY_PARQUET, RESULTS, RUN_JSON
from reports.expectation import ExpectVerdict, judge
from reports.templating import render

PREVIOUS_NIGHTS = 14  # nights before this one whose runs join the trends


@dataclass(frozen=True)
class CellOutcome:
    """What one cell left behind; run_dir is None when the cell crashed before a run existed."""

    cell: str
    scenario: str
    nemesis: str
    seed: int
    expect: tuple[str, ...]
    run_dir: str | None
    exit_code: int | None
    error: str | None
    seconds: float
    allow: tuple[str, ...] = ()  # the classes run.json tolerates (a night before allow: none)


def _previous_outcomes(nightly_root: Path, current: Path) -> list[tuple[str, CellOutcome]]:
    nights = sorted(
        (p for p in nightly_root.glob("*/cells.json") if p.parent != current), reverse=True
    )[:PREVIOUS_NIGHTS]
    out = []
    for path in nights:
        try:
            for c in json.loads(path.read_text(encoding="utf-8")):
                c["expect"] = tuple(c.get("expect") or ())
                c["allow"] = tuple(c.get("allow") or ())
                out.append((path.parent.name, CellOutcome(**c)))
        except (OSError, ValueError, TypeError):
            continue
    return out


# ---- the one Spark job over every run directory -------------------------------------------


EVENT_COLUMNS = ("index", "time", "type", "process", "f", "node", "code", "run")


def _history_schema() -> Any:
    """The checker's event schema, cut to the columns the trends read (and the error's code)."""
    from pyspark.sql import types as T

    from checker.ingest import LINE_SCHEMA

    kept = [f for f in LINE_SCHEMA.fields if f.name in EVENT_COLUMNS]
    error = LINE_SCHEMA["error"].dataType
    assert isinstance(error, T.StructType)
    code = T.StructType([f for f in error.fields if f.name == "code"])
    return T.StructType([*kept, T.StructField("error", code, True)])


def _events_frame(spark: Any, run_dirs: Sequence[Path]) -> Any:
    """Every run's events (index, time, type, process, f, node, code, run) as one DataFrame.

    A run the checker already analyzed is read from its Parquet copy; the others are read from
    history.jsonl in one scan with an explicit schema (no inference).
    """
    from functools import reduce

    from pyspark.sql import functions as F

    frames = []
    raw: list[Path] = []
    for run_dir in run_dirs:
        if (run_dir / HISTORY_PARQUET / "_source.json").exists():
            try:
                from checker.ingest import ingest_history

                df = ingest_history(spark, run_dir).events
                frames.append(
                    df.select(
                        "index",
                        "time",
                        "type",
                        F.col("process").cast("string").alias("process"),
                        "f",
                        "node",
                        F.col("error.code").alias("code"),
                    ).withColumn("run", F.lit(str(run_dir)))
                )
                continue
            except Exception:
                pass  # a stale or foreign copy: read the text instead
        raw.append(run_dir)
    for run_dir in raw:
        df = spark.read.schema(_history_schema()).json(str(run_dir / HISTORY))
        frames.append(
            df.select(
                "index",
                "time",
                "type",
                "process",
                "f",
                "node",
                F.col("error.code").alias("code"),
            ).withColumn("run", F.lit(str(run_dir)))
        )
    return reduce(lambda a, b: a.unionByName(b), frames)


def run_stats_frame(events: Any) -> Any:
    """events -> one row per (run, f, outcome, error code): count and ok-latency quantiles.

    Ops are invoke -> next event of the same process; nemesis events count under f "nemesis".
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_process = Window.partitionBy("run", "process").orderBy("index")
    nemesis = F.col("process") == "nemesis"
    rows = (
        events.withColumn("prev_type", F.lag("type").over(by_process))
        .withColumn("prev_time", F.lag("time").over(by_process))
        .withColumn(
            "op_f", F.when(nemesis, F.lit("nemesis")).otherwise(F.lag("f").over(by_process))
        )
        .where(nemesis | ((F.col("type") != "invoke") & (F.col("prev_type") == "invoke")))
        .withColumn("latency_ms", (F.col("time") - F.col("prev_time")) / F.lit(1e6))
    )
    return rows.groupBy(
        "run", "op_f", "type", F.coalesce(F.col("code"), F.lit("")).alias("code")
    ).agg(
        F.count("*").alias("n"),
        F.percentile_approx("latency_ms", [0.5, 0.95, 0.99], 1000).alias("q"),
    )


def spark_run_stats(spark: Any, run_dirs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Per run: op counts by f and outcome, txn aborts by code, ok-latency quantiles by f."""
    out: dict[str, dict[str, Any]] = {
        str(d): {"ops": {}, "abort_codes": {}, "nemesis_events": 0} for d in run_dirs
    }
    present = [d for d in run_dirs if (d / HISTORY).exists()]
    if not present:
        return out
    for r in run_stats_frame(_events_frame(spark, present)).collect():
        run = out[r["run"]]
        if r["op_f"] == "nemesis":
            run["nemesis_events"] += r["n"]
            continue
        f = run["ops"].setdefault(
            r["op_f"],
            {"n": 0, "ok": 0, "fail": 0, "info": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None},
        )
        f["n"] += r["n"]
        f[r["type"]] = f.get(r["type"], 0) + r["n"]
        if r["type"] == "ok" and r["q"]:
            f["p50_ms"], f["p95_ms"], f["p99_ms"] = r["q"]
        if r["op_f"] == "txn" and r["type"] != "ok":
            code = r["code"] or "unknown"
            run["abort_codes"][code] = run["abort_codes"].get(code, 0) + r["n"]
    return out


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _judge(outcome: CellOutcome, results: Mapping[str, Any] | None) -> ExpectVerdict:
    """The cell against its expectation, by the rule of `run --gate`."""
    return judge(results, outcome.expect, outcome.allow)


def _judgement(verdict: ExpectVerdict) -> str:
    """expected | missed | unexpected | unknown: one word per cell (missed wins when both)."""
    if verdict.status != "mismatched":
        return "expected" if verdict.passed else "unknown"
    return "missed" if verdict.missed else "unexpected"


def summarize(
    spark: Any,
    night: str,
    outcomes: Sequence[CellOutcome],
    previous: Sequence[tuple[str, CellOutcome]],
) -> dict[str, Any]:
    """The summary document: one row per run (this night and the previous ones) + detection."""
    all_cells = [(night, o) for o in outcomes] + list(previous)
    dirs = [Path(o.run_dir) for _, o in all_cells if o.run_dir and Path(o.run_dir).is_dir()]
    stats = spark_run_stats(spark, dirs)
    runs = []
    for n, o in all_cells:
        run_dir = Path(o.run_dir) if o.run_dir else None
        results = read_json(run_dir / RESULTS) if run_dir else None
        run = (read_json(run_dir / RUN_JSON) if run_dir else None) or {}
        st = stats.get(str(run_dir), {}) if run_dir else {}
        txn = (st.get("ops") or {}).get("txn") or {}
        ddl = (st.get("ops") or {}).get("ddl") or {}
        cfg = run.get("config") or {}
        verdict = _judge(o, results)
        floor = None
        if isinstance(cfg.get("delay_duration_ms"), int | float):
            floor = cfg["delay_duration_ms"] + (cfg.get("max_clock_skew_ms") or 0)
        runs.append(
            {
                "night": n,
                **{k: v for k, v in asdict(o).items() if k != "expect"},
                "expect": list(o.expect),
                "start_wall_ms": run.get("start_wall_ms"),
                "valid": (results or {}).get("valid", "unknown"),
                "classes": sorted(
                    {str(a.get("class")) for a in (results or {}).get("anomalies") or []}
                ),
                "anomalies": len((results or {}).get("anomalies") or []),
                "judgement": "unknown" if o.error else _judgement(verdict),
                "missed_classes": list(verdict.missed),
                "unexpected_classes": list(verdict.unexpected),
                "txn_n": txn.get("n", 0),
                "txn_abort_rate": (txn["fail"] + txn["info"]) / txn["n"] if txn.get("n") else None,
                "txn_p50_ms": txn.get("p50_ms"),
                "txn_p99_ms": txn.get("p99_ms"),
                "ddl_n": ddl.get("n", 0),
                "ddl_p50_ms": ddl.get("p50_ms"),
                "ddl_p99_ms": ddl.get("p99_ms"),
                "ddl_floor_ms": floor,
                "abort_codes": st.get("abort_codes", {}),
                "nemesis_events": st.get("nemesis_events", 0),
            }
        )
    tonight = [r for r in runs if r["night"] == night]
    detection: dict[str, dict[str, Any]] = {}
    for r in tonight:
        d = detection.setdefault(
            r["scenario"],
            {
                "expect": r["expect"],
                "runs": 0,
                "expected": 0,
                "missed": 0,
                "unexpected": 0,
                "unknown": 0,
                "classes": {},
            },
        )
        d["runs"] += 1
        d[r["judgement"]] += 1
        for c in r["classes"]:
            d["classes"][c] = d["classes"].get(c, 0) + 1
    for d in detection.values():
        judged = d["runs"] - d["unknown"]
        d["detection_rate"] = (d["expected"] / judged) if judged and d["expect"] else None
    return {"night": night, "runs": runs, "detection": detection}


# ---- the summary page -----------------------------------------------------------------------


def _trend_plots(summary: Mapping[str, Any], out_dir: Path) -> list[tuple[str, Path]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [r for r in summary["runs"] if r["start_wall_ms"]]
    scenarios = sorted({r["scenario"] for r in runs})
    panels = (
        ("abort-rate", "txn abort rate (fail + info)", ("txn_abort_rate",)),
        ("txn-latency", "txn latency p50 / p99 (ms)", ("txn_p50_ms", "txn_p99_ms")),
        (
            "ddl-latency",
            "DDL latency p50 / p99 (ms) against DD + CSmax",
            ("ddl_p50_ms", "ddl_p99_ms"),
        ),
    )
    files = []
    for name, title, keys in panels:
        fig, ax = plt.subplots(figsize=(10, 3.4))
        for i, sc in enumerate(scenarios):
            rows = sorted(
                (r for r in runs if r["scenario"] == sc), key=lambda r: r["start_wall_ms"]
            )
            for key, style in zip(keys, ("-o", "--s"), strict=False):
                have = [r for r in rows if r[key] is not None]
                xs: list[Any] = [
                    datetime.fromtimestamp(r["start_wall_ms"] / 1000, tz=UTC) for r in have
                ]
                ys = [r[key] for r in have]
                label = f"{sc} {key.split('_')[1]}" if len(keys) > 1 else sc
                if xs:
                    ax.plot(xs, ys, style, color=f"C{i % 10}", markersize=4, label=label)
        if name == "ddl-latency":
            floors = sorted({r["ddl_floor_ms"] for r in runs if r["ddl_floor_ms"]})
            for fl in floors:
                ax.axhline(fl, color="black", linewidth=0.8)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
        fig.autofmt_xdate()
        fig.tight_layout()
        png = out_dir / f"{name}.png"
        fig.savefig(png, dpi=90)
        fig.savefig(out_dir / f"{name}.svg")
        plt.close(fig)
        files.append((title, png))
    return files


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:.1%}" if pct else f"{value:.1f}"


def _summary_html(
    summary: Mapping[str, Any], plots: Sequence[tuple[str, Path]], exit_code: int
) -> str:
    import base64

    colours = {
        "expected": "#e3f4e1",
        "missed": "#fbe3e1",
        "unexpected": "#fbe3e1",
        "unknown": "#fff3d6",
    }
    detection = []
    for sc, d in sorted(summary["detection"].items()):
        classes = ", ".join(f"{c} ×{n}" for c, n in sorted(d["classes"].items()))
        detection.append(
            [
                sc,
                ", ".join(d["expect"]) or "valid",
                d["runs"],
                d["expected"],
                d["missed"],
                d["unexpected"],
                d["unknown"],
                _fmt(d["detection_rate"], pct=True),
                classes,
            ]
        )
    runs = []
    for r in summary["runs"]:
        if r["night"] != summary["night"]:
            continue
        where = r["run_dir"] or (r["error"] or "").splitlines()[0]
        row = [
            r["cell"],
            r["valid"],
            r["judgement"],
            ", ".join(r["expect"]) or "valid",
            ", ".join(r["classes"]),
            ", ".join(r.get("missed_classes") or []),
            ", ".join(r.get("unexpected_classes") or []),
            _fmt(r["txn_abort_rate"], pct=True),
            _fmt(r["txn_p50_ms"]),
            _fmt(r["txn_p99_ms"]),
            _fmt(r["ddl_p50_ms"]),
            _fmt(r["ddl_p99_ms"]),
            json.dumps(r["abort_codes"], sort_keys=True),
            where,
        ]
        runs.append((r["judgement"], row))
    return render(
        "nightly.html",
        night=summary["night"],
        exit_code=exit_code,
        verdict={
            EXIT_VALID: "PASS",
            EXIT_ANOMALIES: "FAIL",
            EXIT_UNKNOWN: "UNKNOWN",
            EXIT_CRASH: "CHECKER CRASHED",
        }[exit_code],
        checker_crash=summary.get("checker_crash"),
        detection=detection,
        plots=[(t, base64.b64encode(p.read_bytes()).decode()) for t, p in plots],
        runs=runs,
        colours=colours,
    )


def _spark_session(master: str) -> Any:
    """The checker's session settings when it is there (quiet, loopback, no UI)."""
    try:
        from checker.session import build_session
    except ImportError:
        from pyspark.sql import SparkSession

        return (
            SparkSession.builder.master(master)
            .appName("schemachaos-nightly")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .getOrCreate()
        )
    return build_session(master)


def write_summary(
    out_dir: Path,
    outcomes: Sequence[CellOutcome],
    spark_master: str = "local[2]",
    checker_crash: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """cells.json, summary.json, trend plots and summary.html of the night in out_dir (under
    `<store>/nightly/`, beside the previous nights); the gate's exit code and the summary.
    `checker_crash`: the checker crashed judging the night's runs (the cells keep what verdicts
    it wrote); the night exits 255, as `analyze` of the same runs would."""
    (out_dir / "cells.json").write_text(
        json.dumps([asdict(o) for o in outcomes], indent=1), encoding="utf-8"
    )
    previous = _previous_outcomes(out_dir.parent, out_dir)
    spark = _spark_session(spark_master)
    try:
        summary = summarize(spark, out_dir.name, outcomes, previous)
    finally:
        spark.stop()
    judgements = [r["judgement"] for r in summary["runs"] if r["night"] == out_dir.name]
    if any(j in ("missed", "unexpected") for j in judgements):
        code = EXIT_ANOMALIES
    elif any(j == "unknown" for j in judgements) or not judgements:
        code = EXIT_UNKNOWN
    else:
        code = EXIT_VALID
    if checker_crash is not None:
        code = EXIT_CRASH
    summary = {**summary, "exit_code": code, "checker_crash": checker_crash}
    tmp = out_dir / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out_dir / "summary.json")
    plots = _trend_plots(summary, out_dir / "plots")
    (out_dir / "summary.html").write_text(_summary_html(summary, plots, code), encoding="utf-8")
    return code, summary
