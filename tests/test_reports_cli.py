"""`schemachaos report` as a user meets it: a directory that is not a run is bad input (254,
one line) and stays untouched; a stored run is re-reported from what run.json records."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.test_reports_fixture import write_anomalous_run

REPO = Path(__file__).resolve().parent.parent


def schemachaos(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_report_on_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    """Neither run.json nor history.jsonl: 254, one line naming it, nothing written into it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    stray = tmp_path / "notes"
    stray.mkdir()
    (stray / "notes.txt").write_text("not a run")
    for directory, before in ((empty, []), (stray, ["notes.txt"])):
        proc = schemachaos("report", str(directory))
        assert proc.returncode == 254, proc.stdout + proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, proc.stderr
        assert "not a run directory" in lines[0] and str(directory) in lines[0], lines[0]
        assert sorted(p.name for p in directory.iterdir()) == before


def test_report_of_a_stored_run_reads_expect_from_run_json(tmp_path: Path) -> None:
    """The command on a stored toggle run whose run.json expects what was found: exit 0, a
    junit.xml with no failure (the same judgement `run --gate` made when the run ended)."""
    import json

    fx = write_anomalous_run(tmp_path / "run")
    run = json.loads((fx.run_dir / "run.json").read_text())
    run["expect"] = ["ap-violation", "stale-schema-read"]
    (fx.run_dir / "run.json").write_text(json.dumps(run))
    proc = schemachaos("report", str(fx.run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str((fx.run_dir / "report.html").resolve())
    root = ET.parse(fx.run_dir / "junit.xml").getroot()
    assert (root.get("failures"), root.get("errors")) == ("0", "0")
