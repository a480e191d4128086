"""File-system faults under every command (issue 50): an unreadable file, a directory where a
file is due, a read-only mount, an immutable results.json. Each gets its documented exit code
and one line naming the file, never 255; a gate never reads a stale results.json.

Root ignores file modes, so every command runs without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH
(setpriv); read-only mounts are bind mounts and immutable files `chattr +i`, both undone after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require

pytestmark = pytest.mark.root  # mounts, chattr, setpriv
REPO = Path(__file__).resolve().parent.parent
HISTORIES = REPO / "tests" / "histories"
NO_DAC = ["-dac_override,-dac_read_search"]
DROP_DAC = ["setpriv", "--inh-caps", *NO_DAC, "--bounding-set", *NO_DAC]


def schemachaos(
    *argv: str, module: str = "harness.cli", timeout_s: float = 900
) -> subprocess.CompletedProcess[str]:
    """The command as a user without root's file-mode override meets it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*DROP_DAC, sys.executable, "-m", module, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def run_dir(dest: Path, case: str = "lost-write") -> Path:
    """tests/histories/common plus one labelled case's history, in a fresh directory."""
    dest.mkdir(parents=True)
    for f in (HISTORIES / "common").iterdir():
        shutil.copy(f, dest / f.name)
    shutil.copy(HISTORIES / case / "history.jsonl", dest / "history.jsonl")
    return dest


@contextmanager
def read_only_mount(source: Path) -> Iterator[Path]:
    """`source` seen through a read-only bind mount (a sibling directory), unmounted after."""
    target = source.with_name(source.name + "-ro")
    target.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@contextmanager
def mode(path: Path, bits: int) -> Iterator[None]:
    """`path` with these permission bits; its own restored after (so tmp_path can be removed)."""
    before = path.stat().st_mode & 0o7777
    path.chmod(bits)
    try:
        yield
    finally:
        path.chmod(before)


@pytest.fixture(autouse=True)
def _root_tools() -> None:
    require(os.geteuid() == 0, "bind mounts, chattr and setpriv need root")
    require(all(shutil.which(t) for t in ("setpriv", "chattr", "mount")), "util-linux, e2fsprogs")


# -- the table: each case makes its files, names the command, and what it must answer -------

Setup = Callable[[Path, ExitStack], list[str]]


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    code: int
    reason: str  # in the one line that says why; it names the file
    stream: str = "stderr"  # 254: stderr's last line; a verdict: stdout's error line
    timeout_s: float = 900  # a FIFO's case: a read that blocks is a hang, found in seconds


def _unreadable_history(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    stack.enter_context(mode(run / "history.jsonl", 0))
    return ["analyze", str(run)]


def _unreadable_run_dir(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    stack.enter_context(mode(run, 0))
    return ["analyze", str(run)]


def _history_a_directory(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (run / "history.jsonl").unlink()
    (run / "history.jsonl").mkdir()
    return ["analyze", str(run)]


def _old_verdict(run: Path) -> Path:
    (run / "results.json").write_text(json.dumps({"valid": True, "anomalies": [], "errors": []}))
    return run / "results.json"


def _immutable_results(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    stack.enter_context(immutable(_old_verdict(run)))
    return ["analyze", str(run)]


def _immutable_results_checker(tmp: Path, stack: ExitStack) -> list[str]:
    return _immutable_results(tmp, stack)[1:]  # `python -m checker RUN_DIR`


def _results_a_directory(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (run / "results.json").mkdir()
    (run / "results.json" / "x").write_text("")
    return ["analyze", str(run)]


def _old_verdict_on_read_only_mount(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    _old_verdict(run)
    return ["analyze", str(stack.enter_context(read_only_mount(run)))]


def _results_not_json(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (run / "results.json").write_text('{"valid": tru')
    return ["report", str(run)]


def _results_a_list(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (run / "results.json").write_text("[1, 2]")
    return ["report", str(run)]


def _run_json_a_list(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "store" / "t" / "run")
    (run / "run.json").write_text("[]")
    return ["repro", "--backend", "sim", "--store", str(tmp / "store"), str(run)]


def _run_json_nemesis_all(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "store" / "t" / "run")
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "nemesis": "all"}))
    return ["repro", "--backend", "sim", "--store", str(tmp / "store"), str(run)]


def _report_of_read_only_run(tmp: Path, stack: ExitStack) -> list[str]:
    """No results.json either: refused before the analysis, whose verdict would go nowhere."""
    run = run_dir(tmp / "run")
    return ["report", str(stack.enter_context(read_only_mount(run)))]


def _report_out_read_only(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (tmp / "shelf").mkdir()
    shelf = stack.enter_context(read_only_mount(tmp / "shelf"))
    return ["report", str(run), "--out", str(shelf / "pages")]


def _report_out_a_file(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (tmp / "pages").write_text("")
    return ["report", str(run), "--out", str(tmp / "pages")]


def _reported(tmp: Path) -> Path:
    """A run with a verdict, so that `report` reads the run's files without analysing."""
    run = run_dir(tmp / "run")
    (run / "results.json").write_text(json.dumps({"valid": False, "anomalies": [], "errors": []}))
    return run


def _report_results_a_fifo(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    os.mkfifo(run / "results.json")
    return ["report", str(run)]


def _report_run_json_a_fifo(tmp: Path, stack: ExitStack) -> list[str]:
    run = _reported(tmp)
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")
    return ["report", str(run)]


def _report_unreadable_history(tmp: Path, stack: ExitStack) -> list[str]:
    run = _reported(tmp)
    stack.enter_context(mode(run / "history.jsonl", 0))
    return ["report", str(run)]


def _report_catalog_a_directory(tmp: Path, stack: ExitStack) -> list[str]:
    run = _reported(tmp)
    (run / "catalog.jsonl").unlink()
    (run / "catalog.jsonl").mkdir()
    return ["report", str(run)]


def _report_anomalies_a_string(tmp: Path, stack: ExitStack) -> list[str]:
    run = run_dir(tmp / "run")
    (run / "results.json").write_text(json.dumps({"valid": True, "anomalies": "x"}))
    return ["report", str(run)]


def _scenario_a_fifo(tmp: Path, stack: ExitStack) -> list[str]:
    os.mkfifo(tmp / "scenario.toml")
    argv = ["run", "--backend", "sim", "--scenario", str(tmp / "scenario.toml")]
    return [*argv, "--no-progress", "--store", str(tmp / "store")]


def _read_only_store(tmp: Path, stack: ExitStack) -> list[str]:
    (tmp / "store").mkdir()
    store = stack.enter_context(read_only_mount(tmp / "store"))
    return ["run", "--backend", "sim", "--time-limit", "5", "--no-progress", "--store", str(store)]


CASES = [
    Case("unreadable-history", _unreadable_history, 2,
         "history.jsonl: cannot be read (Permission denied)", "stdout"),
    Case("unreadable-run-dir", _unreadable_run_dir, 2,
         "run: cannot be read (Permission denied)", "stdout"),
    Case("history-a-directory", _history_a_directory, 2,
         "history.jsonl: is a directory, not a file", "stdout"),
    Case("immutable-results", _immutable_results, 254,
         "results.json: an earlier verdict that cannot be replaced (Operation not permitted)"),
    Case("immutable-results-checker", _immutable_results_checker, 254,
         "results.json: an earlier verdict that cannot be replaced (Operation not permitted)"),
    Case("results-a-directory", _results_a_directory, 254,
         "results.json: an earlier verdict that cannot be replaced (Is a directory)"),
    Case("old-results-read-only-mount", _old_verdict_on_read_only_mount, 254,
         "results.json: an earlier verdict that cannot be replaced (Read-only file system)"),
    Case("report-results-not-json", _results_not_json, 254,
         "results.json: not JSON (line 1: Expecting value)"),
    Case("report-results-a-list", _results_a_list, 254,
         "results.json: not a JSON object (a list)"),
    Case("report-read-only-run", _report_of_read_only_run, 254,
         "RUN_DIR: {tmp}/run-ro: the report cannot be written there (Read-only file system);"
         " name another directory with --out"),
    Case("report-out-read-only", _report_out_read_only, 254,
         "--out: {tmp}/shelf-ro/pages: the report cannot be written there (Read-only file"
         " system); name another directory with --out"),
    Case("report-out-a-file", _report_out_a_file, 254,
         "--out: {tmp}/pages: not a directory; name another directory with --out"),
    Case("report-results-a-fifo", _report_results_a_fifo, 254,
         "RUN_DIR: {tmp}/run/results.json: not a regular file", timeout_s=60),
    Case("report-run-json-a-fifo", _report_run_json_a_fifo, 254,
         "RUN_DIR: {tmp}/run/run.json: not a regular file", timeout_s=60),
    Case("report-unreadable-history", _report_unreadable_history, 254,
         "RUN_DIR: {tmp}/run/history.jsonl: cannot be read (Permission denied)"),
    Case("report-catalog-a-directory", _report_catalog_a_directory, 254,
         "RUN_DIR: {tmp}/run/catalog.jsonl: a directory, where the run's catalog.jsonl is due"),
    Case("report-anomalies-a-string", _report_anomalies_a_string, 254,
         "results.json: anomalies: a string where a list is due"),
    Case("scenario-a-fifo", _scenario_a_fifo, 254,
         "--scenario: {tmp}/scenario.toml: not a regular file", timeout_s=60),
    Case("repro-run-json-a-list", _run_json_a_list, 254,
         "run.json: not a JSON object but a list"),
    Case("repro-nemesis-all", _run_json_nemesis_all, 254,
         'run.json: nemesis: the string "all" where an object is due'),
    Case("read-only-store", _read_only_store, 254,
         "store-ro: a run directory cannot be made there (Read-only file system)"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_file_system_fault(case: Case, tmp_path: Path) -> None:
    with ExitStack() as stack:
        argv = case.setup(tmp_path, stack)
        module = "checker" if case.id.endswith("-checker") else "harness.cli"
        proc = schemachaos(*argv, module=module, timeout_s=case.timeout_s)
    out = proc.stdout + proc.stderr
    assert proc.returncode == case.code, out
    assert "Traceback" not in out, out
    if case.stream == "stderr":
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, out  # one line, and it says why
        assert case.reason.format(tmp=tmp_path) in lines[0], out
    else:
        errors = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("error: ")]
        assert any(case.reason.format(tmp=tmp_path) in ln for ln in errors), out


def test_immutable_results_stay_unanalysed(tmp_path: Path) -> None:
    """Refused before analysing: the old verdict is not read as this analysis's, and no Spark
    ran for a result that could not be written (no cache was made either)."""
    run = run_dir(tmp_path / "run")
    with immutable(_old_verdict(run)):
        proc = schemachaos("analyze", str(run))
    assert proc.returncode == 254, proc.stderr
    assert "nothing analysed" in proc.stderr
    assert not (run / "history.parquet").exists()


def test_clean_passes_over_a_run_json_that_is_a_fifo(tmp_path: Path) -> None:
    """`clean --run-id` looks for the run's directory among the store's run.json files; a
    FIFO among them blocked its read forever."""
    (tmp_path / "store" / "t" / "run").mkdir(parents=True)
    os.mkfifo(tmp_path / "store" / "t" / "run" / "run.json")
    proc = schemachaos(
        "clean", "--store", str(tmp_path / "store"), "--run-id", "no-such-run", timeout_s=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "clean: 0 item(s) removed", proc.stdout


def test_report_of_a_read_only_run_goes_where_out_says(tmp_path: Path) -> None:
    """`report --out` renders a run it cannot write into elsewhere: the pages, their plots
    linked beside them, and the verdict the page links to; the run is left as it was."""
    run = run_dir(tmp_path / "run")
    verdict = {"valid": False, "anomalies": [], "errors": [], "not_applicable": [], "stats": {}}
    (run / "results.json").write_text(json.dumps(verdict))
    before = sorted(p.name for p in run.iterdir())
    with read_only_mount(run) as mounted:
        proc = schemachaos("report", str(mounted), "--out", str(tmp_path / "pages"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pages = tmp_path / "pages"
    assert proc.stdout.strip() == str(pages / "report.html")
    assert json.loads((pages / "results.json").read_text()) == verdict
    page = (pages / "report.html").read_text()
    assert 'href="plots/' in page and str(tmp_path / "pages") not in page  # relative links
    assert {"timeline.html", "junit.xml", "plots", "anomalies"} <= {p.name for p in pages.iterdir()}
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.spark
def test_read_only_run_and_one_named_twice(tmp_path: Path) -> None:
    """A run on a read-only mount is judged (its verdict printed, nothing written there), and a
    run named twice, once through a `latest` symlink, is judged once: one Spark analysis."""
    require(shutil.which("java") is not None, "Spark needs a Java runtime")
    read_only = run_dir(tmp_path / "archived")
    twice = run_dir(tmp_path / "store" / "run")
    (tmp_path / "store" / "latest").symlink_to(twice)
    _old_verdict(twice)  # valid: true, from an earlier analysis; this one finds lost-write
    with read_only_mount(read_only) as mounted:
        proc = schemachaos(
            "analyze", str(mounted), str(twice), str(tmp_path / "store" / "latest"), str(twice)
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    verdicts = [ln for ln in proc.stdout.splitlines() if "valid=" in ln]
    assert verdicts == [
        f"{mounted}: valid=False, 9 anomalies",
        f"{twice}: valid=False, 9 anomalies",
    ], out
    assert "  results.json: not written (the run directory takes no file)" in proc.stdout
    assert sorted(p.name for p in read_only.iterdir()) == [
        "catalog.jsonl",
        "history.jsonl",
        "run.json",
    ]
    results = json.loads((twice / "results.json").read_text())
    assert results["valid"] is False
    assert "lost-write" in {a["class"] for a in results["anomalies"]}
    assert not list(twice.glob(".results.json.*"))  # the atomic write left no temporary file


@contextmanager
def spark_container_mounting(store: Path) -> Iterator[str]:
    """A container labelled as a Spark cluster of ours that bind-mounts `store` at the same
    path, as `spark up` makes them; its address. Removed after."""
    from harness.backends import docker_answers
    from harness.images import base_tag
    from harness.remote_docker import docker_client
    from harness.spark_cluster import SPARK_LABEL

    require(docker_answers(), "needs a Docker engine")
    client = docker_client(timeout=60)
    require(bool(client.images.list(name=base_tag())), "needs the base image (images build)")
    container = client.containers.create(
        base_tag(),
        ["600"],
        entrypoint=["sleep"],
        labels={SPARK_LABEL: f"robust-files-{os.getpid()}"},
        volumes={str(store): {"bind": str(store), "mode": "rw"}},
    )
    try:
        container.start()
        container.reload()
        yield str(container.attrs["NetworkSettings"]["IPAddress"])
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_run_outside_the_store_the_cluster_mounts(tmp_path: Path) -> None:
    """The cluster's executors see only its store: a run elsewhere is refused before Spark
    starts (one line naming the run and the store), one inside it is not."""
    from harness.spark_mounts import outside_mounted_store

    store = tmp_path / "store"
    inside = run_dir(store / "t" / "run")
    outside = run_dir(tmp_path / "elsewhere" / "run")
    with spark_container_mounting(store) as address:
        url = f"spark://{address}:7077"
        assert outside_mounted_store(url, [inside]) is None
        proc = schemachaos("analyze", "--spark-master", url, str(inside), str(outside))
    assert proc.returncode == 254, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"--spark-master: {outside} is outside the store the cluster at {url} mounts" in lines[0]
    assert f"({store})" in lines[0]
