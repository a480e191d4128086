"""What a cluster is made from, shared by provisioning and the run's guards (harness.reaper):
the spec, the one error of provisioning, and the marks that find what a run left behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IPTABLES_COMMENT = "schemachaos"
SSH_ROOT = "/var/tmp/schemachaos"
REMOTE_IPTABLES_CLEAN = (
    "for t in filter mangle nat raw; do iptables -w -t $t -S 2>/dev/null "
    f"| grep -F -- '--comment {IPTABLES_COMMENT}' | sed 's/^-A /-D /' "
    '| while read -r rule; do eval iptables -w -t $t "$rule" && echo removed; done; done; true'
)


class ProvisionError(Exception):
    """The cluster could not be set up; the message is one line naming the cause."""


@dataclass(frozen=True)
class ClusterSpec:
    """What to provision: backend, node count, voters, and backend specifics."""

    backend: str = "auto"
    nodes: int = 5
    voters: int = 3
    nodes_file: Path | None = None
    image: str | None = None
    local_base: str = "127.0.0.10"
    ready_timeout_s: float = 60.0
