"""Every numeric run option has a finite range (workloads.option_ranges) and every path refuses
a value outside it before anything starts: a flag, a scenario file's key, a nightly matrix, a
stored run.json, `--backend sim` too. A test name is a plain name that is not the store's own."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.config_error import ConfigError
from harness.cli import BadInput, _run_options, _validate, main
from harness.cli_parser import build_parser
from harness.nightly import load_matrix
from harness.options import OptionRangeError, RunOptions, options_from_run_json
from harness.store import new_run_dir
from workloads.option_ranges import INT64_MAX, MAX_FAULTS, RANGES
from workloads.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--nodes", "100000", "an integer in 1..64"),
        ("--voters", "65", "an integer in 1..64"),
        ("--seed", str(INT64_MAX + 1), f"an integer in 0..{INT64_MAX}"),
        ("--time-limit", "inf", "got inf"),
        ("--time-limit", "1e9", "<= 604800"),
        ("--nemesis-interval", "inf", "got inf"),
        ("--nemesis-interval", "1e-9", ">= 0.001"),
        ("--concurrency", "100000", "an integer in 1..1024"),
        ("--ready-timeout", "inf", "<= 3600"),
        ("--delay-ms", str(10**12), "1..3600000"),
        ("--max-skew-ms", str(10**12), "0..3600000"),
    ],
)
def test_a_flag_out_of_its_range_exits_254_naming_the_flag_and_the_range(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parse(flag, value)
    assert exit_info.value.code == 254
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}: " in err and says in err, err


def test_every_ranged_flag_states_its_range_in_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _parse("--help")
    flat = " ".join(capsys.readouterr().out.split())
    for bounds in RANGES.values():
        assert bounds.describe() in flat, bounds.flag


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--backend", "sim", "--nodes", "3", "--voters", "5"], "--voters: 5 voters but only 3"),
        (
            ["--time-limit", "604800", "--nemesis-interval", "0.5", "--nemesis", "kill"],
            f"--nemesis-interval: 604800 s at a 0.5 s interval is 604800 faults; "
            f"at most {MAX_FAULTS}",
        ),
        (["--backend", "sim", "--test-name", "latest"], "--test-name: 'latest' is the store's own"),
        (["--test-name", "nightly"], "--test-name: 'nightly' is the store's own"),
        (["--test-name", " latest"], "--test-name: ' latest' is the store's own"),
        (["--test-name", ".."], "--test-name: not a plain name"),
        (["--test-name", "a/b"], "--test-name: not a plain name"),
        (["--test-name", ""], "--test-name: empty"),
        (["--test-name", ".hidden"], "--test-name: a hidden name"),
    ],
)
def test_options_refused_together_on_every_backend_path(argv: list[str], says: str) -> None:
    """_run_options is what every `run` goes through, sim included (it skips _validate)."""
    with pytest.raises(BadInput, match="^" + re.escape(says)):
        _run_options(_parse(*argv))


def test_a_scenario_value_named_by_the_file_key_unless_a_flag_gave_it(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[target]\nvoters = 5\n")
    with pytest.raises(BadInput, match=re.escape(f"--scenario: {path}: target.voters: 5 voters")):
        _run_options(_parse("--scenario", str(path), "--nodes", "3"))
    with pytest.raises(BadInput, match=re.escape("--voters: 2 voters but only 1 nodes")):
        _run_options(_parse("--scenario", str(path), "--nodes", "1", "--voters", "2"))


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("time_limit_s = inf", "time_limit_s", "got inf"),
        ("time_limit_s = 1e12", "time_limit_s", "<= 604800"),
        ("seed = 18446744073709551616", "seed", f"0..{INT64_MAX}"),
        ("concurrency = 5000", "concurrency", "1..1024"),
        ("[target]\nnodes = 100000", "target.nodes", "1..64"),
        ("[nemesis]\ninterval_s = inf", "nemesis.interval_s", "got inf"),
        (
            "time_limit_s = 600000\n[nemesis]\nkinds = ['kill']\ninterval_s = 0.5",
            "nemesis.interval_s",
            f"at most {MAX_FAULTS}",
        ),
    ],
)
def test_a_scenario_value_out_of_range_is_refused_naming_its_key(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.key == key and says in err.value.why, err.value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"seeds = [{INT64_MAX + 1}]", "seeds[0]: needs an integer in 0.."),
        ("[defaults]\nnodes = 100000", "defaults.nodes: needs an integer in 1..64"),
        ("[[nemesis]]\nname = 'k'\nkinds = ['kill']\ninterval_s = inf", "nemesis[0].interval_s"),
        ("[defaults]\ntime_limit_s = nan", "defaults.time_limit_s: needs a number > 0"),
    ],
)
def test_a_matrix_value_out_of_range_is_refused_before_any_cell(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text + "\n[[scenario]]\nname = 'a'\nworkload = 'ddl-dml'\n")
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_matrix(path)


def test_a_stored_run_out_of_range_cannot_be_repeated(tmp_path: Path) -> None:
    """RunOptions itself refuses: repro (and any caller) gets a ValueError naming the field."""
    with pytest.raises(OptionRangeError, match="seed: needs an integer"):
        RunOptions(seed=INT64_MAX + 1)
    run_json = tmp_path / "run.json"
    run_json.write_text('{"seed": 1, "options": {"nodes": 100000, "voters": 3}}')
    with pytest.raises(OptionRangeError, match=re.escape("nodes: needs an integer in 1..64")):
        options_from_run_json(run_json, tmp_path)


@pytest.mark.parametrize("name", ["latest", "nightly", "latest."])
def test_the_store_never_makes_a_test_of_its_own_entries(tmp_path: Path, name: str) -> None:
    new_run_dir(tmp_path, "t")
    with pytest.raises(ValueError, match="the store's own entry"):
        new_run_dir(tmp_path, name)
    assert (tmp_path / "latest").resolve().parent == (tmp_path / "t").resolve()


# -- the property: whatever the flags and the scenario, validation answers 254 or accepts, fast

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 3, 5, 64, 65, 604800, 604801, INT64_MAX, INT64_MAX + 1]),
)
_TEXT = st.one_of(
    _NUMBERS.map(str),
    st.sampled_from(["", " ", "nan", "-inf", "1e999", "0x10", "5 ", "latest", "..", "a/b"]),
    st.text(max_size=8),
)
_FLAGS = [
    "--nodes", "--voters", "--seed", "--time-limit", "--concurrency", "--nemesis-interval",
    "--ready-timeout", "--delay-ms", "--max-skew-ms", "--test-name",
]  # fmt: skip
_SCENARIO_KEYS = [
    "seed", "time_limit_s", "concurrency", "target.nodes", "target.voters", "nemesis.interval_s",
]  # fmt: skip


def _toml_number(value: int | float) -> str:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and abs(value) == float("inf"):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _scenario_text(values: list[tuple[str, int | float]]) -> str:
    """A small scenario file: top-level keys first, then one table per dotted key's table."""
    tables: dict[str, list[str]] = {}
    for key, value in dict(values).items():
        table, _, name = key.rpartition(".")
        tables.setdefault(table, []).append(f"{name} = {_toml_number(value)}\n")
    text = "".join(tables.pop("", []))
    return text + "".join(f"[{t}]\n" + "".join(lines) for t, lines in tables.items())


def _judged(argv: list[str], store: Path) -> int:
    """What `schemachaos run` decides before it starts anything: 254 or 0 (go)."""
    try:
        args = build_parser().parse_args(["run", *argv, "--store", str(store)])
    except SystemExit as e:
        return int(e.code or 0)
    try:
        opts, _ = _run_options(args)
        if opts.backend != "sim":  # sim leaves here for its own run (the one orchestrator)
            _validate(opts)
    except BadInput:
        return 254
    return 0


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    flags=st.lists(st.tuples(st.sampled_from(_FLAGS), _TEXT), max_size=4),
    scenario=st.lists(st.tuples(st.sampled_from(_SCENARIO_KEYS), _NUMBERS), max_size=2),
    nemesis=st.sampled_from(["none", "kill", "all"]),
    backend=st.sampled_from(["local", "sim"]),
)
@pytest.mark.timeout(600)
def test_no_command_line_crashes_or_hangs_validation(
    tmp_path: Path,
    flags: list[tuple[str, str]],
    scenario: list[tuple[str, int | float]],
    nemesis: str,
    backend: str,
) -> None:
    argv = ["--backend", backend, "--nemesis", nemesis, "--local-base", "127.0.0.200"]
    for flag, value in flags:
        argv += [f"{flag}={value}"]
    if scenario:
        path = tmp_path / "s.toml"
        path.write_text(_scenario_text(scenario))
        argv += ["--scenario", str(path)]
    started = time.monotonic()
    code = _judged(argv, tmp_path / "store")  # any other exception is the 255 of a real run
    assert code in (0, 254)
    assert time.monotonic() - started < 60, argv


@pytest.mark.parametrize(
    "argv",
    [
        ["--time-limit", "inf", "--backend", "sim"],
        ["--backend", "sim", "--nodes", "3", "--voters", "5"],
        ["--backend", "sim", "--test-name", "latest"],
        # refused after the backend is resolved: its note ("backend sim (asked for)") was a
        # second line before the refusal
        ["--backend", "sim", "--toggle", "bogus"],
        ["--backend", "sim", "--target", "bogus"],
    ],
)
def test_the_command_refuses_with_254_in_one_line_before_starting(
    tmp_path: Path, argv: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *argv, "--store", str(tmp_path / "store")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 254, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "store" / "latest").exists()  # no run directory was made


@pytest.mark.parametrize(
    ("run_json", "says"),
    [
        ('{"test": "latest", "backend": "sim"}', "--test-name: 'latest' is the store's own"),
        ('{"backend": "sim", "options": {"nodes": 3, "voters": 5}}', "--voters: 5 voters"),
    ],
)
def test_repro_of_a_run_the_store_or_the_cluster_refuses_is_bad_input(
    tmp_path: Path, run_json: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "store" / "t" / "20261207T000000"
    run.mkdir(parents=True)
    (run / "run.json").write_text(run_json)
    assert main(["repro", str(run), "--store", str(tmp_path / "store"), "--no-progress"]) == 254
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run / "run.json") in err and says in err, err
