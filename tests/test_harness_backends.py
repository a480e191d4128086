"""The registry of backends is the one list (CLI, scenario files, nightly), and `sim` is one of
them everywhere: a scenario may name it, a night may run on it, a sim run repeats exactly."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from pathlib import Path

import pytest

from contract.config_error import ConfigError
from harness.backends import BACKENDS, backend_choices, scenario_run_options
from harness.cli import main
from harness.cli_parser import build_parser
from harness.remote import in_thread
from sim.loop import run_simulation

SMALL = """
time_limit_s = 3
concurrency = 2
[target]
nodes = 3
voters = 3
[nemesis]
kinds = ["partition", "kill"]
interval_s = 1.0
"""


def _choices(parser: argparse.ArgumentParser, command: str) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flag = next(a for a in sub.choices[command]._actions if "--backend" in a.option_strings)
    return list(flag.choices or [])


def test_the_registry_is_the_one_list_of_backends(tmp_path: Path) -> None:
    names = ["auto", *BACKENDS]
    assert backend_choices() == names
    assert "sim" in names
    parser = build_parser()
    for command in ("run", "repro", "nightly"):
        assert _choices(parser, command) == names, command
    for name in names:
        path = tmp_path / f"{name}.toml"
        path.write_text(f"backend = {name!r}\n")
        assert scenario_run_options(path)["backend"] == name
    path = tmp_path / "k8s.toml"
    path.write_text("backend = 'k8s'\n")
    with pytest.raises(ConfigError) as err:
        scenario_run_options(path)
    assert err.value.key == "backend"
    assert f"allowed: {', '.join(names)}" in err.value.why


def test_a_scenario_naming_an_unknown_backend_is_bad_input(tmp_path: Path, capsys) -> None:
    path = tmp_path / "k8s.toml"
    path.write_text("backend = 'k8s'\n")
    assert main(["run", "--scenario", str(path), "--store", str(tmp_path / "s")]) == 254
    assert f"{path}: backend: unknown backend 'k8s'" in capsys.readouterr().err


def _latest(store: Path, test: str) -> Path:
    return (store / test / "latest").resolve()


def test_a_scenario_with_backend_sim_runs_in_simulation_and_repeats_exactly(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "small.toml"
    scenario.write_text('backend = "sim"\nseed = 7\n' + SMALL)
    store = tmp_path / "store"
    common = ["--no-analyze", "--no-progress", "--store", str(store)]
    assert main(["run", "--scenario", str(scenario), "--test-name", "small", *common]) == 0
    first = _latest(store, "small")
    assert json.loads((first / "run.json").read_text())["backend"] == "sim"
    assert (first / "sim.json").is_file()  # the simulator's own statistics are kept
    assert main(["repro", str(first), "--no-analyze", "--no-progress"]) == 0
    again = _latest(store, "small")
    assert again != first
    for name in ("history.jsonl", "catalog.jsonl"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name


def test_a_night_on_the_sim_backend_runs_and_judges_every_cell(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        "seeds = [1, 2]\n[defaults]\nnodes = 3\nvoters = 3\ntime_limit_s = 3\nconcurrency = 2\n"
        '[[scenario]]\nname = "baseline"\nworkload = "ddl-dml"\nexpect = []\n'
        '[[nemesis]]\nname = "partition"\nkinds = ["partition"]\ninterval_s = 1.0\n'
    )
    store = tmp_path / "store"
    code = main(["nightly", "--matrix", str(matrix), "--store", str(store), "--backend", "sim"])
    runs = sorted(p.resolve() for p in store.glob("nightly-*/latest"))
    assert len(runs) == 2, runs
    for run in runs:
        assert json.loads((run / "run.json").read_text())["backend"] == "sim"
        results = json.loads((run / "results.json").read_text())
        assert results["valid"] in (True, False), results  # judged, not unknown
    assert code in (0, 1)


def test_in_thread_calls_inline_on_a_simulation_loop() -> None:
    """A SimLoop has no threads: a blocking call runs where it is awaited, in no virtual time."""
    seen: list[threading.Thread] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await in_thread(lambda: seen.append(threading.current_thread()))
        return loop.time() - before

    elapsed, _ = run_simulation(main())
    assert seen == [threading.main_thread()]
    assert elapsed == 0.0
