"""A run is resolved once (harness.resolved_run): the target is looked up once per process,
the nodes file read once, the matrix's scenario files once, and every layer reads the value
(run.json, the cluster spec, the schedule) instead of resolving the names again."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contract.target import Target
from harness.backends import ProvisionError, provision
from harness.backends.sim import SimBackend
from harness.backends.ssh import SshBackend
from harness.cli import main
from harness.cluster_spec import Cluster
from harness.nightly import cell_options, load_matrix
from harness.options import RunOptions
from harness.remote_ssh import NodesFile
from harness.resolved_run import UnresolvedRun, resolve_run
from nemesis import schedule_to_json
from targets import registry

NODES = "".join(f'[[node]]\nname = "h{i}"\nhost = "127.0.0.1"\nport = 1\n' for i in (1, 2, 3))


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many targets the registry made and nodes files were parsed, whoever asked: the
    registry's factories and the nodes file's model are what every path goes through."""
    made: Counter[str] = Counter()
    for name, factory in list(registry.TARGETS.items()):

        def counted(factory: Callable[[], Target] = factory, name: str = name) -> Target:
            made[f"target {name}"] += 1
            return factory()

        monkeypatch.setitem(registry.TARGETS, name, counted)
    validate = NodesFile.model_validate

    def parsed(data: Any, *args: Any, **kwargs: Any) -> NodesFile:
        made["nodes file"] += 1
        return validate(data, *args, **kwargs)

    monkeypatch.setattr(NodesFile, "model_validate", parsed)
    return made


def test_a_sim_run_looks_its_target_up_once(
    tmp_path: Path, lookups: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the flags to the teardown, in one process (the sim backend's hash seed set, so no
    child runs it): the registry makes the schemasync target once; before, five times
    (the CLI's check, the schedule twice, run.json's config, the run)."""
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    store = tmp_path / "store"
    argv = ["run", "--backend", "sim", "--time-limit", "3", "--nemesis", "partition"]
    argv += ["--nemesis-interval", "1", "--no-analyze", "--no-progress", "--store", str(store)]
    assert main(argv) == 0
    assert lookups == Counter({"target schemasync": 1})
    run = json.loads(next(store.glob("*/latest/run.json")).read_text())
    assert run["config"]["delay_duration_ms"] == 500  # the settings, checked once, recorded
    assert run["nemesis"]["schedule"], "the schedule resolved with the run is the one played"


def test_the_nodes_file_is_read_once_and_the_ssh_backend_uses_what_was_read(
    tmp_path: Path, lookups: Counter[str]
) -> None:
    """Resolving reads the nodes file; the layout, the cluster spec, the run's guard (the ssh
    leases) and provisioning take the hosts read then: after the file is gone, the guard and
    the nodes still reach for its hosts, through `provision` as a run calls it."""
    nodes_file = tmp_path / "nodes.toml"
    nodes_file.write_text(NODES)
    resolved = resolve_run(RunOptions(backend="ssh", nodes_file=nodes_file, store=tmp_path))
    assert lookups["nodes file"] == 1
    assert resolved.nodes == ("h1", "h2", "h3") and resolved.voters == ("h1", "h2", "h3")
    spec = resolved.cluster_spec(image=None)
    assert spec.hosts == resolved.hosts
    assert spec.layout is not None and spec.layout.nodes == resolved.nodes
    nodes_file.unlink()
    with (  # the guard starts first: its lease on h1 is what cannot be reached
        pytest.raises(ProvisionError, match=r"ssh host h1: .*unreachable"),
        provision(spec, "t-resolved", tmp_path / ".tmp", resolved.backend),
    ):
        pass
    cleanups: list[Any] = []
    with pytest.raises(ProvisionError, match=r"ssh host h1: .*unreachable"):
        SshBackend().provision(spec, "t-resolved", tmp_path / ".tmp", cleanups)
    for cleanup in reversed(cleanups):
        cleanup()
    assert lookups["nodes file"] == 1


def test_a_run_s_cluster_is_laid_out_as_resolved() -> None:
    """The backend provisions the resolved layout (voters and learners included), not a
    count it lays out again: a spec whose counts disagree still gives the run's nodes."""
    resolved = resolve_run(RunOptions(backend="sim", nodes=4, voters=3))
    spec = replace(resolved.cluster_spec(image=None), nodes=9, voters=1)

    async def provisioned() -> Cluster:  # the simulated world is made on the running loop
        return SimBackend().provision(spec, "t-layout", Path("."), [])

    cluster = asyncio.run(provisioned())
    assert (cluster.nodes, cluster.voters, cluster.learners) == (
        ["n1", "n2", "n3", "n4"],
        ["n1", "n2", "n3"],
        ["n4"],
    )


def test_a_named_nodes_file_must_be_good_whatever_the_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A nodes file named on the command line is read as the run is resolved, so a broken one
    is bad input on every backend (a missing one already was), named by the flag."""
    nodes_file = tmp_path / "nodes.toml"
    nodes_file.write_text('[[node]]\nname = "n1"\n')
    argv = ["run", "--backend", "sim", "--nodes-file", str(nodes_file)]
    assert main([*argv, "--store", str(tmp_path / "s")]) == 254
    assert f"--nodes-file: {nodes_file}: node[0]: host" in capsys.readouterr().err
    with pytest.raises(UnresolvedRun) as err:
        resolve_run(RunOptions(backend="sim", nodes_file=nodes_file))
    assert err.value.field == "nodes_file"


def test_resolving_names_what_refers_to_nothing() -> None:
    for opts, field in (
        (RunOptions(backend="sim", target="oracle"), "target"),
        (RunOptions(backend="sim", workload="tpcc"), "workload"),
        (
            RunOptions(
                backend="sim",
                nemesis=("partition",),
                nemesis_options={"partition_shapes": ["nope"]},
            ),
            "nemesis",
        ),
    ):
        with pytest.raises(UnresolvedRun) as err:
            resolve_run(opts)
        assert err.value.field == field, err.value


def test_the_schedule_and_the_fault_config_come_from_the_target_s_bounds() -> None:
    """CSmax and DD are the target's, read once: the schedule's clock skews stay within CSmax
    and the nemeses are configured with the same bounds."""
    opts = RunOptions(
        backend="sim",
        nemesis=("clock",),
        nemesis_interval_s=1.0,
        time_limit_s=20,
        seed=3,
        target_config={"max_clock_skew_ms": 40, "delay_duration_ms": 80},
    )
    resolved = resolve_run(opts)
    assert (resolved.max_skew_ms, resolved.delay_ms) == (40, 80)
    config = resolved.fault_config()
    assert (config["max_skew_ms"], config["delay_ms"], config["seed"]) == (40, 80, 3)
    again = resolve_run(opts)
    assert schedule_to_json(list(again.schedule)) == schedule_to_json(list(resolved.schedule))


def test_default_nemeses_the_backend_cannot_inject_are_dropped_not_refused() -> None:
    opts = RunOptions(backend="local", nemesis=("partition", "kill"))
    resolved = resolve_run(opts, default_nemesis=True)
    assert set(resolved.opts.nemesis) == {"partition", "kill"} - resolved.unavailable_kinds
    assert resolve_run(opts).opts.nemesis == ("partition", "kill")  # asked for: kept


def test_a_matrix_reads_each_scenario_file_once(tmp_path: Path) -> None:
    """Every cell of a row starts from its scenario file's options, read with the matrix:
    the cells are built after the file is gone."""
    scenario = tmp_path / "small.toml"
    scenario.write_text("time_limit_s = 7\nconcurrency = 2\n")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        f'seeds = [1, 2, 3]\n[[scenario]]\nname = "a"\nscenario_file = "{scenario}"\n'
    )
    cells = load_matrix(matrix).cells()
    scenario.unlink()
    for cell in cells:
        opts = cell_options(cell, tmp_path, "sim")
        assert (opts.time_limit_s, opts.concurrency, opts.scenario) == (7, 2, scenario)


def test_a_sweep_refuses_a_bad_setting_before_any_seed_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep resolves its options once: a toggle that does not exist is refused, naming
    the scenario's key, before a child is started for any seed (each would have failed alone,
    as an unknown run)."""
    scenario = tmp_path / "bad.toml"
    scenario.write_text('seed = 1\n[target]\ntoggles = ["no-such-toggle"]\n')
    store = tmp_path / "store"
    argv = ["sweep", "--scenario", str(scenario), "--seeds", "3", "--store", str(store)]
    assert main(argv) == 254
    assert f"{scenario}: target.toggles: unknown ['no-such-toggle']" in capsys.readouterr().err
    assert not list(store.glob("*/*/run.json"))
