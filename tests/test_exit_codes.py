"""Exit codes as Jepsen's (anomalies.md "Verdict"): 0 valid, 1 anomalies, 2 unknown, 130
interrupted, 254 bad input named on the command line, 255 a crash. Each code is produced the way
a user meets it: the CLI in a subprocess, on tiny hand-written run directories."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import checker.analyze
from checker import cli as checker_cli
from harness import cli
from tests.conftest import require
from tests.test_harness_support import free_local_base

REPO = Path(__file__).resolve().parent.parent
HISTORIES = REPO / "tests" / "histories"

# A correct little run over tests/histories/common's catalog: one acknowledged write, then final
# reads of t1 and both its indexes (i2 is only REGISTERED: empty is legitimate) that show it.
VALID_HISTORY = [
    {"index": 0, "time": 2050000000, "type": "invoke", "process": 0, "f": "txn",
     "value": {"ops": [{"op": "w", "table": "t1", "key": 1, "row": {"c1": 10, "c2": "a"}}]}},
    {"index": 1, "time": 2100000000, "type": "ok", "process": 0, "f": "txn", "node": "n1",
     "value": {"txn_id": "w1", "begin_ts": 134348800, "commit_ts": 137625600,
               "ops": [{"op": "w", "table": "t1", "key": 1, "row": {"c1": 10, "c2": "a"},
                        "op_ts": 134348801, "node": "n1", "schema_version": 2, "result": None}],
               "tables": {"t1": {"base_ts": 134348800, "schema_version": 2}},
               "participants": [{"node": "n1", "table": "t1", "partition": 0,
                                 "commit_schema_version": 2}]}},
    {"index": 2, "time": 4500000000, "type": "invoke", "process": 1, "f": "final-read",
     "value": {"table": "t1"}},
    {"index": 3, "time": 4510000000, "type": "ok", "process": 1, "f": "final-read", "node": "n2",
     "value": {"table": "t1", "ts": 294912000, "schema_version": 4,
               "rows": [{"key": 1, "row": {"c1": 10, "c2": "a"}}]}},
    {"index": 4, "time": 4520000000, "type": "invoke", "process": 2, "f": "final-read",
     "value": {"table": "t1", "index": "i1"}},
    {"index": 5, "time": 4530000000, "type": "ok", "process": 2, "f": "final-read", "node": "n2",
     "value": {"table": "t1", "index": "i1", "ts": 294912000,
               "entries": [{"key": 1, "values": {"c1": 10}}]}},
    {"index": 6, "time": 4540000000, "type": "invoke", "process": 3, "f": "final-read",
     "value": {"table": "t1", "index": "i2"}},
    {"index": 7, "time": 4550000000, "type": "ok", "process": 3, "f": "final-read", "node": "n3",
     "value": {"table": "t1", "index": "i2", "ts": 294912000, "entries": []}},
]  # fmt: skip


def schemachaos(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_dir(dest: Path, case: str | None = None, history: list[dict] | None = None) -> Path:
    """tests/histories/common plus a case's history (or the given events) in a fresh dir."""
    dest.mkdir(parents=True)
    for f in (HISTORIES / "common").iterdir():
        shutil.copy(f, dest / f.name)
    if case is not None:
        shutil.copy(HISTORIES / case / "history.jsonl", dest / "history.jsonl")
    if history is not None:
        text = "".join(json.dumps(e) + "\n" for e in history)
        (dest / "history.jsonl").write_text(text)
    return dest


def needs_java() -> None:
    require(shutil.which("java") is not None, "Spark needs a Java runtime (java on PATH)")


def verdict(run: Path) -> object:
    return json.loads((run / "results.json").read_text())["valid"]


# -- 0, 1, 2: the verdict ------------------------------------------------------------------


@pytest.mark.spark
def test_0_when_the_run_is_valid(tmp_path: Path) -> None:
    needs_java()
    run = run_dir(tmp_path / "run", history=VALID_HISTORY)
    proc = schemachaos("analyze", str(run), timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert verdict(run) is True


@pytest.mark.spark
def test_1_when_an_anomaly_is_found(tmp_path: Path) -> None:
    needs_java()
    run = run_dir(tmp_path / "run", case="lost-write")
    proc = schemachaos("analyze", str(run), timeout=480)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert verdict(run) is False


@pytest.mark.spark
def test_several_runs_in_one_analyze_each_get_their_results(tmp_path: Path) -> None:
    """One application judges them all: 1 if any has anomalies, else 2 if any is unknown."""
    needs_java()
    valid = run_dir(tmp_path / "valid", history=VALID_HISTORY)
    cut = run_dir(tmp_path / "cut", history=VALID_HISTORY[:3])  # open invoke, no final reads
    lost = run_dir(tmp_path / "lost", case="lost-write")
    proc = schemachaos("analyze", str(valid), str(cut), timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert (verdict(valid), verdict(cut)) == (True, "unknown")
    proc = schemachaos("analyze", str(valid), str(cut), str(lost), timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert verdict(lost) is False


@pytest.mark.parametrize("command", ["harness", "checker"])
def test_2_when_a_run_directory_breaks_the_contract(tmp_path: Path, command: str) -> None:
    """A run directory that exists but holds no history is a verdict (unknown), not bad input:
    the path was right, the run was incomplete."""
    run = run_dir(tmp_path / "run")  # run.json and catalog.jsonl, no history.jsonl
    if command == "harness":
        proc = schemachaos("analyze", str(run))
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "checker", str(run), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert verdict(run) == "unknown"
    assert "Traceback" not in proc.stderr


# -- 254: bad input named on the command line -----------------------------------------------


@pytest.fixture
def inputs(tmp_path: Path) -> Iterator[Path]:
    """Broken input files, each wrong in one way."""
    files = {
        "bad-toml.toml": "seed = 1\ntime_limit_s = = 3\n",
        "unknown-key.toml": 'seed = 1\ncolour = "red"\n',
        "wrong-type.toml": 'seed = "one"\n',
        "matrix-bad-toml.toml": '[[scenario]]\nname = "a"\n[[scenario\n',
        "matrix-bad-scenario.toml": (
            f'[[scenario]]\nname = "a"\nscenario_file = "{tmp_path / "wrong-type.toml"}"\n'
        ),
        "matrix-bad-setting.toml": ('[[scenario]]\nname = "a"\ntarget_config = {colour = "red"}\n'),
        "nodes.toml": '[[node]]\nname = "n1"\n',
    }
    # stored runs naming what does not resolve: repro has no flag for it, run.json's key is named
    files["store/t/unknown-workload/run.json"] = '{"backend": "sim", "workload": {"name": "nope"}}'
    files["store/t/missing-nodes/run.json"] = (
        '{"backend": "sim", "options": {"nodes_file": "/nonexistent/nodes.toml"}}'
    )
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    yield tmp_path


BAD_INPUT = [
    (["run", "--no-such-flag"], "--no-such-flag"),
    (["launch"], "invalid choice: 'launch'"),
    (["run", "--nodes", "0"], "--nodes"),
    (["serve", "--port", "70000"], "--port"),
    (["run", "--scenario", "{d}/missing.toml"], "missing.toml: no such file"),
    (["run", "--scenario", "{d}/bad-toml.toml"], "bad-toml.toml: not valid TOML"),
    (["run", "--scenario", "{d}/unknown-key.toml"], "unknown-key.toml: colour: unknown key"),
    (["run", "--scenario", "{d}/wrong-type.toml"], "wrong-type.toml: seed: needs an integer"),
    (["nightly", "--matrix", "{d}/missing.toml"], "--matrix: file not found"),
    (["nightly", "--matrix", "{d}/matrix-bad-toml.toml"], "(at line 3, column 11)"),
    (["nightly", "--matrix", "{d}/matrix-bad-scenario.toml"], "wrong-type.toml: seed:"),
    (
        ["nightly", "--matrix", "{d}/matrix-bad-setting.toml"],
        "cell a--none--s0: --target: target.colour: unknown schemasync setting",
    ),
    (["run", "--backend", "ssh", "--nodes-file", "{d}/nodes.toml"], "nodes.toml: node[0]: host"),
    (["analyze", "{d}/no-such-run"], "RUN_DIR: not found"),
    (["report", "{d}/no-such-run"], "RUN_DIR: not found"),
    (["repro", "{d}/no-such-run"], "RUN_DIR: not found"),
    (
        ["repro", "{d}/store/t/unknown-workload"],
        "unknown-workload/run.json: workload.name: unknown workload 'nope'",
    ),
    (
        ["repro", "{d}/store/t/missing-nodes"],
        "missing-nodes/run.json: options.nodes_file: nodes file not found: /nonexistent/nodes",
    ),
    (["analyze", "{d}/nodes.toml"], "RUN_DIR: not a directory"),
]


@pytest.mark.parametrize(("argv", "names"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_254_on_bad_input_with_one_line_naming_it(
    inputs: Path, argv: list[str], names: str
) -> None:
    proc = schemachaos(*(a.format(d=inputs) for a in argv))
    assert proc.returncode == 254, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("schemachaos: backend")]
    assert len(lines) == 1, proc.stderr
    assert names in lines[0], lines[0]


@pytest.mark.parametrize(
    ("argv", "names"),
    [(["/tmp", "--no-such-flag"], "--no-such-flag"), (["/nonexistent/run"], "RUN_DIR: not found")],
)
def test_254_from_python_m_checker(argv: list[str], names: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "checker", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 254, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and names in proc.stderr, proc.stderr


# -- 130: interrupted -----------------------------------------------------------------------


def _children(pid: int) -> dict[int, str]:
    """Direct children of `pid` and their start times (to never signal a reused pid)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out[int(stat.parent.name)] = fields[19]
    return out


def _started(pid: int) -> str | None:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _reap(children: dict[int, str]) -> None:
    """Kill what the interrupted command left behind: pyspark's gateway JVM ignores SIGINT
    and, when its driver dies while it boots, outlives it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_started(p) == t for p, t in children.items()):
        time.sleep(0.2)
    for p, t in children.items():
        if _started(p) == t:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.spark
def test_130_when_analyze_is_interrupted(tmp_path: Path) -> None:
    """SIGINT once `analyze` has started Spark (its first child process): Ctrl-C's signal."""
    needs_java()
    run = run_dir(tmp_path / "run", case="lost-write")
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "analyze", str(run)],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    children: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while not children and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            children = _children(proc.pid)
        assert children, f"analyze started no Spark ({proc.poll()}): {out.read_text()[-2000:]}"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, out.read_text()[-3000:]
        assert "schemachaos analyze: interrupted" in out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        _reap(children)


@pytest.mark.cluster
def test_130_when_a_run_is_interrupted(tmp_path: Path) -> None:
    """Ctrl-C in the middle of a local run: torn down, verdict unknown, exit 130 (not 2)."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "local", "--local-base",
         free_local_base(), "--time-limit", "120", "--concurrency", "2", "--nemesis", "none",
         "--no-analyze", "--no-progress", "--store", str(store), "--test-name", "ctrl-c",
         "--delay-ms", "100", "--max-skew-ms", "50"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    history = store / "ctrl-c" / "latest" / "history.jsonl"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if history.exists() and history.read_bytes().count(b"\n") >= 10:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out.decode()[-2000:]
    results = json.loads((history.parent / "results.json").read_text())
    assert results["valid"] == "unknown"
    assert any("interrupted (SIGINT)" in e for e in results["errors"]), results["errors"]


def test_130_from_python_m_checker_on_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(checker.analyze, "analyze_run", interrupted)
    assert checker_cli.main([str(run_dir(tmp_path / "run", case="lost-write"))]) == 130
    assert capsys.readouterr().err.strip() == "checker: interrupted"


# -- 255: the tool itself crashed -----------------------------------------------------------


def test_255_when_a_command_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug in a command (here one that raises) is 255 with its traceback, never 2 or 254."""

    def crashing(_args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "report", crashing)
    assert cli.main(["report", str(tmp_path)]) == 255
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.rstrip().endswith("schemachaos report: internal error: RuntimeError: a bug")


def test_255_when_the_checker_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crashing(*_args: object, **_kwargs: object) -> dict:
        raise RuntimeError("a bug")

    monkeypatch.setattr(checker.analyze, "analyze_run", crashing)
    assert checker_cli.main([str(run_dir(tmp_path / "run", case="lost-write"))]) == 255
    assert capsys.readouterr().err.rstrip().endswith("checker crashed: RuntimeError: a bug")
