"""One way to validate config: scenario files, the nodes file and PostgreSQL's settings are
pydantic models; unknown keys and wrong types are refused naming the file, the key and what
is allowed (the CLI exits 254), and every file in the repository still loads."""

from __future__ import annotations

import sys
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import get_args

import pytest

from contract.config_error import ConfigError
from contract.target import SettingsChecker, SettingsError
from harness.cli import main
from harness.nightly import load_matrix
from harness.options import RunOptions
from harness.remote_ssh import load_nodes_file
from schemasync.config import PROFILES, NodeConfig
from targets.galera import GaleraTarget
from targets.postgres import PostgresTarget
from targets.postgres.server import check_settings
from targets.registry import load_target
from targets.schemasync import SchemaSyncTarget
from targets.schemasync.config import DEFAULT_CONFIG as SCHEMASYNC_DEFAULTS
from targets.schemasync.config import SchemaSyncSettings
from workloads.scenario import load_run_options, load_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_scenario_file_in_the_repo_loads(path: Path) -> None:
    data = tomllib.loads(path.read_text())
    if isinstance(data.get("scenario"), list):  # a nightly matrix lives there too
        assert load_matrix(path).cells()
        return
    opts = RunOptions(**load_run_options(path))
    target = load_target(opts.target)
    if isinstance(target, SettingsChecker):  # and its target takes every setting it gives
        assert target.check_settings(opts.target_config)


def test_a_scenario_key_typo_names_the_file_the_key_and_the_allowed_keys(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text("seed = 1\n[nemesis]\nkinds = ['clock']\ninterval = 5\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert (err.value.file, err.value.key) == (str(path), "nemesis.interval")
    assert "allowed: kinds, interval_s, options" in err.value.why
    path.write_text("seed = 1\n[nemesis]\nkinds = ['clock']\ninterval_s = 5\n")
    assert load_scenario(path).nemesis_interval_s == 5.0


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("colour = 'red'", "colour", "allowed: name, description, seed"),
        ("seed = -1", "seed", "needs a value >= 0, got -1"),
        ("target = 3", "target", "needs a table, got 3"),
        ("[target]\nnodes = '5'", "target.nodes", "needs an integer, got '5'"),
        ("[target]\nnodes = true", "target.nodes", "needs an integer"),
        ("expect = ['slow']", "expect", "allowed: "),
        ("[nemesis]\ninterval_s = 'often'", "nemesis.interval_s", "needs a number"),
        ("[nemesis]\noptions = 3", "nemesis.options", "needs a table"),
        ("[workload]\nname = 7", "workload.name", "needs a string"),
    ],
)
def test_wrong_scenario_values_are_refused(tmp_path: Path, text: str, key: str, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.key == key
    assert says in err.value.why, err.value.why


def test_target_settings_pass_to_the_target_which_refuses_another_targets_knobs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """DD, CSmax and toggles are schemasync's settings: PostgreSQL and Galera refuse them, so
    a toggle that would do nothing there is an error (exit 254), not a quiet no-op."""
    path = tmp_path / "pg.toml"
    path.write_text("[target]\nname = 'postgres'\nsynchronous_commit = 'remote_apply'\n")
    s = load_scenario(path)
    assert s.target == "postgres"
    assert s.target_config == {"synchronous_commit": "remote_apply"}
    with pytest.raises(SettingsError, match="toggles: unknown postgres setting"):
        PostgresTarget().check_settings({**s.target_config, "toggles": ["no-ack-wait"]})
    with pytest.raises(SettingsError, match="delay_duration_ms: unknown galera setting"):
        GaleraTarget().check_settings({"delay_duration_ms": 800})
    argv = ["run", "--target", "postgres", "--toggle", "no-ack-wait", "--backend", "local"]
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(main([*argv, "--store", str(tmp_path / "store")]))
    assert exit_info.value.code == 254
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "run: --toggle: unknown postgres setting (allowed: synchronous_commit" in err, err


def test_cli_exits_254_on_a_bad_scenario_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[workload]\nname = 'ddl-dml'\n[nemesis]\nevery = 3\n")
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(main(["run", "--scenario", str(path), "--store", str(tmp_path / "store")]))
    assert exit_info.value.code == 254
    err = capsys.readouterr().err
    assert f"{path}: nemesis.every: unknown key (allowed: kinds, interval_s, options)" in err


def test_nodes_file_keys_and_types(tmp_path: Path) -> None:
    path = tmp_path / "nodes.toml"
    good = '[[node]]\nname = "n1"\nhost = "10.0.0.1"\nport = 2222\nuser = "chaos"\n'
    path.write_text(good)
    [host] = load_nodes_file(path)
    assert (host.name, host.host, host.port, host.user, host.key) == (
        "n1",
        "10.0.0.1",
        2222,
        "chaos",
        None,
    )
    path.write_text(good + 'hostname = "db1"\n')
    with pytest.raises(ConfigError) as err:
        load_nodes_file(path)
    assert str(err.value) == (
        f"{path}: node[0]: hostname: unknown key "
        "(allowed: name, host, port, user, key, known_hosts)"
    )
    path.write_text(good.replace("2222", '"2222"'))
    with pytest.raises(ConfigError, match=r"node\[0\]: port: needs an integer, got '2222'"):
        load_nodes_file(path)
    path.write_text("[defaults]\nuser = 'root'\n" + good)
    with pytest.raises(ConfigError, match=r"defaults: unknown key \(allowed: node, nodes\)"):
        load_nodes_file(path)


def test_postgres_settings_refuse_unknown_and_wrong_values() -> None:
    ok = check_settings({"synchronous_commit": "remote_apply", "sync_method": "any"})
    assert (ok["synchronous_commit"], ok["sync_method"], ok["lag_mode"]) == (
        "remote_apply",
        "ANY",
        "drop",
    )
    with pytest.raises(SettingsError) as err:
        check_settings({"synchronus_commit": "remote_apply"})
    assert str(err.value).startswith("synchronus_commit: unknown postgres setting (allowed: ")
    assert "synchronous_commit" in str(err.value)
    with pytest.raises(SettingsError, match=r"'async' or 'remote_apply', got 'sync'"):
        check_settings({"synchronous_commit": "sync"})
    with pytest.raises(SettingsError, match=r"lag_mode: .*'replay-pause'"):
        check_settings({"lag_mode": "slow"})


def test_schemasync_settings_refuse_what_the_node_would_ignore() -> None:
    target = SchemaSyncTarget()
    assert isinstance(target, SettingsChecker) and isinstance(PostgresTarget(), SettingsChecker)
    given = {"heartbeat_interval_ms": 400, "partitions": 0, "profile": "ignite", "toggles": []}
    checked = target.check_settings(given)  # ranges stay the node's to judge
    assert checked == {**SCHEMASYNC_DEFAULTS, **given}
    with pytest.raises(SettingsError) as err:
        target.check_settings({"heartbeat_interval": 400})
    assert err.value.key == "heartbeat_interval"
    assert err.value.why.startswith("unknown schemasync setting (allowed: delay_duration_ms, ")
    assert "heartbeat_interval_ms" in err.value.why
    with pytest.raises(SettingsError, match=r"rename_column_compatible: .*valid boolean"):
        target.check_settings({"rename_column_compatible": "yes"})
    with pytest.raises(SettingsError, match=r"profile: Input should be 'default' or 'ignite'"):
        target.check_settings({"profile": "oracle"})


def test_schemasync_settings_are_the_node_config_keys() -> None:
    """The model is the node's keys minus what the harness writes itself: a key added to the
    node (schemasync.config) without the model, or the other way round, fails here."""
    written_by_harness = {"name", "data_dir", "nodes", "voters", "log_file", "extra"}
    node_keys = {f.name for f in fields(NodeConfig)} - written_by_harness
    assert set(SchemaSyncSettings.model_fields) == node_keys
    profile = SchemaSyncSettings.model_fields["profile"].annotation
    assert set(get_args(get_args(profile)[0])) == set(PROFILES)
