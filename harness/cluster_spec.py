"""What a cluster is made from, shared by provisioning (harness.backends), the run's guards
(harness.reaper) and the rest: the spec, the Cluster it gives, the one error of provisioning,
and the marks that find what a run left behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.remote import Remote

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
    seed: int = 0  # what a simulated world draws every choice from


@dataclass
class Cluster:
    """The nodes of one run and how to reach them."""

    nodes: list[str]
    voters: list[str]
    learners: list[str]
    remotes: dict[str, Remote]
    backend: str
    run_id: str = ""
    node_dirs: dict[str, str] = field(default_factory=dict)  # per-node root for data, config, log
    python: str = "python3"  # interpreter on the nodes
    code_dir: str | None = None  # PYTHONPATH on the nodes; None: upload the code there
    upload_code_to: str | None = None
    ports: dict[str, int] = field(
        default_factory=lambda: {"client_port": 10800, "metastore_port": 10900, "peer_port": 11000}
    )
    shared_host: bool = False  # every node on one host: its iptables and qdiscs are shared

    @property
    def hosts(self) -> dict[str, str]:
        return {n: self.remotes[n].host for n in self.nodes}


def node_names(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


def split_roles(nodes: list[str], voters: int) -> tuple[list[str], list[str]]:
    if not 1 <= voters <= len(nodes):
        raise ProvisionError(f"--voters must be between 1 and the node count ({len(nodes)})")
    return nodes[:voters], nodes[voters:]
