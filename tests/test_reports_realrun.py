"""Every plot renders from a real short run: local node processes, a clock nemesis, no mocks."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports.plots import PLOTS, render_plots
from reports.process_timeline import build_timeline_html, timeline_payload
from reports.rundata import load_run


@pytest.mark.cluster
def test_every_plot_renders_from_a_real_short_run(tmp_path: Path) -> None:
    from harness.run import RunOptions, run_test

    outcome = run_test(
        RunOptions(
            backend="local",
            nodes=3,
            voters=3,
            time_limit_s=6,
            concurrency=2,
            nemesis=("clock",),
            nemesis_interval_s=2,
            seed=3,
            store=tmp_path / "store",
            no_analyze=True,
            test_name="reports-real",
            local_base="127.0.83.10",  # away from the addresses other tests use
        )
    )
    log = outcome.run_dir / "controller.log"
    why = log.read_text()[-3000:] if log.exists() else "no controller.log"
    data = load_run(outcome.run_dir)
    assert len(data.ops) >= 5, f"the run recorded (almost) no ops:\n{why}"
    assert data.activations, "catalog.jsonl has no DDL"
    assert any(w.kind == "clock" for w in data.windows)
    assert data.clock_offsets_s.node, "the clock nemesis measurements were not read"
    files = render_plots(data, outcome.run_dir / "plots")
    assert [f.name for f in files] == [name for name, _, _ in PLOTS]
    for f in files:
        assert f.png.read_bytes()[:4] == b"\x89PNG" and f.png.stat().st_size > 10_000
        assert ET.parse(f.svg).getroot().tag.endswith("svg")
    # the per-process timeline: every client process in a lane, every activation placed
    payload = timeline_payload(data)
    assert set(payload["proc"]) == set(data.ops.process.tolist())
    placed = [a for a in data.activations if a.time_s is not None]
    assert placed and len(payload["activations"]) == len(placed)
    assert len(payload["lanes"]) <= 1 + len(set(payload["proc"]))
    assert "pt-data" in build_timeline_html(data, "reports-real")
    # the controller's monitor samples (every 250 ms) are the lag series the plot draws
    assert data.monitor.samples >= 10, "no monitor samples read"
    lag_nodes = set(data.safe_time_lag_ms.node)
    assert lag_nodes and lag_nodes <= {str(n) for n in data.run.get("nodes") or []}
    times = sorted(set(data.monitor.lag_ms.time_s))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.2 <= sorted(gaps)[len(gaps) // 2] <= 0.4, gaps
