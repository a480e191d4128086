"""Detection matrix: does each bug toggle's scenario produce its anomaly class, and does the
same run with every toggle off (and the baseline under every nemesis) stay valid?

Per toggle it prints the detection rate over seeds and the median time from the start of the
workload (the first client invoke) to the first witnessing event; per control run the number
of anomalies (must be 0). Cluster runs go in parallel worker processes (docker backend,
`--no-analyze`); the analysis of every run shares one Spark session in this process.

    .venv/bin/python benchmarks/detection.py --seeds 5 [--toggles a,b] [--time-limit 30]
        [--parallel 2] [--no-controls]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.run import RunOptions, run_test  # noqa: E402

# toggle -> scenario; what it must produce comes from the scenario's `expect`
MATRIX: dict[str, str] = {
    "no-safe-time-wait": "scenarios/no-safe-time-wait.toml",
    "no-ack-wait": "scenarios/no-ack-wait.toml",
    "ack-wait-no-skew": "scenarios/ack-wait-no-skew.toml",
    "hlc-no-round-up": "scenarios/hlc-no-round-up.toml",
    "no-op-validation": "scenarios/no-op-validation.toml",
    "no-commit-validation": "scenarios/no-commit-validation.toml",
    "drop-column-compatible": "scenarios/drop-column-compatible.toml",
    "local-schema-at-commit": "scenarios/local-schema-at-commit.toml",
    "synctime-reorder": "scenarios/synctime-reorder.toml",
    "mutable-delay": "scenarios/mutable-delay.toml",
    "skip-index-states": "scenarios/skip-index-states.toml",
    "no-safe-time-recovery": "scenarios/no-safe-time-recovery.toml",
}
BASELINE = "scenarios/baseline.toml"
# a liveness finding, not an anomaly class of the checker: decided from results.json stats
UNAVAILABILITY = "unavailability"
# no op succeeded on a restarted node for this long: safe time did not come back with it
UNAVAILABLE_AFTER_RESTART_S = 2.0


@dataclass(frozen=True)
class Case:
    """One cluster run of the matrix: a scenario, a seed, toggles on or off."""

    name: str  # toggle name, or "baseline"
    scenario: str
    seed: int
    toggles_on: bool
    expect: tuple[str, ...]  # what the toggle produces; its control must show none of it
    time_limit_s: float | None = None  # None: the run_matrix default, else the scenario's


@dataclass(frozen=True)
class Outcome:
    case: Case
    run_dir: str
    valid: Any
    classes: tuple[str, ...]
    anomalies: int
    detected: bool  # toggle on: its defining class (expect[0]) found; control: valid, and
    # for a liveness toggle every restarted node served again within the threshold
    all_expected: bool  # toggle on: every class of `expect` found
    first_witness_s: float | None
    errors: tuple[str, ...]
    restart_unavailable_s: tuple[float, ...] = ()  # per restart, liveness toggles only


def scenario_options(
    case: Case, store: Path, time_limit_s: float | None = None, spark_master: str = "local[2]"
) -> RunOptions:
    """RunOptions of the case's scenario (as `schemachaos run --scenario` builds them)."""
    from workloads.scenario import load_scenario

    sc = load_scenario(REPO / case.scenario)
    fields = {
        **sc.run_options_fields(),
        "nemesis_options": dict(sc.nemesis_options),
        "expect": tuple(sc.expect),
        "store": store,
        "backend": "docker",
        "spark_master": spark_master,
        "no_analyze": True,
    }
    opts = RunOptions(**fields)
    label = case.name if case.toggles_on or case.name == "baseline" else f"{case.name}-off"
    opts = replace(opts, seed=case.seed, test_name=f"detect-{label}")
    limit = case.time_limit_s if case.time_limit_s is not None else time_limit_s
    if limit is not None:
        opts = replace(opts, time_limit_s=limit)
    if not case.toggles_on:
        opts = replace(opts, toggles=())
    return opts


def cases(
    toggles: Iterable[str], seeds: Sequence[int], controls: bool, baseline: bool
) -> list[Case]:
    """Toggle-on runs of each toggle and seed, its toggle-off control, and the baseline."""
    from workloads.scenario import load_scenario

    out: list[Case] = []
    for toggle in toggles:
        expect = tuple(load_scenario(REPO / MATRIX[toggle]).expect)
        for seed in seeds:
            out.append(Case(toggle, MATRIX[toggle], seed, True, expect))
            if controls:
                out.append(Case(toggle, MATRIX[toggle], seed, False, expect))
    if baseline:
        out.extend(Case("baseline", BASELINE, seed, False, ()) for seed in seeds)
    return out


def run_cluster_part(opts: RunOptions) -> str:
    """Worker: provision, run, heal, final reads, teardown; no analysis (one process each)."""
    return str(run_test(opts).run_dir)


def _events(run_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    with (run_dir / "history.jsonl").open() as f:
        for line in f:
            if line.strip():
                try:
                    e = json.loads(line)
                except ValueError:
                    break
                out[int(e["index"])] = e
    return out


def workload_start_ns(events: dict[int, dict[str, Any]]) -> int:
    """The controller time of the first client invoke: time 0 of the history is taken before
    the cluster is provisioned, so witness times are measured from here."""
    times = [e["time"] for e in events.values() if e.get("process") != "nemesis"]
    return int(min(times)) if times else 0


def recovery_after_restart(run_dir: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """For each node the kill nemesis restarted: seconds from its restart (the `stop-kill`
    event, recorded once the node answers its admin API) to its first successful op, from the
    checker's unavailability windows (`stats.unavailability`: no op succeeded on that node
    between from_s and to_s). When the node was killed again, or the workload ended, before any
    op succeeded there, the time up to that horizon is a lower bound (`at_least`): kept when it
    already reaches UNAVAILABLE_AFTER_RESTART_S, left out (it tells nothing) when shorter."""
    events = sorted(_events(run_dir).values(), key=lambda e: int(e["index"]))
    windows = results.get("stats", {}).get("unavailability", [])
    client_end = max(
        (
            int(e["time"])
            for e in events
            if e.get("f") in ("txn", "probe") and e["type"] != "invoke"
        ),
        default=0,
    )
    kills = [
        (int(e["time"]) / 1e9, set((e.get("value") or {}).get("nodes") or []))
        for e in events
        if e.get("process") == "nemesis" and e.get("f") == "start-kill"
    ]
    out = []
    for e in events:
        if e.get("process") != "nemesis" or e.get("f") != "stop-kill":
            continue
        at = int(e["time"]) / 1e9
        for node in (e.get("value") or {}).get("nodes") or []:
            horizon = min(
                [k for k, nodes in kills if k > at and node in nodes] + [client_end / 1e9]
            )
            covering = [w for w in windows if w["node"] == node and w["from_s"] <= at < w["to_s"]]
            end = max((w["to_s"] for w in covering), default=at)
            cut = end >= horizon  # killed again (or the run ended) before it served anything
            unavailable = min(end, horizon) - at
            if cut and unavailable < UNAVAILABLE_AFTER_RESTART_S:
                continue
            out.append(
                {
                    "node": node,
                    "restart_s": round(at, 2),
                    "unavailable_s": round(unavailable, 2),
                    "at_least": cut,
                }
            )
    return out


def unavailability_after_restart(run_dir: Path, restarts: Sequence[dict[str, Any]]) -> float | None:
    """Seconds from the workload start to the first time a restarted node had stayed
    unavailable for UNAVAILABLE_AFTER_RESTART_S after its restart (None: it never did)."""
    start = workload_start_ns(_events(run_dir)) / 1e9
    hits = [
        r["restart_s"] + UNAVAILABLE_AFTER_RESTART_S - start
        for r in restarts
        if r["unavailable_s"] >= UNAVAILABLE_AFTER_RESTART_S
    ]
    return min(hits) if hits else None


def judge(case: Case, run_dir: Path, results: dict[str, Any]) -> Outcome:
    """Whether the run shows what the case expects, and when it was first witnessed."""
    classes = tuple(sorted({a["class"] for a in results.get("anomalies", [])}))
    events = _events(run_dir)
    start = workload_start_ns(events)
    first: float | None = None
    for a in results.get("anomalies", []):
        if case.toggles_on and a["class"] not in case.expect:
            continue  # the witness of what the toggle must produce, not of its side effects
        idx = [i for i in a.get("events", []) if i in events]
        if idx:
            at = (max(int(events[i]["time"]) for i in idx) - start) / 1e9
            first = at if first is None else min(first, at)
    # the toggle's defining class is the first of `expect`; the others are reported beside it
    primary = case.expect[0] if case.expect else None
    found = set(classes)
    restarts: list[dict[str, Any]] = []
    if UNAVAILABILITY in case.expect:
        restarts = recovery_after_restart(run_dir, results)
        unavailable = unavailability_after_restart(run_dir, restarts)
        if unavailable is not None:
            found.add(UNAVAILABILITY)
            first = unavailable if first is None else min(first, unavailable)
    detected = primary is not None and primary in found
    all_found = set(case.expect) <= found
    if not case.toggles_on:
        # the control of a liveness toggle must also come back at once after every restart
        detected = results.get("valid") is True and UNAVAILABILITY not in found
    return Outcome(
        case=case,
        run_dir=str(run_dir),
        valid=results.get("valid"),
        classes=classes,
        anomalies=len(results.get("anomalies", [])),
        detected=detected,
        all_expected=all_found and case.toggles_on,
        first_witness_s=None if first is None else round(first, 2),
        errors=tuple(results.get("errors", [])),
        restart_unavailable_s=tuple(r["unavailable_s"] for r in restarts),
    )


def run_matrix(
    todo: Sequence[Case],
    store: Path,
    time_limit_s: float | None,
    parallel: int,
    spark: Any = None,
    log: Any = print,
) -> list[Outcome]:
    """Cluster parts in `parallel` worker processes; each run analyzed in one Spark session
    as soon as its cluster part ends. Outcomes in the order of `todo`."""
    from checker.analyze import AnalyzeOptions, analyze_run
    from checker.session import build_session

    owned = spark is None
    session = spark if spark is not None else build_session("local[2]", shuffle_partitions=2)
    t0 = time.monotonic()
    outcomes: dict[int, Outcome] = {}
    try:
        # each run is analyzed as soon as its cluster part ends, while the others still run
        with ProcessPoolExecutor(max_workers=parallel, mp_context=get_context("spawn")) as pool:
            futures = {
                pool.submit(run_test, scenario_options(c, store, time_limit_s)): n
                for n, c in enumerate(todo)
            }
            for future in as_completed(futures):
                n = futures[future]
                case, run_dir = todo[n], Path(future.result().run_dir)
                t1 = time.monotonic()
                # statistics only where the verdict needs them (liveness): they cost time
                opts = AnalyzeOptions(with_stats=UNAVAILABILITY in case.expect)
                results = analyze_run(run_dir, spark=session, options=opts)
                outcome = judge(case, run_dir, results)
                log(
                    f"{case.name:24} seed {case.seed} toggles "
                    f"{'on ' if case.toggles_on else 'off'} valid={outcome.valid!s:7} "
                    f"classes={','.join(outcome.classes) or '-'} detected={outcome.detected} "
                    f"first={outcome.first_witness_s} ({time.monotonic() - t1:.0f} s analysis,"
                    f" {time.monotonic() - t0:.0f} s so far) {run_dir}" + _restarts_note(outcome)
                )
                outcomes[n] = outcome
    finally:
        if owned:
            session.stop()
    return [outcomes[n] for n in sorted(outcomes)]


def _restarts_note(outcome: Outcome) -> str:
    """Seconds each restarted node stayed unavailable (liveness toggles), for the log."""
    if not outcome.restart_unavailable_s:
        return ""
    return " unavailable after restarts: " + ", ".join(
        f"{s:.1f} s" for s in outcome.restart_unavailable_s
    )


def table(outcomes: Sequence[Outcome], seeds: int) -> str:
    """The matrix as a Markdown table, then the controls' false positives."""
    lines = [
        "| toggle | expected | detected (first class) | all classes | median first witness (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    on = [o for o in outcomes if o.case.toggles_on]
    for name in dict.fromkeys(o.case.name for o in on):
        mine = [o for o in on if o.case.name == name]
        times = [o.first_witness_s for o in mine if o.detected and o.first_witness_s is not None]
        median = f"{statistics.median(times):.1f}" if times else "-"
        hits = sum(o.detected for o in mine)
        every = sum(o.all_expected for o in mine)
        lines.append(
            f"| {name} | {', '.join(mine[0].case.expect)} | {hits}/{len(mine)}"
            f" | {every}/{len(mine)} | {median} |"
        )
    off = [o for o in outcomes if not o.case.toggles_on]
    if off:
        lines.append("")
        lines.append("| control (toggles off) | runs | valid | anomalies | clean |")
        lines.append("| --- | --- | --- | --- | --- |")
        for name in dict.fromkeys(o.case.name for o in off):
            mine = [o for o in off if o.case.name == name]
            ok = sum(o.valid is True for o in mine)
            clean = sum(o.detected for o in mine)
            lines.append(
                f"| {name} | {len(mine)} | {ok} | {sum(o.anomalies for o in mine)} | {clean} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--toggles", default="all", help="comma list of toggles, or all")
    p.add_argument("--time-limit", type=float, default=30.0)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--store", type=Path, default=REPO / "store")
    p.add_argument("--no-controls", action="store_true", help="skip the toggle-off runs")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--json", type=Path, help="write every outcome here")
    args = p.parse_args(argv)
    names = list(MATRIX) if args.toggles == "all" else args.toggles.split(",")
    unknown = [n for n in names if n not in MATRIX]
    if unknown:
        p.error(f"unknown toggles {unknown}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    todo = cases(names, seeds, not args.no_controls, not args.no_baseline)
    outcomes = run_matrix(todo, args.store, args.time_limit, args.parallel)
    print(table(outcomes, len(seeds)))
    if args.json:
        args.json.write_text(
            json.dumps([{**o.__dict__, "case": o.case.__dict__} for o in outcomes], indent=1)
        )
    bad = [o for o in outcomes if not o.detected]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
