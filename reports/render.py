"""`schemachaos report RUN_DIR [--out DIR]`: report.html, junit.xml and plots/ written into the
run directory, or into DIR (with a copy of the verdict the page links to).

A run without results.json is analyzed first (checker.analyze.analyze_run), so a stored run can
always be re-reported; a checker crash still leaves a page saying why, then propagates. A
directory the pages cannot be written to is named before anything is analysed or drawn.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

from contract.rundir import CATALOG, HISTORY, REPORT, RESULTS, RUN_JSON
from reports.anomaly_pictures import AnomalyPicture, anomaly_pictures
from reports.html import build_report_html, page_title
from reports.junit import write_junit
from reports.plots import render_plots
from reports.process_timeline import build_timeline_html
from reports.rundata import NotARunDirectory, RunData, is_run_dir, load_run

XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>\n'
# What reading files that break the contract raises (a field of another type, a value out of
# range); the analyzer's errors say where.
MALFORMED = (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class UnusableResults(ValueError):
    """results.json is there but is no verdict (not JSON, not an object, cannot be read):
    one line naming it; nothing is rendered from it."""


class UnreadableRun(Exception):
    """A file of the run that the pages read is not a regular file (a FIFO would block the
    read forever, a directory fails it) or cannot be read: one line naming it."""


class ReportNotWritten(Exception):
    """The report's directory takes no file (a read-only mount, no permission, not a
    directory): one line naming it and the way out (`--out`)."""


def writable_report_dir(out_dir: Path) -> None:
    """Make out_dir if missing and prove it takes a file (a probe, made and removed: the mount
    and the process's capabilities decide, not the mode bits); ReportNotWritten otherwise."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportNotWritten(f"{out_dir}: not a directory; name another directory with --out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".report-probe-", dir=out_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ReportNotWritten(_not_written(out_dir, e)) from None


def _not_written(path: Path | str, e: OSError) -> str:
    why = e.strerror or type(e).__name__
    return f"{path}: the report cannot be written there ({why}); name another directory with --out"


def _stored_results(path: Path) -> dict[str, Any]:
    """The verdict in results.json; UnusableResults naming the file and why it is none."""
    again = "(`schemachaos analyze` writes it again)"
    try:
        with path.open(encoding="utf-8") as fh:
            results = json.load(fh)
    except json.JSONDecodeError as e:
        raise UnusableResults(f"{path}: not JSON (line {e.lineno}: {e.msg}) {again}") from None
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise UnusableResults(f"{path}: cannot be read ({why}) {again}") from None
    if not isinstance(results, dict):
        kind = type(results).__name__
        raise UnusableResults(f"{path}: not a JSON object (a {kind}) {again}")
    problem = _verdict_problem(results)
    if problem is not None:
        raise UnusableResults(f"{path}: {problem} {again}")
    return results


# the verdict's fields the pages read and the JSON each must be (anomalies.md "results.json")
_VERDICT_LISTS = ("anomalies", "errors", "not_applicable")


def _verdict_problem(results: dict[str, Any]) -> str | None:
    """Why a results.json object is no verdict the pages can show (None: it is one). Only
    what is there is checked: a field left out is shown as absent."""
    valid = results.get("valid", "unknown")
    if not (isinstance(valid, bool) or valid == "unknown"):
        return f'valid: {json.dumps(valid)[:40]} where true, false or "unknown" is due'
    for key in _VERDICT_LISTS:
        if key in results and not isinstance(results[key], list):
            return f"{key}: a {_json_kind(results[key])} where a list is due"
    if "stats" in results and not isinstance(results["stats"], dict):
        return f"stats: a {_json_kind(results['stats'])} where an object is due"
    for i, anomaly in enumerate(results.get("anomalies") or []):
        if not isinstance(anomaly, dict):
            return f"anomalies[{i}]: a {_json_kind(anomaly)} where an object is due"
        if not isinstance(anomaly.get("events", []), list):
            return f"anomalies[{i}].events: a {_json_kind(anomaly['events'])} where a list is due"
    return None


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _readable_files(run_dir: Path) -> None:
    """Each file of the run the pages read is a regular file or absent (UnreadableRun): a
    FIFO there would block the read forever, before any timeout could say so."""
    for name in (RUN_JSON, HISTORY, CATALOG, RESULTS):
        path = run_dir / name
        if os.path.lexists(path) and not path.is_file():
            what = "a directory" if path.is_dir() else "not a regular file"
            raise UnreadableRun(f"{path}: {what}, where the run's {name} is due")


def _results(run_dir: Path) -> tuple[dict[str, Any], BaseException | None]:
    path = run_dir / RESULTS
    if os.path.lexists(path):
        return _stored_results(path), None
    try:
        from checker.analyze import analyze_run

        return analyze_run(run_dir), None
    except Exception as exc:
        why = f"the checker crashed: {type(exc).__name__}: {exc}"
        crashed = {"valid": "unknown", "anomalies": [], "not_applicable": [], "stats": {}}
        return {**crashed, "errors": [why]}, exc


def _write_pictures(out_dir: Path, pictures: list[AnomalyPicture]) -> None:
    """anomalies/<class>-<n>.svg; pictures of an earlier report of this run are replaced."""
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.glob("*.svg"):
        old.unlink()
    for picture in pictures:
        _write_atomically(out_dir / picture.file_name, XML_DECLARATION + str(picture.svg))


def repro_command(run_dir: Path) -> str:
    return f"schemachaos repro {shlex.quote(str(run_dir.resolve()))}"


def render_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Write report.html, timeline.html, junit.xml, plots/ and anomalies/ into out_dir (the
    run directory unless given; elsewhere, with the results.json the page links to); returns
    the report.html path.
    NotARunDirectory, with nothing written, when run_dir holds neither run.json nor history;
    UnusableResults, with nothing written, when its results.json is no verdict;
    UnreadableRun, with nothing written, when a file of the run cannot be read;
    ReportNotWritten, before any analysis, when out_dir takes no file."""
    run_dir = Path(run_dir)
    out = run_dir if out_dir is None else Path(out_dir)
    try:
        os.listdir(run_dir)
    except OSError as e:
        raise NotARunDirectory(f"cannot be read ({e.strerror}): {run_dir}") from None
    if not is_run_dir(run_dir):
        raise NotARunDirectory(f"not a run directory (no run.json or history.jsonl): {run_dir}")
    _readable_files(run_dir)
    writable_report_dir(out)
    results, crash = _results(run_dir)
    try:
        report = _write_pages(run_dir, out, _read_run(run_dir, results), results)
    except MALFORMED:
        if not _breaks_the_contract(run_dir):
            raise  # the files follow the contract: the fault is the report's own
        # The page shows the verdict and the analyzer's errors (which say where the files
        # break the contract), without what would be read from them.
        report = _write_pages(run_dir, out, load_run(run_dir, results, contents=False), results)
    if crash is not None:
        raise crash
    return report


def _read_run(run_dir: Path, results: dict[str, Any]) -> RunData:
    """load_run; a file there this user cannot read is UnreadableRun naming it."""
    try:
        return load_run(run_dir, results)
    except OSError as e:
        raise UnreadableRun(f"{e.filename or run_dir}: cannot be read ({e.strerror})") from None


def _breaks_the_contract(run_dir: Path) -> bool:
    """Whether run.json, catalog.jsonl or history.jsonl breaks the contract, as the analyzer
    validates them (a torn last line of a killed controller does not)."""
    from checker.contract import (
        ContractError,
        read_catalog_lines,
        read_run_json,
        validate_history_file,
    )

    history = run_dir / HISTORY
    try:
        read_run_json(run_dir)
        read_catalog_lines(run_dir)
        if history.exists():
            validate_history_file(history)
    except ContractError:
        return True
    return False


def _write_pages(run_dir: Path, out: Path, data: RunData, results: dict[str, Any]) -> Path:
    """The pages into out; a file there that cannot be written (the probe passed, yet: a
    full disk, a directory where a page goes) is ReportNotWritten naming it."""
    try:
        plots = render_plots(data, out / "plots")
        pictures = anomaly_pictures(data)
        _write_pictures(out / "anomalies", pictures)
        _write_atomically(out / "timeline.html", build_timeline_html(data, page_title(data)))
        report = out / REPORT
        page = build_report_html(
            data, plots, repro_command(run_dir), pictures=pictures, page_dir=out
        )
        _write_atomically(report, page)
        write_junit(results, data.run, out / "junit.xml")
        if out.resolve() != run_dir.resolve():  # the page links the verdict beside it
            verdict = json.dumps(results, indent=2, sort_keys=True, default=str) + "\n"
            _write_atomically(out / RESULTS, verdict)
    except OSError as e:
        if e.filename is None or not Path(os.fsdecode(e.filename)).is_relative_to(out):
            raise  # not one of the report's files: the fault is elsewhere
        raise ReportNotWritten(_not_written(os.fsdecode(e.filename), e)) from None
    return report
