"""Hand-written run directories for the report tests, and the reader's pairing rules they pin.

The history is small and written event by event: a 4-node cluster (n4 a learner) with three
DDLs, a learner partition during which n4 answers a stale catalog version (the ap-violation and
stale-schema-read of results.json), a clock-skew window with recorded offsets, status samples,
txn aborts with error codes and a final read.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reports.rundata import load_run

START_WALL_MS = 1_760_000_000_000
FIRST_INVOKE_S = 0.12  # the first DDL's invoke (safe 200 ms - 80): the workload's 0
DD_MS = 500
CS_MS = 500


def hlc(ms: float, logical: int = 0) -> int:
    """HLC of `ms` milliseconds after the run start."""
    return (START_WALL_MS + int(ms)) << 16 | logical


@dataclass
class HistoryWriter:
    events: list[dict[str, Any]] = field(default_factory=list)

    def _add(self, t_ms: float, ev: dict[str, Any]) -> int:
        ev = {"index": len(self.events), "time": int(t_ms * 1_000_000), **ev}
        self.events.append(ev)
        return ev["index"]

    def invoke(self, t_ms: float, process: int, f: str, value: dict[str, Any]) -> int:
        return self._add(t_ms, {"type": "invoke", "process": process, "f": f, "value": value})

    def complete(
        self,
        t_ms: float,
        process: int,
        type_: str,
        f: str,
        value: dict[str, Any] | None,
        node: str,
        error: dict[str, Any] | None = None,
    ) -> int:
        ev: dict[str, Any] = {"type": type_, "process": process, "f": f, "value": value}
        ev["node"] = node
        if error:
            ev["error"] = error
        return self._add(t_ms, ev)

    def nemesis(self, t_ms: float, f: str, value: dict[str, Any]) -> int:
        return self._add(t_ms, {"type": "info", "process": "nemesis", "f": f, "value": value})

    def monitor(self, t_ms: float, value: dict[str, Any]) -> int:
        return self._add(
            t_ms, {"type": "info", "process": "monitor", "f": "sample", "value": value}
        )


MONITOR_MS = 250
UNREADABLE = {(1750, "n3"), (6000, "n3")}  # samples where the monitor could not read n3


def monitor_sample(ms: float) -> dict[str, Any]:
    """What the controller's monitor reads at `ms` (history.md, "Monitor samples"): the voters'
    safe time trails by 120 ms; the learner n4, cut off from 2 s to 4.5 s, keeps the safe time
    and the catalog version it had when the partition started."""
    value: dict[str, Any] = {}
    for i, node in enumerate(("n1", "n2", "n3", "n4")):
        if (ms, node) in UNREADABLE:
            value[node] = {"error": "TIMEOUT"}
            continue
        cut_off = node == "n4" and 2000 <= ms <= 4500
        safe_ms = 1880 if cut_off else ms - 120
        value[node] = {
            "catalog_version": _cat(safe_ms),
            "safe_ts": hlc(safe_ms),
            "safe_lag_ms": float(ms - safe_ms),
            "role": "leader" if node == "n1" else "learner" if node == "n4" else "follower",
            "term": 2,
            "commit_index": int(ms // 50) - (40 if cut_off else 0),
            "hlc_offset_ms": {"n1": 300.0, "n2": -200.0}.get(node, 0.0)
            if 5200 <= ms <= 7000
            else 0.4 * i,
        }
    return value


# (catalog_version, safe_ms, ddl, t1 schema_version)
CATALOG = [
    (2, 200, "CREATE TABLE t1 (c1 INT32)", 1),
    (3, 2600, "ALTER TABLE t1 ADD COLUMN c2 INT32", 2),
    (4, 5000, "CREATE INDEX i1 ON t1 (c1)", 3),
]


def _tsv(ms: float) -> int | None:
    got = None
    for _, safe, _, sv in CATALOG:
        if safe + DD_MS <= ms:
            got = sv
    return got


def _cat(ms: float) -> int:
    got = 1
    for v, safe, _, _ in CATALOG:
        if safe + DD_MS <= ms:
            got = v
    return got


def _catalog_lines() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {
            "catalog_version": 1,
            "activation_ts": 0,
            "safe_ts": 0,
            "delay_ms": DD_MS,
            "ddl": "",
            "tables": {},
        }
    ]
    cols = [{"id": 1, "name": "c1", "type": "INT32", "nullable": True, "default": None}]
    for v, safe, ddl, sv in CATALOG:
        if v == 3:
            cols = [
                *cols,
                {"id": 2, "name": "c2", "type": "INT32", "nullable": True, "default": None},
            ]
        indexes = [{"name": "i1", "columns": ["c1"], "state": "REGISTERED"}] if v == 4 else []
        table = {"id": 1, "schema_version": sv, "columns": cols, "indexes": indexes}
        lines.append(
            {
                "catalog_version": v,
                "activation_ts": hlc(safe + DD_MS),
                "safe_ts": hlc(safe),
                "delay_ms": DD_MS,
                "ddl": ddl,
                "tables": {"t1": table},
            }
        )
    return lines


@dataclass(frozen=True)
class Fixture:
    run_dir: Path
    ap_events: list[int]
    stale_events: list[int]
    events: list[dict[str, Any]]


def _write(run_dir: Path, name: str, lines: list[dict[str, Any]]) -> None:
    (run_dir / name).write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def run_json(test: str = "fixture-learner-partition") -> dict[str, Any]:
    return {
        "test": test,
        "seed": 42,
        "backend": "local",
        "target": "schemasync",
        "clock": "hlc",
        "nodes": ["n1", "n2", "n3", "n4"],
        "voters": ["n1", "n2", "n3"],
        "learners": ["n4"],
        "config": {
            "delay_duration_ms": DD_MS,
            "max_clock_skew_ms": CS_MS,
            "idle_safe_time_interval_ms": 250,
            "toggles": ["no-safe-time-wait"],
        },
        "nemesis": {"kinds": ["partition-learner", "clock-skew"], "interval_s": 2.5},
        "workload": {"name": "ddl-under-load", "concurrency": 3},
        "start_wall_ms": START_WALL_MS,
        "harness_version": "0.1.0",
    }


def write_anomalous_run(run_dir: Path, results: bool = True, monitor: bool = False) -> Fixture:
    """The learner-partition run; with results=True also its hand-written results.json, with
    monitor=True the controller's monitor samples every 250 ms through the workload."""
    run_dir.mkdir(parents=True, exist_ok=True)
    h = HistoryWriter()
    timeline: list[tuple[float, int, Any]] = []  # (ms, order, action) merged in time order
    h_ms = [0.0]  # the time of the action being run

    def at(ms: float, action: Any) -> None:
        timeline.append((ms, len(timeline), action))

    # DDLs (process 0): ack after activation + CSmax.
    for v, safe, ddl, _ in CATALOG:
        kind = {2: "create_table", 3: "add_column", 4: "create_index"}[v]
        inv = {"stmt": ddl, "table": "t1", "kind": kind}
        ok = {**inv, "catalog_version": v, "activation_ts": hlc(safe + DD_MS)}
        at(safe - 80, lambda inv=inv: h.invoke(h_ms[0], 0, "ddl", inv))
        at(safe + DD_MS + CS_MS + 40, lambda ok=ok: h.complete(h_ms[0], 0, "ok", "ddl", ok, "n1"))
    # Txns (processes 1..3, replaced after an info): single writes on t1.
    proc = {1: 1, 2: 2, 3: 3}
    committed: list[int] = []  # keys of acknowledged writes, for the final read
    for step in range(46):
        for lane in (1, 2, 3):
            ms = 1000 + step * 150 + lane * 17
            node = f"n{lane}"
            key = step * 3 + lane
            write: dict[str, Any] = {
                "ops": [{"op": "w", "table": "t1", "key": key, "row": {"c1": key}}]
            }

            def go(ms=ms, lane=lane, node=node, inv=write, step=step) -> None:
                p = proc[lane]
                h.invoke(ms, p, "txn", inv)
                sv = _tsv(ms + 5) or 1
                done = {
                    "txn_id": f"{node}-{step}",
                    "begin_ts": hlc(ms + 1),
                    "commit_ts": hlc(ms + 9),
                    "ops": [
                        {
                            **inv["ops"][0],
                            "op_ts": hlc(ms + 5),
                            "node": node,
                            "schema_version": sv,
                            "result": None,
                        }
                    ],
                    "tables": {"t1": {"base_ts": hlc(ms + 2), "schema_version": sv}},
                    "participants": [
                        {"node": node, "table": "t1", "partition": 0, "commit_schema_version": sv}
                    ],
                }
                if 3050 <= ms <= 3250 and lane == 2:
                    err = {
                        "code": "INCOMPATIBLE_SCHEMA",
                        "message": "t1 changed",
                        "retriable": True,
                    }
                    h.complete(ms + 30, p, "fail", "txn", {**done, "commit_ts": None}, node, err)
                elif 2300 <= ms <= 2700 and lane == 3:
                    err = {"code": "TIMEOUT", "message": "no reply in 1 s", "retriable": True}
                    h.complete(ms + 1000, p, "info", "txn", {}, node, err)
                    proc[lane] = p + 10
                elif 5200 <= ms <= 5400 and lane == 1:
                    err = {"code": "LOCK_CONFLICT", "message": "key locked", "retriable": True}
                    h.complete(ms + 4, p, "fail", "txn", {**done, "commit_ts": None}, node, err)
                else:
                    h.complete(ms + 12 + (step % 7) * 3, p, "ok", "txn", done, node)
                    committed.append(inv["ops"][0]["key"])

            at(ms, go)
    # Probes from the learner n4 (process 50) every 400 ms; stale while it is cut off.
    witness: dict[str, list[int]] = {"ap": [], "stale": []}
    for step in range(20):
        ms = 300 + step * 400

        def probe(ms=ms) -> None:
            inv_i = h.invoke(ms, 50, "probe", {"table": None, "ts": None})
            stale = 3300 <= ms <= 4300
            cv = 2 if stale else _cat(ms + 2)
            ok = {
                "ts": hlc(ms + 2),
                "catalog_version": cv,
                "table_schema_version": None,
                "columns": None,
            }
            cmp_i = h.complete(ms + 3, 50, "ok", "probe", ok, "n4")
            if stale and cv != _cat(ms + 2):
                witness["ap"].extend([inv_i, cmp_i])
            if stale and ms > 2600 + DD_MS + CS_MS + 40:
                witness["stale"].extend([inv_i, cmp_i])

        at(ms, probe)
    # Status samples (admin.status views recorded by a nemesis event): safe-time lag grows on
    # n4 while it is partitioned; n1/n2 clocks are off during the skew window.
    for step in range(8):
        ms = 500 + step * 1000
        views: dict[str, Any] = {}
        for node in ("n1", "n2", "n3", "n4"):
            lagging = node == "n4" and 2000 <= ms <= 4500
            skew = {"n1": 300, "n2": -200}.get(node, 0) if 5200 <= ms <= 7000 else 0
            views[node] = {
                "hlc_now": hlc(ms + skew),
                "wall_ms": START_WALL_MS + int(ms) + skew,
                "safe_ts": hlc(ms + skew - (ms - 2000 if lagging else 120)),
                "catalog_version": (2 if lagging and ms > 3100 else _cat(ms)),
            }
        at(ms, lambda ms=ms, views=views: h.nemesis(ms, "status", {"views": views}))
    at(
        2000,
        lambda: h.nemesis(
            2000, "start-partition", {"nodes": ["n4"], "grudge": {"n4": ["n1", "n2", "n3"]}}
        ),
    )
    at(4500, lambda: h.nemesis(4500, "stop-partition", {}))
    at(5200, lambda: h.nemesis(5200, "start-clock-skew", {"offsets": {"n1": 0.3, "n2": -0.2}}))
    at(7000, lambda: h.nemesis(7000, "heal-clock-skew", {"offsets": {"n1": 0.0, "n2": 0.0}}))

    if monitor:
        for ms in range(MONITOR_MS, 8000, MONITOR_MS):
            at(ms, lambda ms=ms: h.monitor(ms, monitor_sample(ms)))

    def final_read() -> None:
        h.invoke(8200, 60, "final-read", {"table": "t1"})
        h.complete(
            8230,
            60,
            "ok",
            "final-read",
            {
                "table": "t1",
                "ts": hlc(8210),
                "schema_version": 3,
                "rows": [{"key": k, "row": {"c1": k, "c2": None}} for k in sorted(committed)],
            },
            "n1",
        )

    at(8200, final_read)
    # Run the actions in time order; invokes and completions of one action stay together, so
    # each action writes its own events with their own times (sorted afterwards by time).
    for when, _, action in sorted(timeline, key=lambda x: (x[0], x[1])):
        h_ms[0] = when
        action()
    # Completions written by an action may be later than the next action's invoke: re-sort by
    # time, keep per-process order, and renumber.
    ordered = sorted(h.events, key=lambda e: (e["time"], e["index"]))
    old_to_new = {e["index"]: i for i, e in enumerate(ordered)}
    for i, e in enumerate(ordered):
        e["index"] = i
    ap = sorted(old_to_new[i] for i in witness["ap"])
    stale = sorted(old_to_new[i] for i in witness["stale"])
    _write(run_dir, "history.jsonl", ordered)
    _write(run_dir, "catalog.jsonl", _catalog_lines())
    (run_dir / "run.json").write_text(json.dumps(run_json()), encoding="utf-8")
    if results:
        write_results(
            run_dir,
            {
                "valid": False,
                "anomalies": [
                    {
                        "class": "ap-violation",
                        "events": ap[:2],
                        "nodes": ["n4"],
                        "explanation": "n4 answered catalog version 2 at a timestamp where"
                        " the authoritative catalog is version 3.",
                    },
                    {
                        "class": "stale-schema-read",
                        "events": stale[:2],
                        "nodes": ["n4"],
                        "explanation": "After ADD COLUMN c2 was acknowledged as version 3,"
                        " a probe on n4 still answered version 2.",
                    },
                ],
                "not_applicable": ["index-missing", "index-orphan"],
                "stats": {"ops": 138, "abort_rate": 0.03},
                "errors": [],
            },
        )
    return Fixture(run_dir, ap, stale, ordered)


@functools.cache
def rendered_anomalous_run() -> Fixture:
    """The learner-partition run reported once per test process (report.html, junit, plots)
    for the tests that only read the output; removed at exit."""
    from reports.render import render_report

    root = Path(tempfile.mkdtemp(prefix="reports-fixture-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    fx = write_anomalous_run(root / "run", monitor=True)
    assert render_report(fx.run_dir) == fx.run_dir / "report.html"
    return fx


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    (run_dir / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


def write_unknown_run(run_dir: Path) -> None:
    """A run whose setup failed: run.json, an empty history, an unknown verdict."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(
        json.dumps(run_json("fixture-setup-failed")), encoding="utf-8"
    )
    (run_dir / "history.jsonl").write_text("", encoding="utf-8")
    write_results(
        run_dir,
        {
            "valid": "unknown",
            "anomalies": [],
            "not_applicable": [],
            "stats": {},
            "errors": ["setup failed: node n2 did not become ready within 60 s"],
        },
    )


# ---- the reader's rules, pinned on the fixture ------------------------------------------


def test_reader_pairs_ops_and_windows(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    data = load_run(fx.run_dir)
    invokes = [e for e in fx.events if e["type"] == "invoke"]
    assert len(data.ops) == len(invokes)
    # every op's completion is the next event of its process after the invoke
    assert np.all(data.ops.complete_index > data.ops.invoke_index)
    assert np.all(data.ops.latency_ms >= 0)
    # the workload's clock: 0 is the first client invoke (the first DDL's, at 0.12 s)
    assert data.origin_s == pytest.approx(FIRST_INVOKE_S)
    assert [(w.kind, w.start_s, w.end_s) for w in data.windows] == [
        ("partition", pytest.approx(2.0 - FIRST_INVOKE_S), pytest.approx(4.5 - FIRST_INVOKE_S)),
        ("clock-skew", pytest.approx(5.2 - FIRST_INVOKE_S), pytest.approx(7.0 - FIRST_INVOKE_S)),
    ]
    assert [a.catalog_version for a in data.activations] == [2, 3, 4]
    assert data.activations[1].time_s == pytest.approx(3.1 - FIRST_INVOKE_S)
    assert data.ddl_floor_ms == 1000.0
    assert min(data.ddl_latency_ms) > 1000.0
    codes = {data.ops.error_names[c] for c in data.ops.error if c >= 0}
    assert codes == {"INCOMPATIBLE_SCHEMA", "TIMEOUT", "LOCK_CONFLICT"}
    # the stale answers of n4 differ from cat(ts); every other probe agrees
    wrong = [
        (n, v, a)
        for n, v, a in zip(
            data.probe_versions.node,
            data.probe_versions.value,
            data.probe_authoritative.value,
            strict=True,
        )
        if v != a
    ]
    assert wrong and all(n == "n4" for n, _, _ in wrong)
    assert set(data.clock_offsets_s.node) >= {"n1", "n2"}
    assert max(data.safe_time_lag_ms.value) > 1000
    assert set(data.event_time_s) == set(fx.ap_events[:2]) | set(fx.stale_events[:2])


def test_reader_keeps_a_torn_prefix(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run", results=False)
    text = (fx.run_dir / "history.jsonl").read_text()
    cut = text[: len(text) // 2] + '{"index": 99999, "ti'
    (fx.run_dir / "history.jsonl").write_text(cut)
    data = load_run(fx.run_dir)
    assert 0 < data.event_count < len(fx.events)
    assert "pending" in {("ok", "fail", "info", "pending")[o] for o in data.ops.outcome}


def test_reader_takes_the_nemesis_runner_shapes(tmp_path: Path) -> None:
    """Clock before/after measurements, learner views and fault ids as nemesis/runner.py writes
    them; overlapping faults of one kind pair by their fault id."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    h = HistoryWriter()
    h.nemesis(1000, "start-clock", {
        "kind": "clock", "fault": 1, "mode": "skew", "elapsed_ms": 200.0,
        "written": {"n1": 0.25},
        "before": {"n1": {"rtt_ms": 1.0, "wall_offset_s": 0.0, "hlc_offset_s": 0.0}},
        "after": {"n1": {"rtt_ms": 1.0, "wall_offset_s": 0.251, "hlc_offset_s": 0.251}},
    })  # fmt: skip
    h.nemesis(1500, "start-partition", {"kind": "partition", "fault": 2})
    h.nemesis(1600, "start-partition", {"kind": "partition", "fault": 3})
    h.nemesis(2000, "heal-partition", {"kind": "partition", "fault": 3})
    h.nemesis(2500, "start-lagging-learner", {
        "kind": "lagging-learner", "fault": 4,
        "learners": {"n4": {"applied_index": 10, "safe_ts": hlc(2400)}},
    })  # fmt: skip
    h.nemesis(3000, "stop-clock", {"kind": "clock", "fault": 1, "after": {
        "n1": {"wall_offset_s": 0.001}}})  # fmt: skip
    h.nemesis(4000, "heal-all", {"clock": {"after": {"n1": {"wall_offset_s": 0.0}}}})
    _write(run_dir, "history.jsonl", h.events)
    (run_dir / "run.json").write_text(json.dumps(run_json()), encoding="utf-8")
    data = load_run(run_dir)
    windows = sorted((w.kind, w.start_s, w.end_s) for w in data.windows)
    assert windows == [
        ("clock", 1.0, 3.0),
        ("lagging-learner", 2.5, 4.0),
        ("partition", 1.5, 4.0),
        ("partition", 1.6, 2.0),
    ]
    offsets = list(zip(data.clock_offsets_s.node, data.clock_offsets_s.time_s,
                       data.clock_offsets_s.value, strict=True))  # fmt: skip
    assert ("n1", 0.8, 0.0) in offsets and ("n1", 1.0, 0.251) in offsets
    assert ("n1", 4.0, 0.0) in offsets
    assert list(zip(data.safe_time_lag_ms.node, data.safe_time_lag_ms.value, strict=True)) == [
        ("n4", 100.0)
    ]


def test_reader_clock_starts_at_the_workload(tmp_path: Path) -> None:
    """Setup before the first client invoke (provisioning, an image build) moves nothing: the
    same run with 40 s more before its workload reads the same on the workload's clock."""
    fx = write_anomalous_run(tmp_path / "run")
    late = write_anomalous_run(tmp_path / "late")
    setup_ns = 40_000_000_000
    shifted = [{**e, "time": e["time"] + setup_ns} for e in late.events]
    _write(late.run_dir, "history.jsonl", shifted)
    run = json.loads((late.run_dir / "run.json").read_text())
    run["start_wall_ms"] -= setup_ns // 1_000_000  # time 0 is 40 s earlier; HLCs unchanged
    (late.run_dir / "run.json").write_text(json.dumps(run))
    a, b = load_run(fx.run_dir), load_run(late.run_dir)
    assert b.origin_s == pytest.approx(a.origin_s + 40.0)
    assert b.end_s == pytest.approx(a.end_s) and b.workload_end_s == pytest.approx(a.workload_end_s)
    assert a.workload_end_s < a.end_s  # the final read comes after the workload
    assert np.allclose(a.ops.start_s, b.ops.start_s) and a.ops.start_s.min() == 0.0
    for x, y in zip(a.windows, b.windows, strict=True):
        assert (x.start_s, x.end_s) == (pytest.approx(y.start_s), pytest.approx(y.end_s))
    for act_a, act_b in zip(a.activations, b.activations, strict=True):
        assert act_a.time_s == pytest.approx(act_b.time_s)
    for name in ("probe_versions", "op_version_skew", "clock_offsets_s", "safe_time_lag_ms"):
        sa, sb = getattr(a, name), getattr(b, name)
        assert np.allclose(sa.time_s, sb.time_s), name
        assert np.allclose(sa.value, sb.value), name
    assert b.hlc_to_s(hlc(3100)) == pytest.approx(a.hlc_to_s(hlc(3100)))
    assert a.hlc_to_s(hlc(3100)) == pytest.approx(3.1 - FIRST_INVOKE_S)
