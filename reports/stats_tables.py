"""The run's statistics as small tables a person reads, computed from the history's columns.

Abort rates by error code and around each DDL activation, latency quantiles per op kind, DDL
latency against its floor DD + CSmax, and schema lag per node (from monitor samples when the
history has them, else from probe answers). The raw numbers stay in results.json.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reports.rundata import OUTCOMES, RunData

AROUND_S = 1.0  # completions within this many seconds of an activation count as around it
MAX_ACTIVATION_ROWS = 60
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Table:
    """One table of the report: an anchor id, a caption, a header and rows of display text."""

    id: str
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "–"


def _ms(value: float) -> str:
    return f"{value:.1f}" if np.isfinite(value) else "–"


def abort_codes(data: RunData) -> Table:
    """Non-ok completions per error code and op kind, as a share of that kind's completions."""
    ops = data.ops
    done = ops.outcome != OUTCOMES.index("pending")
    rows = []
    for f_id, f in enumerate(ops.f_names):
        of_f = done & (ops.f == f_id)
        total = int(of_f.sum())
        bad = of_f & (ops.outcome != 0)
        for code in sorted(set(ops.error[bad].tolist())):
            name = ops.error_names[code] if code >= 0 else "(no code)"
            sel = bad & (ops.error == code)
            fails = int((sel & (ops.outcome == 1)).sum())
            infos = int((sel & (ops.outcome == 2)).sum())
            rows.append((f, name, str(fails), str(infos), _pct(fails + infos, total)))
    return Table(
        "stats-abort-codes",
        "Aborts by error code",
        ("op", "error code", "fail", "info", "share of the op's completions"),
        tuple(rows),
        "" if rows else "Every completed op was ok.",
    )


def around_activations(data: RunData) -> Table:
    """Txn completions within ±AROUND_S of each activation against the run's own rate."""
    ops = data.ops
    if "txn" not in ops.f_names:
        return Table("stats-around", "Txn aborts around activations", (), (), "No txn ops.")
    sel = (ops.f == ops.f_names.index("txn")) & (ops.outcome != OUTCOMES.index("pending"))
    done_at = ops.start_s[sel] + ops.latency_ms[sel] / 1000.0
    bad = ops.outcome[sel] != 0
    order = np.argsort(done_at, kind="stable")
    done_at, bad = done_at[order], bad[order]
    cum_bad = np.concatenate(([0], np.cumsum(bad)))
    overall = _pct(float(bad.sum()), len(bad))
    rows = []
    placed = [a for a in data.activations if a.time_s is not None]
    for a in placed[:MAX_ACTIVATION_ROWS]:
        t = a.time_s or 0.0
        lo, hi = np.searchsorted(done_at, [t - AROUND_S, t + AROUND_S])
        n, aborted = int(hi - lo), int(cum_bad[hi] - cum_bad[lo])
        rows.append((f"v{a.catalog_version}", f"{t:.3f}", a.ddl[:70], str(n), str(aborted),
                     _pct(aborted, n)))  # fmt: skip
    more = len(placed) - len(rows)
    return Table(
        "stats-around",
        f"Txn aborts within ±{AROUND_S:g} s of each DDL activation (whole run: {overall})",
        ("version", "activation (s)", "DDL", "txns completed", "not ok", "share"),
        tuple(rows),
        (f"{more} more activations not shown. " if more > 0 else "")
        + ("" if placed else "No activation could be placed on the run's clock."),
    )


def latency_quantiles(data: RunData) -> Table:
    ops = data.ops
    rows = []
    for f_id, f in enumerate(ops.f_names):
        lat = ops.latency_ms[(ops.f == f_id) & (ops.outcome == 0)]
        if len(lat) == 0:
            continue
        q = np.quantile(lat, QUANTILES)
        rows.append((f, str(len(lat)), *(_ms(v) for v in q), _ms(float(lat.max()))))
    return Table(
        "stats-latency",
        "Latency of ok ops (ms)",
        ("op", "n", *(f"p{round(q * 100)}" for q in QUANTILES), "max"),
        tuple(rows),
    )


def ddl_against_floor(data: RunData) -> Table:
    """Per DDL kind: ok latencies against DD + CSmax; an ack below the floor did not wait."""
    floor = data.ddl_floor_ms
    kinds = np.asarray(data.ddl_kind)
    lat = np.asarray(data.ddl_latency_ms, dtype=np.float64)
    ok = np.asarray(data.ddl_outcome) == "ok"
    rows = []
    for kind in sorted(set(data.ddl_kind)):
        got = lat[(kinds == kind) & ok]
        failed = int(((kinds == kind) & ~ok).sum())
        if len(got) == 0:
            rows.append((kind, "0", str(failed), "–", "–", "–", "–", "–"))
            continue
        below = str(int((got < floor).sum())) if floor is not None else "–"
        ratio = f"{np.median(got) / floor:.2f}" if floor else "–"
        rows.append((kind, str(len(got)), str(failed), _ms(float(got.min())),
                     _ms(float(np.median(got))), _ms(float(got.max())), ratio, below))  # fmt: skip
    floor_text = f"{floor:g} ms" if floor is not None else "unknown (no DD/CSmax in run.json)"
    return Table(
        "stats-ddl",
        f"DDL latency against its floor DD + CSmax = {floor_text}",
        (
            "kind",
            "ok",
            "not ok",
            "min (ms)",
            "median (ms)",
            "max (ms)",
            "median / floor",
            "acked below the floor",
        ),
        tuple(rows),
        "" if rows else "No DDL in the history.",
    )


def _authoritative(data: RunData) -> tuple[list[float], list[int]]:
    placed = sorted((a.time_s, a.catalog_version) for a in data.activations if a.time_s is not None)
    return [t for t, _ in placed], [v for _, v in placed]


def _versions_behind(
    data: RunData, nodes: Sequence[str], times: Sequence[float], values: Sequence[float]
) -> dict[str, list[tuple[float, float]]]:
    """Per node, (time, authoritative version - the node's version) at each observation."""
    act_t, act_v = _authoritative(data)
    out: dict[str, list[tuple[float, float]]] = {}
    for node, t, v in zip(nodes, times, values, strict=True):
        pos = bisect.bisect_right(act_t, t) - 1
        want = act_v[pos] if pos >= 0 else 1
        out.setdefault(node, []).append((t, max(0.0, want - v)))
    return out


def schema_lag(data: RunData) -> Table:
    """Per node: how far its applied catalog version trailed the authoritative one."""
    mon = data.monitor
    if mon.versions.node:
        behind = _versions_behind(data, mon.versions.node, mon.versions.time_s,
                                  mon.versions.value)  # fmt: skip
        lag = np.asarray(mon.lag_ms.value)
        lag_nodes = np.asarray(mon.lag_ms.node)
        rows = []
        for node in sorted(set(behind) | set(mon.errors)):
            obs = sorted(behind.get(node, []))
            steps = [b - a for (a, _), (b, _) in itertools.pairwise(obs)]
            lagging = sum(dt for dt, (_, d) in zip(steps, obs, strict=False) if d > 0)
            node_lag = lag[lag_nodes == node] if len(lag) else lag
            rows.append((
                node,
                str(len(obs)),
                str(sum(1 for _, d in obs if d > 0)),
                f"{max((d for _, d in obs), default=0):g}",
                f"{lagging:.2f}",
                _ms(float(node_lag.max())) if len(node_lag) else "–",
                _ms(float(np.quantile(node_lag, 0.99))) if len(node_lag) else "–",
                str(mon.errors.get(node, 0)),
            ))  # fmt: skip
        return Table(
            "stats-schema-lag",
            f"Schema lag per node ({mon.samples} monitor samples)",
            (
                "node",
                "samples",
                "behind",
                "max versions behind",
                "time behind (s)",
                "max safe lag (ms)",
                "p99 safe lag (ms)",
                "unreadable",
            ),
            tuple(rows),
        )
    probes = data.probe_versions
    if not probes.node:
        return Table("stats-schema-lag", "Schema lag per node", (), (),
                     "No monitor samples or probe answers in the history.")  # fmt: skip
    probe_rows: list[tuple[str, ...]] = []
    wrong: dict[str, list[float]] = {}
    for node, v, want in zip(probes.node, probes.value, data.probe_authoritative.value,
                             strict=True):  # fmt: skip
        wrong.setdefault(node, [])
        if np.isfinite(want):
            wrong[node].append(max(0.0, want - v))
    for node, gaps in sorted(wrong.items()):
        probe_rows.append((node, str(probes.node.count(node)), str(sum(1 for g in gaps if g > 0)),
                     f"{max(gaps, default=0):g}"))  # fmt: skip
    return Table(
        "stats-schema-lag",
        "Schema lag per node (probe answers against cat(ts); the history has no monitor samples)",
        ("node", "probes", "answers behind cat(ts)", "max versions behind"),
        tuple(probe_rows),
    )


def stats_tables(data: RunData) -> list[Table]:
    return [
        abort_codes(data),
        around_activations(data),
        latency_quantiles(data),
        ddl_against_floor(data),
        schema_lag(data),
    ]
