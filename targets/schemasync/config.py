"""A schemasync node's configuration: the settings a scenario may give, the defaults, and
the `node.toml` each node reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from contract.target import ClusterView, SettingsError
from schemasync.toggles import TOGGLES


class SchemaSyncSettings(BaseModel):
    """What a scenario's `[target]` may set on the nodes: the node's own keys (its ranges are
    the node's to check, `schemasync.config`), anything else is refused instead of being
    written into node.toml where the node would ignore it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # a scenario may say delay_ms and max_skew_ms, as the command line's flags do
    delay_duration_ms: StrictInt | None = Field(
        None, validation_alias=AliasChoices("delay_duration_ms", "delay_ms")
    )
    max_clock_skew_ms: StrictInt | None = Field(
        None, validation_alias=AliasChoices("max_clock_skew_ms", "max_skew_ms")
    )
    idle_safe_time_interval_ms: StrictInt | None = None
    partitions: StrictInt | None = None
    base_ts: Literal["enlist", "begin"] | None = None
    rename_column_compatible: StrictBool | None = None
    index_state_bumps_version: StrictBool | None = None
    profile: Literal["default", "ignite"] | None = None
    toggles: list[StrictStr] | None = None
    election_timeout_min_ms: StrictInt | None = None
    election_timeout_max_ms: StrictInt | None = None
    heartbeat_interval_ms: StrictInt | None = None
    snapshot_threshold: StrictInt | None = None
    request_timeout_ms: StrictInt | None = None
    synctime_reorder_window_ms: StrictInt | None = None

    @field_validator("toggles")
    @classmethod
    def _known_toggles(cls, names: list[str] | None) -> list[str] | None:
        unknown = [n for n in names or [] if n not in TOGGLES]
        if unknown:
            raise ValueError(f"unknown {unknown} (known: {', '.join(TOGGLES)})")
        return names

    @model_validator(mode="after")
    def _idle_within_half_delay(self) -> SchemaSyncSettings:
        # An idle SyncTime slower than DD/2, when asked for, is a scenario's mistake: safe time
        # would trail activations. (A small --delay-ms alone keeps the node's default idle.)
        idle = self.idle_safe_time_interval_ms
        delay = self.delay_duration_ms or DEFAULT_CONFIG["delay_duration_ms"]
        if idle is not None and 2 * idle > delay:
            raise ValueError(
                f"idle_safe_time_interval_ms {idle} must stay within delay_duration_ms/2 "
                f"({delay} ms)"
            )
        return self


def check_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the nodes would run with (the defaults under the ones given), or
    SettingsError naming the key and what is allowed."""
    try:
        settings = SchemaSyncSettings.model_validate(dict(config))
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        if not key and "idle_safe_time_interval_ms" in first["msg"]:
            key = "idle_safe_time_interval_ms"
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(SchemaSyncSettings.model_fields)
            raise SettingsError(key, f"unknown schemasync setting (allowed: {allowed})") from None
        why = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "value_error":
            raise SettingsError(key or "-", why) from None
        raise SettingsError(key or "-", f"{why}, got {first.get('input')!r}") from None
    return {**DEFAULT_CONFIG, **settings.model_dump(exclude_none=True)}


def timing_bounds(config: Mapping[str, Any]) -> tuple[int, int]:
    """CSmax and DD in ms of these settings (SettingsError if they are bad)."""
    merged = check_settings(config)
    return int(merged["max_clock_skew_ms"]), int(merged["delay_duration_ms"])


DEFAULT_CONFIG: dict[str, Any] = {
    "delay_duration_ms": 500,
    "max_clock_skew_ms": 500,
    "idle_safe_time_interval_ms": 250,
    "partitions": 4,
    # base_ts, rename_column_compatible and index_state_bumps_version are left to the node:
    # its `profile` sets them, and a default written here would override the profile
    "toggles": [],
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(_toml_value(v) for v in items) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def render_config(cluster: ClusterView, node: str, config: dict[str, Any]) -> str:
    """The TOML of docs/interfaces.md for one node."""
    root = cluster.node_dirs[node]
    merged = {**DEFAULT_CONFIG, **config}
    lines = [
        f"name = {_toml_value(node)}",
        f"data_dir = {_toml_value(root)}",
        f"voters = {_toml_value(cluster.voters)}",
        f"log_file = {_toml_value(root + '/node.log')}",
    ]
    for key in sorted(merged):
        value = merged[key]
        if key in {"name", "data_dir", "voters", "log_file", "nodes"} or value is None:
            continue
        if isinstance(value, dict):
            continue
        lines.append(f"{key} = {_toml_value(value)}")
    for other in cluster.nodes:
        lines.append("")
        lines.append(f"[nodes.{other}]")
        lines.append(f"host = {_toml_value(cluster.remotes[other].host)}")
        for port_name, port in cluster.ports.items():
            lines.append(f"{port_name} = {port}")
    return "\n".join(lines) + "\n"
