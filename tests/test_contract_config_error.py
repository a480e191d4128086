"""Every config we read is refused with the one `ConfigError` (contract.config_error), so the
command line prints any of them as `FILE: KEY: why` and exits 254 without knowing the reader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from contract.config_error import WHOLE_FILE, ConfigError
from contract.target import SettingsError, TargetSetupError
from harness.nightly import load_matrix
from harness.remote_ssh import load_nodes_file
from targets.registry import load_target
from workloads import build_generator
from workloads.scenario import load_scenario


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def _settings(_: Path) -> object:
    target = load_target("schemasync")
    return target.check_settings({"heartbeat_interval": 1})  # type: ignore[attr-defined]


READERS: dict[str, tuple[str, Callable[[Path], object], str | None, str]] = {
    "scenario": ('concurrency = "ten"', load_scenario, "concurrency", "needs an integer"),
    "nodes file": (
        "[[node]]\nname = 'n1'\nhost = 'h1'\nport = '22'",
        load_nodes_file,
        "node[0]",
        "port: needs an integer",
    ),
    "matrix": ("seeds = [", load_matrix, WHOLE_FILE, "not valid TOML"),
    "target settings": ("", _settings, "heartbeat_interval", "unknown schemasync setting"),
    "workload options": (
        "",
        lambda _: build_generator("ddl-dml", 0, 1, {"ddl_interval": 1}),
        "ddl_interval",
        "unknown workload option",
    ),
}


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_refuses_with_the_one_config_error(tmp_path: Path, reader: str) -> None:
    text, read, key, why = READERS[reader]
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        read(path)
    assert type(err.value) in (ConfigError, SettingsError)
    assert (err.value.key, err.value.why.startswith(why)) == (key, True), err.value
    file = err.value.file
    assert file in (str(path), None)
    head = ": ".join(p for p in (file, None if key == WHOLE_FILE else key) if p)
    assert str(err.value) == (f"{head}: {err.value.why}" if head else err.value.why)


def test_the_line_names_file_key_and_why_each_only_when_known() -> None:
    assert str(ConfigError("node[1].port", "needs an integer", file="n.toml")) == (
        "n.toml: node[1].port: needs an integer"
    )
    assert str(ConfigError(WHOLE_FILE, "not valid TOML", file=Path("m.toml"))) == (
        "m.toml: not valid TOML"
    )
    assert str(ConfigError("toggles", "the postgres target has no toggles")) == (
        "toggles: the postgres target has no toggles"
    )


def test_a_target_setting_is_a_config_error_and_a_setup_error() -> None:
    e = SettingsError("toggles", "unknown")
    assert isinstance(e, ConfigError) and isinstance(e, TargetSetupError)
    assert (e.file, e.key, e.why, str(e)) == (None, "toggles", "unknown", "toggles: unknown")
