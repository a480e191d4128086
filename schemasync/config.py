"""Node configuration from TOML, validated up front: a bad key is one clear line and exit 2."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemasync.toggles import validate_toggles


class ConfigError(Exception):
    """A bad configuration value; ``str()`` is the one line printed before exit 2."""

    def __init__(self, path: str, key: str, why: str) -> None:
        super().__init__(f"config error: {path}: {key}: {why}")
        self.key = key
        self.why = why


@dataclass(frozen=True)
class NodeAddress:
    name: str
    host: str
    client_port: int
    metastore_port: int
    peer_port: int
    bind: str


@dataclass(frozen=True)
class NodeConfig:
    name: str
    data_dir: Path
    nodes: dict[str, NodeAddress]
    voters: tuple[str, ...]
    delay_duration_ms: int = 500
    max_clock_skew_ms: int = 500
    idle_safe_time_interval_ms: int = 250
    partitions: int = 4
    base_ts: str = "enlist"
    rename_column_compatible: bool = True
    index_state_bumps_version: bool = True
    profile: str = "default"
    toggles: frozenset[str] = frozenset()
    log_file: Path | None = None
    election_timeout_min_ms: int = 300
    election_timeout_max_ms: int = 600
    heartbeat_interval_ms: int = 50
    snapshot_threshold: int = 1000
    request_timeout_ms: int = 10000
    synctime_reorder_window_ms: int = 50
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def me(self) -> NodeAddress:
        return self.nodes[self.name]

    @property
    def learners(self) -> tuple[str, ...]:
        return tuple(n for n in sorted(self.nodes) if n not in self.voters)

    @property
    def is_voter(self) -> bool:
        return self.name in self.voters


# Design choices where the seed and Apache Ignite 3 differ; a key set in the file wins.
#  base_ts: the seed enlists a table at its first touch; Ignite validates against the
#    transaction's begin timestamp (system.md "Enlisting a table"; Ignite's schema sync IEP-98).
#  rename_column_compatible: by ids a rename loses nothing (seed 001); Ignite's forward-compat
#    validator treats a column rename as incompatible (compat.py, system.md).
#  index_state_bumps_version: the seed bumps a table's schema version on every index state
#    change (seed 004); Ignite changes an index's status in the catalog without a new table
#    schema version, so a transaction on version I cannot tell the index states apart.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {
        "base_ts": "enlist",
        "rename_column_compatible": True,
        "index_state_bumps_version": True,
    },
    "ignite": {
        "base_ts": "begin",
        "rename_column_compatible": False,
        "index_state_bumps_version": False,
    },
}

_INT_KEYS = {
    "delay_duration_ms": (1, 600_000),
    "max_clock_skew_ms": (0, 600_000),
    "idle_safe_time_interval_ms": (1, 600_000),
    "partitions": (1, 4096),
    "election_timeout_min_ms": (10, 600_000),
    "election_timeout_max_ms": (10, 600_000),
    "heartbeat_interval_ms": (1, 60_000),
    "snapshot_threshold": (2, 10_000_000),
    "request_timeout_ms": (10, 3_600_000),
    "synctime_reorder_window_ms": (0, 60_000),
}
_KNOWN = {
    "name",
    "data_dir",
    "voters",
    "nodes",
    "base_ts",
    "rename_column_compatible",
    "index_state_bumps_version",
    "profile",
    "toggles",
    "log_file",
    *_INT_KEYS,
}


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a node's TOML file; raises ConfigError naming the key."""
    p = str(path)
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(p, "<file>", "no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(p, "<toml>", str(e)) from None
    return parse_config(raw, p)


def parse_config(raw: dict[str, Any], path: str = "<config>") -> NodeConfig:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(path, key, why)

    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise bad("name", "required, a non-empty string")
    data_dir = raw.get("data_dir")
    if not isinstance(data_dir, str) or not data_dir:
        raise bad("data_dir", "required, a path")
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, dict) or not nodes_raw:
        raise bad("nodes", "required, a table [nodes.<name>] per node")
    nodes: dict[str, NodeAddress] = {}
    for node_name, spec in nodes_raw.items():
        key = f"nodes.{node_name}"
        if not isinstance(spec, dict):
            raise bad(key, "must be a table")
        host = spec.get("host")
        if not isinstance(host, str) or not host:
            raise bad(f"{key}.host", "required, an address")
        ports = []
        for port_key in ("client_port", "metastore_port", "peer_port"):
            port = spec.get(port_key)
            if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
                raise bad(f"{key}.{port_key}", f"must be a port number, got {port!r}")
            ports.append(port)
        if len(set(ports)) != 3:
            raise bad(key, "client_port, metastore_port and peer_port must differ")
        bind = spec.get("bind", host)
        if not isinstance(bind, str):
            raise bad(f"{key}.bind", "must be an address")
        nodes[node_name] = NodeAddress(node_name, host, ports[0], ports[1], ports[2], bind)
    if name not in nodes:
        raise bad("name", f"{name!r} is not one of nodes ({', '.join(sorted(nodes))})")
    voters_raw = raw.get("voters", sorted(nodes)[:3])
    if not isinstance(voters_raw, list) or not voters_raw:
        raise bad("voters", "must be a non-empty list of node names")
    for v in voters_raw:
        if v not in nodes:
            raise bad("voters", f"{v!r} is not one of nodes")
    if len(set(voters_raw)) != len(voters_raw):
        raise bad("voters", "duplicate names")
    ints: dict[str, int] = {}
    for key, (lo, hi) in _INT_KEYS.items():
        if key not in raw:
            continue
        value = raw[key]
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise bad(key, f"must be an integer in [{lo}, {hi}], got {value!r}")
        ints[key] = value
    profile = raw.get("profile", "default")
    if profile not in PROFILES:
        raise bad("profile", f"must be one of {', '.join(sorted(PROFILES))}, got {profile!r}")
    defaults = PROFILES[profile]
    base_ts = raw.get("base_ts", defaults["base_ts"])
    if base_ts not in ("enlist", "begin"):
        raise bad("base_ts", f"must be 'enlist' or 'begin', got {base_ts!r}")
    switches: dict[str, bool] = {}
    for key in ("rename_column_compatible", "index_state_bumps_version"):
        value = raw.get(key, defaults[key])
        if not isinstance(value, bool):
            raise bad(key, "must be true or false")
        switches[key] = value
    try:
        toggles = validate_toggles(raw.get("toggles", []))
    except ValueError as e:
        raise bad("toggles", str(e)) from None
    log_file = raw.get("log_file")
    if log_file is not None and not isinstance(log_file, str):
        raise bad("log_file", "must be a path")
    cfg = NodeConfig(
        name=name,
        data_dir=Path(data_dir),
        nodes=nodes,
        voters=tuple(voters_raw),
        base_ts=base_ts,
        profile=profile,
        rename_column_compatible=switches["rename_column_compatible"],
        index_state_bumps_version=switches["index_state_bumps_version"],
        toggles=toggles,
        log_file=Path(log_file) if log_file else None,
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
        **ints,
    )
    if cfg.election_timeout_min_ms > cfg.election_timeout_max_ms:
        raise bad("election_timeout_min_ms", "must not exceed election_timeout_max_ms")
    if cfg.heartbeat_interval_ms * 2 > cfg.election_timeout_min_ms:
        raise bad("heartbeat_interval_ms", "must be at most half of election_timeout_min_ms")
    return cfg
