"""timeline.html, the anomaly pictures, monitor samples and the statistics tables, on the
hand-written learner-partition run (tests/test_reports_fixture.py)."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from reports.anomaly_pictures import anomaly_pictures
from reports.html import build_report_html
from reports.plots import ACTIVATION_COLOUR, nemesis_colours, plot_ddl_latency, plot_latency_raw
from reports.process_timeline import build_timeline_html, timeline_payload
from reports.rundata import OUTCOMES, load_run
from reports.stats_tables import ddl_against_floor, schema_lag, stats_tables
from tests.test_reports_fixture import (
    FIRST_INVOKE_S,
    Fixture,
    rendered_anomalous_run,
    write_anomalous_run,
    write_results,
)

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def rendered() -> Fixture:
    return rendered_anomalous_run()


def _payload(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="pt-data">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


# ---- the per-process timeline ------------------------------------------------------------


def test_timeline_is_written_beside_the_report_and_linked(rendered: Fixture) -> None:
    page = (rendered.run_dir / "timeline.html").read_text()
    report = (rendered.run_dir / "report.html").read_text()
    assert 'id="timeline-link" href="timeline.html"' in report
    assert 'href="report.html"' in page
    # self-contained: the script is inline and nothing is fetched
    assert "<script src" not in page and not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    data = _payload(page)
    invokes = sum(1 for e in rendered.events if e["type"] == "invoke")
    assert len(data["start"]) == invokes
    assert [f["kind"] for f in data["faults"]] == ["partition", "clock-skew"]
    assert [a["v"] for a in data["activations"]] == [2, 3, 4]
    assert len(data["acks"]) == 3  # every DDL was acknowledged
    # the witnesses of both anomalies are marked: 4 events, the invoke and completion of 2 probes
    assert len(data["witness"]) == 2
    assert {data["proc"][i] for i in data["witness"]} == {50}


def test_one_process_per_lane_at_a_time(rendered: Fixture) -> None:
    """Lanes are processes; a replacement after an `info` continues in a free lane, and no
    two ops in one lane ever overlap (the drawing would hide one of them)."""
    data = _payload((rendered.run_dir / "timeline.html").read_text())
    lanes: dict[int, set[int]] = {}
    for lane, proc in zip(data["lane"], data["proc"], strict=True):
        lanes.setdefault(lane, set()).add(proc)
    procs = set(data["proc"])
    assert set().union(*lanes.values()) == procs
    assert all(sum(proc in ps for ps in lanes.values()) == 1 for proc in procs)
    assert 0 not in lanes  # lane 0 is the nemesis
    assert data["lanes"][0] == "nemesis" and len(data["lanes"]) == len(lanes) + 1
    # the final reader (60) reuses the lane of the DDL process (0), done long before
    assert len(lanes) < len(procs)
    assert "p0 +1" in data["lanes"]
    for lane in lanes:
        bars = sorted(
            (s, e)
            for s, e, ln in zip(data["start"], data["end"], data["lane"], strict=True)
            if ln == lane
        )
        for (_, end), (start, _) in itertools.pairwise(bars):
            assert start >= end, (lane, data["lanes"][lane])


def test_a_txn_straddling_an_activation_is_crossed_by_its_marker(rendered: Fixture) -> None:
    """Process 3's timed-out txn (2.4 s .. 3.4 s on the fixture's clock) is open when v3
    activates (3.1 s): its bar spans the activation's marker; the ok txns beside it do not."""
    data = _payload((rendered.run_dir / "timeline.html").read_text())
    v3 = next(a for a in data["activations"] if a["v"] == 3)
    assert v3["t"] == round((3.1 - FIRST_INVOKE_S) * 1000)
    info = OUTCOMES.index("info")
    crossed = [
        i
        for i in range(len(data["start"]))
        if data["start"][i] < v3["t"] < data["end"][i]
        and data["f"][i] == data["f_names"].index("txn")
    ]
    assert crossed and all(data["out"][i] == info for i in crossed)
    assert {data["proc"][i] for i in crossed} <= {3, 13}
    ok_near = [
        i
        for i in range(len(data["start"]))
        if data["out"][i] == 0 and abs(data["start"][i] - v3["t"]) < 200
    ]
    assert ok_near and not any(data["start"][i] < v3["t"] < data["end"][i] for i in ok_near)


def test_timeline_text_is_escaped(tmp_path: Path) -> None:
    """A test name, a table name or a DDL from a run cannot become markup or close the data's
    <script> element."""
    fx = write_anomalous_run(tmp_path / "run")
    hostile = "</script><img src=x onerror=alert(1)>"
    lines = (fx.run_dir / "history.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    for ev in events:
        if ev["f"] == "txn" and ev["type"] == "invoke":
            ev["value"]["ops"][0]["table"] = hostile
            break
    (fx.run_dir / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    data = load_run(fx.run_dir)
    page = build_timeline_html(data, f"test {hostile}")
    assert "&lt;/script&gt;&lt;img src=x" in page  # the title, as text
    found = re.search(r'id="pt-data">(.*?)</script>', page, re.S)
    assert found is not None and "</script>" not in found.group(1)
    markup = page.replace(found.group(0), "")
    assert "<img src=x" not in markup
    assert any(hostile in s for s in json.loads(found.group(1))["sum"])


def test_timeline_payload_of_an_empty_history(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "history.jsonl").write_text("")
    payload = timeline_payload(load_run(run_dir))
    assert payload["lanes"] == ["nemesis"] and payload["start"] == []


# ---- one picture per anomaly -------------------------------------------------------------


def _svg(path: Path) -> ET.Element:
    text = path.read_text()
    assert text.startswith("<?xml")
    return ET.fromstring(text.split("\n", 1)[1])


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_each_anomaly_has_its_svg_file_and_inline_picture(rendered: Fixture) -> None:
    out = rendered.run_dir / "anomalies"
    assert sorted(p.name for p in out.iterdir()) == [
        "ap-violation-1.svg",
        "stale-schema-read-2.svg",
    ]
    report = (rendered.run_dir / "report.html").read_text()
    assert report.count('<svg xmlns="http://www.w3.org/2000/svg" class="anomaly-picture"') == 2
    assert 'href="anomalies/ap-violation-1.svg"' in report
    root = _svg(out / "ap-violation-1.svg")
    texts = _texts(root)
    probe = rendered.ap_events[0]
    assert f"#{probe} p50 probe on n4" in texts
    assert "DDL v3" in texts and "v3 acked" in texts and "v3 activation_ts" in texts
    assert [t for t in texts if t.endswith("safe time")] == [
        f"n{i} safe time" for i in (1, 2, 3, 4)
    ]


def _x_of_line(root: ET.Element, label: str) -> float:
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "ddl-line" and any(t.text == label for t in g.iter(f"{SVG}text")):
            line = g.find(f"{SVG}line")
            assert line is not None
            return float(line.get("x1", "nan"))
    raise AssertionError(f"no line labelled {label}")


def test_picture_places_the_witness_after_the_activation_and_n4_behind(rendered: Fixture) -> None:
    """The ap-violation: n4 answered at a ts after v3's activation while its safe time had not
    passed it; the voters' safe time had. The picture says so in its geometry."""
    root = _svg(rendered.run_dir / "anomalies" / "ap-violation-1.svg")
    activation, ack = _x_of_line(root, "v3 activation_ts"), _x_of_line(root, "v3 acked")
    assert activation < ack  # the ack waits CSmax after the activation
    probe_ts = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "mark ts"]
    assert len(probe_ts) == 1 and float(probe_ts[0].get("cx", "nan")) > activation
    rows = {
        next(t.text for t in g.iter(f"{SVG}text")): g
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "safe-row"
    }

    def past(node: str) -> list[bool]:
        return [
            (r.get("fill") or "") == "#4c9a6a" for r in rows[f"{node} safe time"].iter(f"{SVG}rect")
        ]

    assert any(past("n1")) and not all(past("n1"))  # n1 passes v3 inside the picture
    assert not any(past("n4"))  # n4 never does: it is cut off
    for label, row in rows.items():  # a crossing mark exactly where a node passes
        assert (row.find(f"{SVG}line") is not None) == (label != "n4 safe time"), label


def test_without_monitor_samples_the_picture_says_so(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    pictures = anomaly_pictures(load_run(fx.run_dir))
    assert [p.file_name for p in pictures] == ["ap-violation-1.svg", "stale-schema-read-2.svg"]
    assert "safe-row" not in pictures[0].svg
    assert "no monitor samples in the history" in pictures[0].svg


def test_an_anomaly_without_op_witnesses_has_no_picture(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    results = json.loads((fx.run_dir / "results.json").read_text())
    results["anomalies"][0]["events"] = []
    results["anomalies"][1]["events"] = [10**9]  # not in the history
    write_results(fx.run_dir, results)
    assert anomaly_pictures(load_run(fx.run_dir)) == []


def test_picture_text_is_escaped(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run", monitor=True)
    results = json.loads((fx.run_dir / "results.json").read_text())
    results["anomalies"][0]["class"] = 'x"/><script>alert(1)</script>'
    results["anomalies"][0]["explanation"] = "<img src=x onerror=alert(1)> & more"
    write_results(fx.run_dir, results)
    data = load_run(fx.run_dir)
    picture = anomaly_pictures(data)[0]
    assert "<img" not in picture.svg and "<script>" not in picture.svg
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; more" in picture.svg
    assert "/" not in picture.file_name and picture.file_name.endswith("-1.svg")
    ET.fromstring(str(picture.svg))  # still well-formed XML
    page = build_report_html(data, [], "x")
    assert "<script>alert(1)" not in page


# ---- monitor samples ---------------------------------------------------------------------


def test_monitor_samples_are_the_lag_and_version_series(tmp_path: Path) -> None:
    with_mon = load_run(write_anomalous_run(tmp_path / "mon", monitor=True).run_dir)
    without = load_run(write_anomalous_run(tmp_path / "plain").run_dir)
    samples = len(range(250, 8000, 250))
    assert with_mon.monitor.samples == samples and without.monitor.samples == 0
    assert dict(with_mon.monitor.errors) == {"n3": 2}  # unreadable, counted, not plotted
    lag = with_mon.safe_time_lag_ms
    assert len(lag.node) == samples * 4 - 2
    assert np.diff(sorted(set(lag.time_s))) == pytest.approx(0.25)
    n4 = [v for n, v in zip(lag.node, lag.value, strict=True) if n == "n4"]
    assert max(n4) == pytest.approx(4500 - 1880) and min(n4) == pytest.approx(120)
    # without a monitor the nemesis-time status views stay the source (8 per node)
    assert len(without.safe_time_lag_ms.node) == 8 * 4
    assert len(with_mon.status_versions.node) == samples * 4 - 2
    assert len(with_mon.monitor.safe_s.node) == samples * 4 - 2
    # safe time on the workload's clock: the voters' trails the sample by 120 ms
    first = with_mon.monitor.safe_s
    assert first.value[0] == pytest.approx(first.time_s[0] - 0.12)


# ---- plots and statistics ----------------------------------------------------------------


def test_activations_are_ticks_on_the_axis_not_full_height_lines(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    data = load_run(write_anomalous_run(tmp_path / "run").run_dir)
    fig = plot_latency_raw(data)
    try:
        ax = fig.axes[0]
        ticks = [
            line
            for line in ax.lines
            if line.get_marker() == "|" and line.get_color() == ACTIVATION_COLOUR
        ]
        assert len(ticks) == 1 and np.asarray(ticks[0].get_xdata()).shape == (3,)
        assert set(np.asarray(ticks[0].get_ydata())) == {0.0}  # on the axis
        segments = [c for c in ax.collections if hasattr(c, "get_segments") and c.get_segments()]
        assert not segments, "a full-height activation line is back"
    finally:
        plt.close(fig)


def test_ddl_kinds_differ_in_colour_and_marker(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    data = load_run(write_anomalous_run(tmp_path / "run").run_dir)
    fig = plot_ddl_latency(data)
    try:
        kinds = {"create_table", "add_column", "create_index"}
        drawn = [c for c in fig.axes[0].collections if c.get_label() in kinds]
        assert len(drawn) == 3
        colours = {np.asarray(c.get_facecolor())[0, :3].round(3).tobytes() for c in drawn}
        markers = {np.asarray(c.get_paths()[0].vertices).round(3).tobytes() for c in drawn}
        assert len(colours) == 3 and len(markers) == 3
    finally:
        plt.close(fig)


def test_fault_kinds_get_distant_colours() -> None:
    kinds = {"partition", "clock", "pause", "kill", "delay", "lagging-learner", "brand-new"}
    colours = nemesis_colours(kinds)
    assert set(colours) == kinds
    rgb = [np.array(to_rgb(c)) for c in colours.values()]
    closest = min(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(rgb, 2))
    assert closest > 0.25, colours  # the old clock/pause cyans were 0.15 apart


def test_statistics_are_tables_not_a_json_block(rendered: Fixture) -> None:
    page = (rendered.run_dir / "report.html").read_text()
    for table in ("abort-codes", "around", "latency", "ddl", "schema-lag"):
        assert f'id="stats-{table}"' in page, table
    assert '"abort_rate": 0.03' not in page  # results.json's stats are linked, not dumped
    data = load_run(rendered.run_dir)
    tables = {t.id: t for t in stats_tables(data)}
    codes = {row[1] for row in tables["stats-abort-codes"].rows}
    assert codes == {"INCOMPATIBLE_SCHEMA", "TIMEOUT", "LOCK_CONFLICT"}
    around = tables["stats-around"].rows
    assert [r[0] for r in around] == ["v2", "v3", "v4"]
    assert int(around[1][4]) >= 2  # the aborts near v3 (INCOMPATIBLE_SCHEMA, TIMEOUT)


def test_schema_lag_table_reads_the_monitor_else_the_probes(rendered: Fixture, tmp_path: Path):
    mon = schema_lag(load_run(rendered.run_dir))
    assert "monitor samples" in mon.caption
    rows = {r[0]: r for r in mon.rows}
    assert set(rows) == {"n1", "n2", "n3", "n4"}
    behind_s = {n: float(r[4]) for n, r in rows.items()}
    # voters trail one 250 ms sample per activation; n4 is behind through its partition too
    assert behind_s["n1"] == pytest.approx(0.5) and behind_s["n4"] >= behind_s["n1"] + 1.25
    assert rows["n3"][-1] == "2" and rows["n4"][-1] == "0"  # unreadable samples
    probes = schema_lag(load_run(write_anomalous_run(tmp_path / "run").run_dir))
    assert "probe answers" in probes.caption
    assert [(r[0], r[3]) for r in probes.rows] == [("n4", "1")]


def test_ddl_table_counts_acks_below_the_floor(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    data = load_run(fx.run_dir)
    assert {r[0]: r[-1] for r in ddl_against_floor(data).rows} == {
        "add_column": "0",
        "create_index": "0",
        "create_table": "0",
    }
    run = json.loads((fx.run_dir / "run.json").read_text())
    run["config"]["delay_duration_ms"] = 2000  # a floor no ack in this run waited for
    (fx.run_dir / "run.json").write_text(json.dumps(run))
    raised = ddl_against_floor(load_run(fx.run_dir))
    assert {r[-1] for r in raised.rows} == {"1"} and "2500 ms" in raised.caption


def test_the_checkers_unavailability_is_a_table_on_the_workloads_clock(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    data = load_run(fx.run_dir)
    assert 'id="stats-unavailability"' not in build_report_html(data, [], "x")
    results = json.loads((fx.run_dir / "results.json").read_text())
    window = {"node": "n4", "from_s": 2.12, "to_s": 4.62, "duration_s": 2.5}
    results["stats"]["unavailability"] = [window, {"node": "n9", "from_s": "bad"}]
    write_results(fx.run_dir, results)
    page = build_report_html(load_run(fx.run_dir), [], "x")
    table = re.search(r'id="stats-unavailability">(.*?)</table>', page, re.S)
    assert table is not None
    assert re.findall(r"<td>(.*?)</td>", table.group(1)) == ["n4", "2.000", "4.500", "2.500"]
