"""Plots, report.html and junit.xml from hand-written run directories (no checker needed)."""

from __future__ import annotations

import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports.html import build_report_html
from reports.junit import ANOMALY_CLASSES, junit_tree
from reports.plots import PLOTS
from reports.render import render_report
from reports.rundata import load_run
from tests.conftest import require
from tests.test_reports_fixture import (
    Fixture,
    rendered_anomalous_run,
    write_anomalous_run,
    write_results,
    write_unknown_run,
)

PLOT_NAMES = [name for name, _, _ in PLOTS]


@pytest.fixture
def rendered() -> Fixture:
    return rendered_anomalous_run()


def test_every_plot_renders_png_and_svg(rendered: Fixture) -> None:
    plots = rendered.run_dir / "plots"
    assert len(PLOT_NAMES) == 7
    for name in PLOT_NAMES:
        png, svg = plots / f"{name}.png", plots / f"{name}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert png.stat().st_size > 10_000, f"{name} looks empty"
        root = ET.parse(svg).getroot()
        assert root.tag.endswith("svg"), name
        # the shaded windows and activations are in every time-axis plot: their legend says so
        text = svg.read_text()
        assert "nemesis: partition" in text and "nemesis: clock-skew" in text, name
        assert "DDL activation" in text, name


def test_report_page_has_verdict_anomalies_plots_and_repro(rendered: Fixture) -> None:
    fx = rendered
    page = (fx.run_dir / "report.html").read_text()
    assert "INVALID: 2 anomalies" in page
    assert page.count('class="anomaly"') == 2
    assert f'href="#ev-{fx.ap_events[0]}"' in page
    for name in PLOT_NAMES:
        assert f'id="plot-{name}"' in page
        assert (fx.run_dir / "plots" / f"{name}.svg").exists()
    assert page.count("data:image/png;base64,") == len(PLOT_NAMES)
    assert f"schemachaos repro {fx.run_dir.resolve()}" in page
    assert "start-clock-skew" in page and "no-safe-time-wait" in page
    # self-contained: no URL the browser would fetch
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    payload = re.search(r'<script type="application/json" id="ops-data">(.*?)</script>', page, re.S)
    assert payload is not None
    ops = json.loads(payload.group(1))
    assert ops["total_ops"] == len(ops["inv"]) and not ops["sampled"]
    assert str(fx.ap_events[0]) in ops["witness"]


def test_timeline_downsamples_but_keeps_failures_and_witnesses(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    data = load_run(fx.run_dir)
    page = build_report_html(data, [], "schemachaos repro x", max_ops=40)
    payload = re.search(r'id="ops-data">(.*?)</script>', page, re.S)
    assert payload is not None
    ops = json.loads(payload.group(1))
    assert ops["sampled"] and len(ops["inv"]) < ops["total_ops"]
    assert sum(1 for o in ops["out"] if o != 0) == int((data.ops.outcome != 0).sum())
    shown = set(ops["inv"]) | set(ops["cmp"])
    assert set(fx.ap_events[:2]) <= shown and set(fx.stale_events[:2]) <= shown
    assert ops["inv"] == sorted(ops["inv"])


def test_junit_has_one_failure_per_found_class(rendered: Fixture) -> None:
    fx = rendered
    root = ET.parse(fx.run_dir / "junit.xml").getroot()
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == list(ANOMALY_CLASSES)
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"ap-violation", "stale-schema-read"}
    ap = failed["ap-violation"]
    assert ap is not None and "authoritative catalog is version 3" in (ap.text or "")
    assert str(fx.ap_events[0]) in (ap.text or "")
    skipped = {c.get("name") for c in cases if c.find("skipped") is not None}
    assert skipped == {"index-missing", "index-orphan"}
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        str(len(ANOMALY_CLASSES)),
        "2",
        "0",
    )


def test_junit_valid_run_passes_and_unknown_run_errors(tmp_path: Path) -> None:
    run = {"test": "t", "seed": 1}
    valid = junit_tree({"valid": True, "anomalies": []}, run).getroot()
    assert valid is not None
    assert valid.get("failures") == "0" and valid.get("errors") == "0"
    assert not valid.findall(".//failure") and not valid.findall(".//error")
    write_unknown_run(tmp_path / "unknown")
    render_report(tmp_path / "unknown")
    root = ET.parse(tmp_path / "unknown" / "junit.xml").getroot()
    assert root is not None
    errors = root.findall(".//error")
    assert len(errors) == 1 and "did not become ready" in (errors[0].text or "")
    assert root.get("errors") == "1" and root.get("failures") == "0"
    page = (tmp_path / "unknown" / "report.html").read_text()
    assert "UNKNOWN" in page and "did not become ready" in page


def test_unmatched_class_and_missing_files_still_render(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run", results=False)
    (fx.run_dir / "catalog.jsonl").unlink()
    write_results(
        fx.run_dir,
        {
            "valid": False,
            "anomalies": [
                {"class": "future-class", "events": [3], "nodes": [], "explanation": "x"}
            ],
            "not_applicable": [],
            "stats": {},
            "errors": [],
        },
    )
    render_report(fx.run_dir)
    names = [c.get("name") for c in ET.parse(fx.run_dir / "junit.xml").getroot().iter("testcase")]
    assert names[-1] == "future-class"
    assert len(list((fx.run_dir / "plots").glob("*.png"))) == len(PLOT_NAMES)


def _break_the_contract(run_dir: Path, valid: object) -> str:
    """Make one nemesis event's `f` a number (the report's loader reads it as text) and write
    results of verdict `valid` naming it; returns the error."""
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if json.loads(x).get("process") == "nemesis")
    lines[at] = json.dumps({**json.loads(lines[at]), "f": 7})
    (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n")
    error = f"history.jsonl line {at + 1}: field 'f': 7 is not of type 'string'"
    results = {"valid": valid, "anomalies": [], "not_applicable": [], "stats": {}}
    write_results(run_dir, {**results, "errors": [error] if valid == "unknown" else []})
    return error


def test_a_run_that_breaks_the_contract_gets_its_unknown_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page of a run whose files break the contract shows its verdict and the analyzer's
    error instead of crashing on what it cannot read; where the files follow the contract, a
    failure of the report's own code still surfaces (one injected into the plots here)."""
    fx = write_anomalous_run(tmp_path / "broken", results=False)
    error = _break_the_contract(fx.run_dir, "unknown")
    page = render_report(fx.run_dir).read_text()
    assert "UNKNOWN" in page and error.replace("'", "&#39;") in page, page[:2000]
    errors = ET.parse(fx.run_dir / "junit.xml").getroot().findall(".//error")
    assert len(errors) == 1 and "line" in (errors[0].text or "")
    sound = write_anomalous_run(tmp_path / "sound", results=False)
    write_results(sound.run_dir, {"valid": "unknown", "anomalies": [], "not_applicable": [],
                                  "stats": {}, "errors": ["no final read of t1"]})  # fmt: skip

    def failing_plots(*_: object) -> None:
        raise TypeError("a bug of the report's own")

    monkeypatch.setattr("reports.render.render_plots", failing_plots)
    with pytest.raises(TypeError, match="own"):
        render_report(sound.run_dir)


@pytest.mark.spark
def test_render_analyzes_a_run_without_results(tmp_path: Path) -> None:
    require(importlib.util.find_spec("checker.analyze") is not None, "checker.analyze missing")
    fx = write_anomalous_run(tmp_path / "run", results=False)
    report = render_report(fx.run_dir)
    results = json.loads((fx.run_dir / "results.json").read_text())
    # the hand-written history has these two by construction (n4's stale answers)
    assert results["valid"] is False, results.get("errors")
    found = {a["class"] for a in results["anomalies"]}
    assert {"ap-violation", "stale-schema-read"} <= found
    page = report.read_text()
    assert "INVALID" in page and page.count('class="anomaly"') == len(results["anomalies"])
    failures = ET.parse(fx.run_dir / "junit.xml").getroot().iter("failure")
    assert {f.get("type") for f in failures} == found


# ---- `expect`: the banner, junit.xml and the nightly page agree with `run --gate` ----------


def _expecting(run_dir: Path, expect: list[str], allow: dict[str, str] | None = None) -> None:
    """run.json's `expect` and `allow`, where harness.run writes the scenario's."""
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**run, "expect": expect, "allow": allow or {}}))


def test_expected_classes_found_pass_in_junit_and_banner(tmp_path: Path) -> None:
    """A toggle run that found exactly what its scenario expects is green everywhere: no JUnit
    failure (each expected class passes with its witnesses), a banner that says so."""
    fx = write_anomalous_run(tmp_path / "run")
    _expecting(fx.run_dir, ["ap-violation", "stale-schema-read"])
    render_report(fx.run_dir)
    root = ET.parse(fx.run_dir / "junit.xml").getroot()
    assert (root.get("failures"), root.get("errors")) == ("0", "0")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    ap = cases["ap-violation"].find("system-out")
    assert ap is not None and str(fx.ap_events[0]) in (ap.text or "")
    assert "expected by the scenario" in (ap.text or "")
    page = (fx.run_dir / "report.html").read_text()
    assert 'class="verdict expected"' in page and 'data-gate="pass"' in page
    assert "AS EXPECTED: INVALID: 2 anomalies" in page
    assert "gate: pass" in page


EXPECT_CASES = [
    # expect, allow, gate exit code, junit failures (by testcase name)
    (["ap-violation", "stale-schema-read"], [], 0, set()),
    (["ap-violation"], [], 1, {"stale-schema-read"}),
    (["ap-violation", "stale-schema-read", "lost-write"], [], 1, {"lost-write"}),
    ([], [], 1, {"ap-violation", "stale-schema-read"}),
    (["ap-violation"], ["stale-schema-read"], 0, set()),
    ([], ["stale-schema-read", "lost-write"], 1, {"ap-violation"}),
    ([], ["ap-violation", "stale-schema-read"], 0, set()),
]


@pytest.mark.parametrize(("expect", "allow", "code", "failed"), EXPECT_CASES)
def test_banner_junit_and_nightly_agree_with_the_gate(
    tmp_path: Path, expect: list[str], allow: list[str], code: int, failed: set[str]
) -> None:
    from harness.cli import gate
    from reports.expectation import judge
    from reports.nightly import _judgement

    fx = write_anomalous_run(tmp_path / "run")
    _expecting(fx.run_dir, expect, dict.fromkeys(allow, "a known finding"))
    assert gate(fx.run_dir, expect, allow) == code
    data = load_run(fx.run_dir)
    assert data.results is not None
    root = junit_tree(data.results, data.run).getroot()
    assert root is not None
    failures = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failures == failed
    assert root.get("failures") == str(len(failed))
    page = build_report_html(data, [], "schemachaos repro x")
    assert f'data-gate="{"pass" if code == 0 else "fail"}"' in page
    if expect and code:
        assert "NOT AS EXPECTED" in page
    judgement = _judgement(judge(data.results, expect, allow))
    assert (judgement == "expected") == (code == 0)
    if "lost-write" in failed:  # missed, not merely unexpected
        missed = next(c for c in root.iter("testcase") if c.get("name") == "lost-write")
        failure = missed.find("failure")
        assert failure is not None and failure.get("type") == "missed-expectation"
        assert judgement == "missed"


def test_unknown_verdict_is_never_as_expected(tmp_path: Path) -> None:
    from harness.cli import gate

    write_unknown_run(tmp_path / "unknown")
    _expecting(tmp_path / "unknown", ["ap-violation"])
    assert gate(tmp_path / "unknown", ["ap-violation"]) == 2
    data = load_run(tmp_path / "unknown")
    assert data.results is not None
    root = junit_tree(data.results, data.run).getroot()
    assert root is not None
    assert root.get("errors") == "1" and root.get("failures") == "0"
    assert 'data-gate="unknown"' in build_report_html(data, [], "x")


def test_header_duration_is_the_workload_and_provenance_is_shown(tmp_path: Path) -> None:
    fx = write_anomalous_run(tmp_path / "run")
    run = json.loads((fx.run_dir / "run.json").read_text())
    run["provenance"] = {
        "harness_version": "0.1.0",
        "git_commit": "0123456789abcdef0123",
        "git_dirty": True,
        "target": {"name": "schemasync", "version": "in-tree at 0123456789abcdef0123"},
        "images": {"node": "schemachaos-node:feedc0ffee"},
        "python": "CPython 3.11.2",
        "pyspark": "4.3.0",
        "java": 'openjdk version "17.0.15" 2025-04-15',
    }
    (fx.run_dir / "run.json").write_text(json.dumps(run))
    data = load_run(fx.run_dir)
    page = build_report_html(data, [], "x")
    assert f"workload {data.workload_end_s:.1f} s (setup 0.1 s before it" in page
    assert "harness 0.1.0 at 0123456789ab (dirty)" in page
    for text in ("schemachaos-node:feedc0ffee", "CPython 3.11.2", "4.3.0", "17.0.15"):
        assert text in page, text


def test_run_data_is_text_never_markup(tmp_path: Path) -> None:
    """The page is autoescaped: an explanation or a DDL from a history cannot inject markup,
    and the embedded ops JSON cannot close its <script> element."""
    fx = write_anomalous_run(tmp_path / "run")
    results = json.loads((fx.run_dir / "results.json").read_text())
    results["anomalies"][0]["explanation"] = "<img src=x onerror=alert(1)> & </script>"
    write_results(fx.run_dir, results)
    page = build_report_html(load_run(fx.run_dir), [], "schemachaos repro '<b>'")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt; &amp;" in page
    assert "&#39;&lt;b&gt;&#39;" in page
    payload = re.search(r'id="ops-data">(.*?)</script>', page, re.S)
    assert payload is not None and "</script>" not in payload.group(1)
