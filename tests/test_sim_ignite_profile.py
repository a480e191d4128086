"""The `ignite` profile: Ignite's three design choices as config switches, each shown against
the seed's default."""

from __future__ import annotations

from typing import Any

import pytest

from schemasync.catalog import Catalog, apply_ddl
from schemasync.config import ConfigError, parse_config
from schemasync.ddl import parse_ddl

BASE: dict[str, Any] = {
    "name": "n1",
    "data_dir": "/tmp/x",
    "nodes": {"n1": {"host": "h", "client_port": 1, "metastore_port": 2, "peer_port": 3}},
}


def test_profile_sets_the_three_switches_and_explicit_keys_win() -> None:
    seed = parse_config(BASE)
    assert (seed.base_ts, seed.rename_column_compatible, seed.index_state_bumps_version) == (
        "enlist",
        True,
        True,
    )
    ignite = parse_config({**BASE, "profile": "ignite"})
    assert (ignite.base_ts, ignite.rename_column_compatible, ignite.index_state_bumps_version) == (
        "begin",
        False,
        False,
    )
    mixed = parse_config({**BASE, "profile": "ignite", "rename_column_compatible": True})
    assert mixed.rename_column_compatible and mixed.base_ts == "begin"
    with pytest.raises(ConfigError, match="profile: must be one of default, ignite"):
        parse_config({**BASE, "profile": "cockroach"})
    with pytest.raises(ConfigError, match="index_state_bumps_version: must be true or false"):
        parse_config({**BASE, "index_state_bumps_version": "no"})


def _versions_after_index_states(bump: bool) -> list[tuple[str, int]]:
    cat = Catalog.empty()
    steps = [
        "CREATE TABLE t (a INT64)",
        "CREATE INDEX i ON t (a)",
        "ALTER INDEX i SET STATE BUILDING",
        "ALTER INDEX i SET STATE AVAILABLE",
    ]
    seen = []
    for version, stmt in enumerate(steps, start=1):
        tables, next_id = apply_ddl(cat, parse_ddl(stmt), index_state_bumps_version=bump)
        cat = Catalog(version, version, version, 0, stmt, tables, next_id)
        table = cat.table("t")
        assert table is not None
        index = table.index("i")
        seen.append((index.state if index else "-", table.schema_version))
    return seen


def test_index_state_change_bumps_the_schema_version_unless_switched_off() -> None:
    assert _versions_after_index_states(True) == [
        ("-", 1),
        ("REGISTERED", 2),
        ("BUILDING", 3),
        ("AVAILABLE", 4),
    ]
    assert _versions_after_index_states(False) == [
        ("-", 1),
        ("REGISTERED", 2),  # creating the index still is a new version
        ("BUILDING", 2),
        ("AVAILABLE", 2),
    ]


def test_the_profile_reaches_the_node_and_the_checker() -> None:
    """The harness writes none of the three switches unless the scenario does, so node.toml's
    profile decides them; run.json's config tells the checker the same."""
    import tomllib
    from types import SimpleNamespace

    from checker.analyze import rename_column_compatible
    from targets.schemasync.config import render_config

    cluster: Any = SimpleNamespace(
        nodes=["n1"],
        voters=["n1"],
        node_dirs={"n1": "/tmp/n1"},
        remotes={"n1": SimpleNamespace(host="h")},
        ports={"client_port": 1, "metastore_port": 2, "peer_port": 3},
    )
    text = render_config(cluster, "n1", {"profile": "ignite", "toggles": []})
    ignite = parse_config(tomllib.loads(text))
    assert (ignite.base_ts, ignite.rename_column_compatible) == ("begin", False)
    assert not rename_column_compatible({"config": {"profile": "ignite"}})
    assert rename_column_compatible(
        {"config": {"profile": "ignite", "rename_column_compatible": True}}
    )
    assert rename_column_compatible({"config": {}})
    assert rename_column_compatible({"config": "not a table"})
