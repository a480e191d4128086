"""Optional target capabilities are runtime_checkable protocols of contract.target: the harness
and the nemeses test them with isinstance. Each target has exactly the ones it implements."""

from __future__ import annotations

import pytest

from contract.target import (
    ApplyInhibitControl,
    AsyncReadiness,
    ClockControl,
    DelayControl,
    DockerImageProvider,
    LaggingControl,
    Primaries,
    SettingsChecker,
    StartsAll,
    Target,
    TargetClient,
    TimingBounds,
    VersionReporter,
)
from targets.galera.target import GaleraTarget
from targets.postgres import PostgresTarget
from targets.postgres.client import PostgresClient
from targets.registry import TARGETS, load_target
from targets.schemasync import SchemaSyncTarget
from targets.schemasync.client import SchemaSyncClient

CAPABILITIES = (
    ApplyInhibitControl,
    AsyncReadiness,
    ClockControl,
    DockerImageProvider,
    LaggingControl,
    Primaries,
    SettingsChecker,
    StartsAll,
    TimingBounds,
    VersionReporter,
)


def _capabilities(obj: object) -> set[str]:
    return {c.__name__ for c in CAPABILITIES if isinstance(obj, c)}


def test_each_target_has_exactly_its_capabilities() -> None:
    schemasync = SchemaSyncTarget()
    postgres = PostgresTarget()
    assert isinstance(schemasync, Target) and isinstance(postgres, Target)
    assert _capabilities(schemasync) == {
        "ApplyInhibitControl",
        "AsyncReadiness",
        "ClockControl",
        "Primaries",
        "SettingsChecker",
        "StartsAll",
        "TimingBounds",
        "VersionReporter",
    }
    assert _capabilities(postgres) == {
        "DockerImageProvider",
        "LaggingControl",
        "Primaries",
        "SettingsChecker",
        "StartsAll",
        "VersionReporter",
    }
    assert postgres.own_lagging_modes == frozenset({"drop", "inhibit"})
    galera = GaleraTarget()
    assert isinstance(galera, Target)
    assert _capabilities(galera) == {
        "ClockControl",
        "DockerImageProvider",
        "LaggingControl",
        "SettingsChecker",
        "StartsAll",
    }


def test_only_the_schemasync_client_changes_its_delay() -> None:
    schemasync = SchemaSyncClient("n1", client=object())
    assert isinstance(schemasync, TargetClient) and isinstance(schemasync, DelayControl)
    assert not isinstance(PostgresClient.__new__(PostgresClient), DelayControl)


def test_the_registry_names_every_target_and_refuses_others() -> None:
    assert set(TARGETS) >= {"schemasync", "postgres"}
    assert all(load_target(name).name == name for name in TARGETS)
    with pytest.raises(ValueError, match="unknown target 'oracle'"):
        load_target("oracle")
