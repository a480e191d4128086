"""A Galera node's server configuration and the target's settings (pure).

Every node takes writes. `osu_method` picks how DDL replicates: TOI (total order isolation: at
one point of the global write-set order, on every node) or RSU (rolling schema upgrade: only on
the node that ran it, while that node is desynced). `sync_wait` is `wsrep_sync_wait` for the
clients' sessions: 1 makes each read wait until the node applied every write-set the cluster
had committed when the read began.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.target import SettingsError, TargetSetupError

CLIENT_PORT = 3306
GROUP_PORT = 4567  # gcomm: write-set replication and membership
IST_PORT = 4568
SST_PORT = 4444
REPLICATION_PORTS = (GROUP_PORT, IST_PORT, SST_PORT)
PROVIDER = "/usr/lib/galera/libgalera_smm.so"
SERVER = "/usr/sbin/mariadbd"
SOCKET = "/run/mysqld/mysqld.sock"
CLUSTER_NAME = "schemachaos"
USER = "schemachaos"  # the clients' account, created on the bootstrap node, replicated by TOI
APP_DB = "app"  # the workload's tables
META_DB = "schemachaos"  # the catalog log
OSU_METHODS = ("TOI", "RSU")
DEFAULT_CONFIG: dict[str, Any] = {
    "osu_method": "TOI",
    "sync_wait": 1,
    # MariaDB's default, 7: errors applying DDL, row-level and reordered writes are skipped,
    # so a node whose DDL failed to apply stays in the cluster with a different schema.
    "ignore_apply_errors": 7,
}


class GaleraTargetError(TargetSetupError):
    """Galera could not be installed, configured, started or made ready on a node."""


class GaleraSettingsError(SettingsError, GaleraTargetError):
    """A setting Galera does not have, or a bad value: `<key>: <why>`."""


def validated(config: Mapping[str, Any]) -> dict[str, Any]:
    """The target's settings with defaults, each checked; an unknown or bad one names its
    key (a typo must not quietly run another test)."""
    unknown = sorted(set(config) - set(DEFAULT_CONFIG))
    if unknown:
        known = ", ".join(DEFAULT_CONFIG)
        raise GaleraSettingsError(unknown[0], f"unknown galera setting (allowed: {known})")
    merged = {**DEFAULT_CONFIG, **config}
    osu = str(merged["osu_method"]).upper()
    if osu not in OSU_METHODS:
        raise GaleraSettingsError("osu_method", f"{osu!r} is not one of {OSU_METHODS}")
    merged["osu_method"] = osu
    for key, allowed in (("sync_wait", range(16)), ("ignore_apply_errors", range(16))):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise GaleraSettingsError(key, f"{value!r} is not an integer 0..15")
    return merged


def server_config(
    node: str,
    host: str,
    peers: Sequence[str],
    root: str,
    config: Mapping[str, Any],
) -> str:
    """The node's my.cnf: a Galera node with rsync SST, ROW binlog, interleaved autoinc locks
    (Galera cannot certify the table-level ones) and a durable commit."""
    settings = validated(config)
    provider_options = "; ".join(
        [
            "gcache.size=32M",
            # A dead or cut-off peer is noticed in seconds, not the 15 s default: a fault's
            # window is a few seconds, and the minority must answer 1047 within it.
            "evs.suspect_timeout=PT3S",
            "evs.inactive_timeout=PT6S",
            "evs.install_timeout=PT6S",
            "evs.keepalive_period=PT1S",
            # Never let a component restore itself from gvwstate.dat: the target decides
            # which node bootstraps after a crash (--wsrep-recover, safe_to_bootstrap), once.
            "pc.recovery=FALSE",
        ]
    )
    lines = {
        "user": "mysql",
        "datadir": f"{root}/data",
        "socket": SOCKET,
        "port": str(CLIENT_PORT),
        "bind-address": "0.0.0.0",
        "pid-file": f"{root}/mariadbd.pid",
        "log-error": f"{root}/mariadb.log",
        "skip-name-resolve": "ON",
        "max_connections": "200",
        "binlog_format": "ROW",
        "default_storage_engine": "InnoDB",
        "innodb_autoinc_lock_mode": "2",
        "innodb_flush_log_at_trx_commit": "1",
        "innodb_buffer_pool_size": "64M",
        "innodb_log_file_size": "16M",  # what an rsync SST copies: small is a fast join
        "innodb_lock_wait_timeout": "5",
        "character_set_server": "utf8mb4",
        "collation_server": "utf8mb4_bin",
        "wsrep_on": "ON",
        "wsrep_provider": PROVIDER,
        "wsrep_cluster_name": CLUSTER_NAME,
        "wsrep_cluster_address": "gcomm://" + ",".join(peers),
        "wsrep_node_address": host,
        "wsrep_node_name": node,
        "wsrep_sst_method": "rsync",
        # TOI for every session; a client's DDL session switches to RSU where asked (client.py)
        "wsrep_osu_method": "TOI",
        "lock_wait_timeout": "10",  # metadata locks: an ALTER stuck behind a txn gives up
        # 0 for the target's own root sessions; the clients set the scenario's per session
        "wsrep_sync_wait": "0",
        "wsrep_ignore_apply_errors": str(settings["ignore_apply_errors"]),
        "wsrep_slave_threads": "2",
        "wsrep_provider_options": f'"{provider_options}"',
    }
    body = "".join(f"{k} = {v}\n" for k, v in lines.items())
    return f"# schemachaos: the Galera node {node}\n[mysqld]\n{body}"


def grastate_safe_to_bootstrap(grastate: str) -> tuple[int | None, bool]:
    """(seqno, safe_to_bootstrap) from grastate.dat's text; seqno -1 (after a crash) is None."""
    seqno: int | None = None
    safe = False
    for line in grastate.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "seqno":
            number = int(value.strip())
            seqno = None if number < 0 else number
        elif key.strip() == "safe_to_bootstrap":
            safe = value.strip() == "1"
    return seqno, safe


def recovered_seqno(log_text: str) -> int | None:
    """The position `mariadbd --wsrep-recover` printed: `WSREP: Recovered position: uuid:seqno`."""
    found: int | None = None
    for line in log_text.splitlines():
        if "Recovered position:" in line:
            position = line.rsplit("Recovered position:", 1)[1].strip()
            seqno = int(position.rsplit(":", 1)[1])
            found = None if seqno < 0 else seqno
    return found
