"""report.html opened in headless Chromium (Debian's chromium + chromedriver, via selenium)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reports.plots import PLOTS
from tests.conftest import require
from tests.test_reports_fixture import rendered_anomalous_run

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

pytestmark = pytest.mark.browser


@pytest.fixture
def browser() -> Iterator[Any]:
    require(
        Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(),
        "Debian chromium and chromium-driver are not installed",
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.add_argument("--disable-dev-shm-usage")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, script: str, timeout: float = 20.0) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def test_report_in_chromium(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    fx = rendered_anomalous_run()
    report = fx.run_dir / "report.html"
    browser.get(report.resolve().as_uri())
    verdict = browser.find_element(By.ID, "verdict")
    assert "invalid" in (verdict.get_attribute("class") or "")
    assert verdict.text.startswith("INVALID: 2 anomalies")
    rows = browser.find_elements(By.CSS_SELECTOR, "#anomaly-table tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, ".cls").text for r in rows] == [
        "ap-violation",
        "stale-schema-read",
    ]
    # every plot is present and its image decoded
    for name, _, _ in PLOTS:
        img = browser.find_element(By.CSS_SELECTOR, f"#plot-{name} img")
        width = browser.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", img
        )
        assert width and width > 300, name
    # the timeline view loads and pages the ops
    _wait(browser, "return document.getElementById('timeline').dataset.ready === '1'")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tl-body tr")) == 100
    invokes = sum(1 for e in fx.events if e["type"] == "invoke")
    shown = browser.find_element(By.ID, "tl-page").text
    assert f"{invokes} of {invokes} ops shown" in shown
    # a witness link jumps to its op in the timeline and shows the raw event
    witness = fx.ap_events[1]
    browser.find_element(By.CSS_SELECTOR, f'#anomaly-table a.ev[data-ev="{witness}"]').click()
    focus = browser.find_element(By.CSS_SELECTOR, "#tl-body tr.focus")
    assert focus.find_element(By.CSS_SELECTOR, "td").text.endswith(str(witness))
    assert '"catalog_version": 2' in browser.find_element(By.ID, "tl-detail").text
    # the filters narrow the table: only failed ops
    browser.find_element(By.CSS_SELECTOR, "#tl-out option[value='1']").click()
    outcomes = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#tl-body td.out")}
    assert outcomes == {"fail"}
    # nothing failed in the console (no blocked fetch, no script error)
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs
    ARTIFACTS.mkdir(exist_ok=True)
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(ARTIFACTS / "report-top.png"))
    browser.execute_script("document.getElementById('timeline').scrollIntoView()")
    assert browser.save_screenshot(str(ARTIFACTS / "report-timeline.png"))
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(int(height), 9000))
    assert browser.save_screenshot(str(ARTIFACTS / "report.png"))
    shutil.copy(report, ARTIFACTS / "report.html")


def test_nightly_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    """The nightly page (templates/nightly.html) as a person opens it: the night's verdict,
    the detection table and a row per cell, coloured by its judgement, with no script error."""
    from selenium.webdriver.common.by import By

    from reports.nightly import _summary_html

    row = {
        "night": "20260101T000000",
        "cell": "no-ack-wait--none--s1",
        "valid": False,
        "judgement": "expected",
        "expect": ["stale-schema-read"],
        "classes": ["stale-schema-read"],
        "missed_classes": [],
        "unexpected_classes": [],
        "txn_abort_rate": 0.02,
        "txn_p50_ms": 3.0,
        "txn_p99_ms": 40.0,
        "ddl_p50_ms": 1300.0,
        "ddl_p99_ms": 1500.0,
        "abort_codes": {"INCOMPATIBLE_SCHEMA": 3},
        "run_dir": "/store/no-ack-wait/20260101T000000",
        "error": None,
    }
    detection = {
        "expect": ["stale-schema-read"],
        "runs": 1,
        "expected": 1,
        "missed": 0,
        "unexpected": 0,
        "unknown": 0,
        "detection_rate": 1.0,
        "classes": {"stale-schema-read": 1},
    }
    summary = {"night": row["night"], "runs": [row], "detection": {"no-ack-wait": detection}}
    page = tmp_path / "summary.html"
    page.write_text(_summary_html(summary, [], 0), encoding="utf-8")
    browser.get(page.resolve().as_uri())
    assert browser.find_element(By.ID, "verdict").text == "Nightly 20260101T000000: PASS"
    cells = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr.cell.expected")
    assert len(cells) == 1 and "stale-schema-read" in cells[0].text
    assert "100.0%" in browser.find_element(By.ID, "detection").text
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "nightly.png"))


def test_timeline_and_anomaly_picture_in_chromium(browser: Any) -> None:
    """timeline.html draws, zooms to v3's activation and finds the txn that straddles it under
    the mouse; the anomaly picture renders inline and as its own SVG file. Screenshots of each
    are kept in test-artifacts/."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    fx = rendered_anomalous_run()
    ARTIFACTS.mkdir(exist_ok=True)
    browser.get((fx.run_dir / "timeline.html").resolve().as_uri())
    _wait(browser, "return document.body.dataset.ready === '1'")
    data = browser.execute_script(
        "return JSON.parse(document.getElementById('pt-data').textContent)"
    )
    # something was drawn: the canvas holds many pixels of the ok colour
    green = browser.execute_script(
        """const c = document.getElementById('pt-canvas'), g = c.getContext('2d');
        const px = g.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < px.length; i += 4)
          if (px[i] === 0x2c && px[i + 1] === 0xa0 && px[i + 2] === 0x2c) n++;
        return n;"""
    )
    assert green > 2_000, green
    assert browser.save_screenshot(str(ARTIFACTS / "timeline.png"))
    v3 = next(a for a in data["activations"] if a["v"] == 3)
    browser.execute_script(f"ptZoomTo({v3['t'] - 700}, {v3['t'] + 700})")
    straddling = next(
        i
        for i in range(len(data["start"]))
        if data["start"][i] < v3["t"] < data["end"][i] and data["proc"][i] == 3
    )
    x, y = browser.execute_script(f"return ptXY({v3['t']}, {data['lane'][straddling]})")
    canvas = browser.find_element(By.ID, "pt-canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(x - canvas.size["width"] / 2), int(y - canvas.size["height"] / 2)
    ).perform()
    tip = browser.find_element(By.ID, "pt-tip")
    assert tip.is_displayed()
    assert f"event {data['inv'][straddling]}  process 3  txn  info" in tip.text
    assert browser.find_element(By.ID, "pt-range").text.startswith(f"{(v3['t'] - 700) / 1000:.3f}")
    assert browser.save_screenshot(str(ARTIFACTS / "timeline-zoomed.png"))
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs
    # the anomaly pictures: inline in the report, and each file opens as an SVG document
    browser.get((fx.run_dir / "report.html").resolve().as_uri())
    figure = browser.find_element(By.ID, "picture-1")
    assert figure.find_element(By.CSS_SELECTOR, "svg.anomaly-picture").size["width"] > 500
    browser.execute_script("arguments[0].scrollIntoView()", figure)
    assert figure.screenshot(str(ARTIFACTS / "anomaly-picture.png"))
    stats = browser.find_element(By.ID, "stats")
    browser.execute_script("arguments[0].scrollIntoView()", stats)
    assert stats.screenshot(str(ARTIFACTS / "report-stats.png"))
    browser.get((fx.run_dir / "anomalies" / "ap-violation-1.svg").resolve().as_uri())
    assert browser.execute_script("return document.documentElement.localName") == "svg"
    assert browser.save_screenshot(str(ARTIFACTS / "anomaly-ap-violation-1.png"))
