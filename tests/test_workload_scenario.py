"""Scenario files: one per bug toggle plus the baseline, loading, errors that name file and key,
command-line overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.config_error import ConfigError
from contract.target import SettingsError
from harness.options import RunOptions
from schemasync.toggles import TOGGLES
from targets.schemasync.config import check_settings
from workloads import build_generator
from workloads.scenario import (
    Scenario,
    apply_overrides,
    load_run_options,
    load_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.mark.parametrize("toggle", TOGGLES)
def test_every_toggle_has_a_scenario_named_after_it(toggle: str) -> None:
    s = load_scenario(SCENARIOS / f"{toggle}.toml")
    assert s.name == toggle
    assert s.target_config["toggles"] == [toggle]
    assert s.expect, "a toggle scenario names the anomaly classes it must produce"
    check_settings(s.target_config)  # schemasync's: the toggle names, idle within DD/2
    gen = build_generator(s.workload, s.seed, s.concurrency, dict(s.workload_options))
    assert gen.next_op(0, 0.0) is not None or s.concurrency > 1


def test_baseline_has_every_toggle_off_and_every_fault_on() -> None:
    s = load_scenario(SCENARIOS / "baseline.toml")
    assert s.target_config["toggles"] == [] and s.expect == ()
    assert set(s.nemesis) >= {"clock", "partition", "lagging-learner", "kill", "pause"}
    assert "skew-beyond" not in s.nemesis_options["clock_modes"]  # beyond CSmax: no promise
    fields = s.run_options_fields()
    assert fields["target_config"]["delay_ms"] == 500 and fields["workload"] == "ddl-dml"
    assert fields["workload_options"] == {"ddl_interval_s": 0.7, "probe_processes": 3}
    assert fields["scenario"] == SCENARIOS / "baseline.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("seed = -1", "seed"),
        ("time_limit = 3", "time_limit"),
        ('concurrency = "ten"', "concurrency"),
        ("[target]\nnodes = 3\nvoters = 4", "voters"),
        ("[nemesis]\nkinds = 'clock'", "nemesis.kinds"),
        ("[nemesis]\nevery = 3", "nemesis.every"),
        ("[workload]\nname = 'bank'", "workload.name"),
        ("[workload]\nddl_interval = 1", "workload.ddl_interval"),
        ("[workload]\ntxn_min_ops = 5\ntxn_max_ops = 2", "workload.txn_max_ops"),
        ("[workload.ddl_weights]\ntruncate = 1", "workload.ddl_weights"),
        ("expect = ['slow']", "expect"),
        ("[allow]\nslow = 'known'", "allow.slow"),
        ("expect = ['lost-write']\n[allow]\nlost-write = 'known'", "allow.lost-write"),
        ("[allow]\nlost-write = 3", "allow"),  # a reason that is not text: "needs a string, got 3"
        ("[allow]\nlost-write = ''", "allow"),
        ("allow = ['lost-write']", "allow"),
        ("target = 3", "target"),
        ("seed = [", "-"),
    ],
)
def test_bad_input_names_the_file_and_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.key == key
    # a problem of the whole file (key "-") reads `FILE: why`, as the command line prints it
    assert str(err.value).startswith(f"{path}: {key}: " if key != "-" else f"{path}: not valid")


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(tmp_path / "nope.toml")


def test_command_line_flags_override_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "seed = 4\ntime_limit_s = 30\n[target]\ntoggles = ['no-ack-wait']\npartitions = 8\n"
        "[nemesis]\nkinds = ['clock']\n[workload]\nddl_interval_s = 0.5\n",
    )
    s = load_scenario(path)
    assert s.target_config == {"toggles": ["no-ack-wait"], "partitions": 8}
    assert s.workload_options == {"ddl_interval_s": 0.5}
    no_toggles = {**s.target_config, "toggles": []}
    o = apply_overrides(
        s, {"seed": 9, "time_limit_s": 5, "target_config": no_toggles, "nemesis": None}
    )
    assert (o.seed, o.time_limit_s, o.nemesis) == (9, 5.0, ("clock",))
    assert o.target_config == {"toggles": [], "partitions": 8}
    assert s.seed == 4  # frozen: the file's scenario is unchanged
    with pytest.raises(ConfigError, match="concurrency"):
        apply_overrides(s, {"concurrency": 0})
    with pytest.raises(ConfigError, match="not a scenario field"):
        apply_overrides(s, {"colour": "red"})
    assert isinstance(o, Scenario) and o.to_json()["target_config"]["toggles"] == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[target]\ntoggles = ['no-such-toggle']", "toggles"),
        ("[target]\ndelay_ms = 100\nidle_safe_time_interval_ms = 60", "idle_safe_time_interval_ms"),
        ("[target]\ndelay_duration_ms = 'soon'", "delay_duration_ms"),
        ("[target]\npartitons = 4", "partitons"),
    ],
)
def test_the_targets_own_settings_are_checked_by_the_target(
    tmp_path: Path, text: str, key: str
) -> None:
    """A scenario carries [target]'s other keys as they are; schemasync's settings model
    refuses an unknown toggle, a bad value, a typo, or an idle SyncTime above DD/2."""
    s = load_scenario(write(tmp_path, text))
    with pytest.raises(SettingsError) as err:
        check_settings(s.target_config)
    assert err.value.key == key
    # the other way: the same keys with good values pass, under the node's own names
    given = {"toggles": ["no-ack-wait"], "delay_ms": 100, "max_skew_ms": 7}
    good = check_settings(given)
    assert (good["delay_duration_ms"], good["max_clock_skew_ms"]) == (100, 7)
    assert "delay_ms" not in good and good["toggles"] == ["no-ack-wait"]


@pytest.mark.parametrize("name", [*TOGGLES, "baseline"])
def test_each_scenario_workload_issues_valid_ddl_and_txns(name: str) -> None:
    from tests.test_workload_ddl_dml import CatalogOracle, drive
    from workloads.ddl_dml import DdlDmlWorkload

    s = load_scenario(SCENARIOS / f"{name}.toml")
    gen = build_generator(s.workload, s.seed, s.concurrency, dict(s.workload_options))
    assert isinstance(gen, DdlDmlWorkload)
    seen = drive(gen, CatalogOracle(s.seed), 8_000, s.concurrency)
    assert seen["ddl_fail"] == []
    assert sum(seen["ddl"].values()) >= 3 and len(seen["txns"]) > 100 and seen["probes"]


def test_allow_reaches_the_run_options_and_run_json_with_its_reasons() -> None:
    fields = load_run_options(SCENARIOS / "postgres-remote-apply.toml")
    assert fields["expect"] == () and set(fields["allow"]) == {"schema-conformance"}
    opts = RunOptions(**fields)
    assert opts.allow == fields["allow"]
