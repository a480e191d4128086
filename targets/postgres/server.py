"""A PostgreSQL node's server configuration: postgresql.conf, pg_hba.conf, bookkeeping."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
)

from contract.target import SettingsError, TargetSetupError
from targets.postgres.sql import (
    META,
    PORT,
    SYNC_MODES,
    ident,
    quote,
)


class PostgresTargetError(TargetSetupError):
    """PostgreSQL could not be installed, configured, started or made ready on a node."""


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


class PostgresSettings(BaseModel):
    """The target's settings (a scenario's `[target]` keys): anything else is refused, so a
    typo cannot quietly run another test."""

    model_config = ConfigDict(extra="forbid", strict=True)

    synchronous_commit: Literal["async", "remote_apply"] = "async"
    sync_method: Annotated[Literal["FIRST", "ANY"], BeforeValidator(_upper)] = "FIRST"
    max_standby_streaming_delay_ms: Annotated[StrictInt, Field(ge=0)] = 5000
    lag_mode: Literal["drop", "replay-pause", "inhibit"] = "drop"


def check_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with their defaults, or SettingsError naming the key and what is
    allowed."""
    try:
        return PostgresSettings.model_validate(dict(config)).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "-"
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(PostgresSettings.model_fields)
            raise SettingsError(key, f"unknown postgres setting (allowed: {allowed})") from None
        raise SettingsError(key, f"{first['msg']}, got {first.get('input')!r}") from None


DEFAULT_CONFIG: dict[str, Any] = PostgresSettings().model_dump()


BOOTSTRAP_SQL = f"""
SET synchronous_commit = local;  -- the standbys are cloned from this, they cannot ack it yet
CREATE SCHEMA {META};
CREATE TABLE {META}.schema_version (
  id int PRIMARY KEY CHECK (id = 1), catalog_version bigint NOT NULL);
INSERT INTO {META}.schema_version VALUES (1, 1);
CREATE TABLE {META}.table_versions (
  table_name text PRIMARY KEY, schema_version int NOT NULL);
CREATE TABLE {META}.catalog_history (
  catalog_version bigint PRIMARY KEY, activation_ts bigint NOT NULL, ddl text NOT NULL,
  tables jsonb NOT NULL);
INSERT INTO {META}.catalog_history VALUES (1, 0, '', '{{}}');
"""


def server_config(
    node: str, standbys: Sequence[str], config: Mapping[str, Any], socket_dir: str
) -> str:
    """postgresql.conf additions: streaming replication and the synchronous mode asked for."""
    mode = str(config.get("synchronous_commit", "async"))
    if mode not in SYNC_MODES:
        raise PostgresTargetError(f"synchronous_commit: {mode!r} is not one of {SYNC_MODES}")
    method = str(config.get("sync_method", "FIRST")).upper()
    if method not in ("FIRST", "ANY"):
        raise PostgresTargetError(f"sync_method: {method!r} is not FIRST or ANY")
    names = ", ".join(ident(s) for s in standbys)
    sync_names = f"{method} {len(standbys)} ({names})" if mode == "remote_apply" else ""
    delay_ms = int(config.get("max_standby_streaming_delay_ms", 5000))
    lines = {
        "listen_addresses": "'*'",
        "port": str(PORT),
        "unix_socket_directories": quote(socket_dir),
        "wal_level": "replica",
        "max_wal_senders": "10",
        "hot_standby": "on",
        "hot_standby_feedback": "on",
        "wal_receiver_status_interval": "'1s'",
        "wal_retrieve_retry_interval": "'200ms'",
        "max_standby_streaming_delay": f"'{delay_ms}ms'",
        # After a kill, startup first fsyncs every file of the data directory, one by one:
        # 1 to 6 s on a busy shared disk, which the kill nemesis's restart (and the next
        # fault's window) waits for. One syncfs() is 0.3-0.4 s here; nothing differs after it.
        "recovery_init_sync_method": "syncfs",
        "synchronous_commit": "remote_apply" if mode == "remote_apply" else "on",
        "synchronous_standby_names": quote(sync_names),
        "cluster_name": quote(node),
        "shared_buffers": "'32MB'",
        "max_connections": "100",
        "log_line_prefix": "'%m [%p] %a '",
    }
    return "\n# schemachaos\n" + "".join(f"{k} = {v}\n" for k, v in lines.items())


HBA = (
    "host all all 0.0.0.0/0 trust\n"
    "host replication all 0.0.0.0/0 trust\n"
    "local all all trust\n"
    "local replication all trust\n"
)
