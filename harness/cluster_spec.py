"""What a cluster is made from, shared by provisioning (harness.backends), the run's guards
(harness.reaper) and the rest: the spec, the Cluster it gives, the one error of provisioning,
and the marks that find what a run left behind."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from contract.remote import Remote

if TYPE_CHECKING:
    from harness.remote_ssh import SshHost

# A nodes file as read (harness.remote_ssh), named here so a guard can take it without
# importing the ssh remote at module load
SshHosts: TypeAlias = "tuple[SshHost, ...]"

IPTABLES_COMMENT = "schemachaos"
# A run's own mark on a rule, beside IPTABLES_COMMENT: `clean --run-id` removes a rule carrying
# it only when the id is exactly that run's (no prefix match: run X must not take X1's rules).
RUN_COMMENT_PREFIX = f"{IPTABLES_COMMENT}.run="
# What store.new_run_dir makes, and what Docker allows in names and labels: nothing a filter
# could widen (no empty id, no wildcard, no space).
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SSH_ROOT = "/var/tmp/schemachaos"
REMOTE_IPTABLES_CLEAN = (
    "for t in filter mangle nat raw; do iptables -w -t $t -S 2>/dev/null "
    f"| grep -F -- '--comment {IPTABLES_COMMENT}' | sed 's/^-A /-D /' "
    '| while read -r rule; do eval iptables -w -t $t "$rule" && echo removed; done; done; true'
)


class ProvisionError(Exception):
    """The cluster could not be set up; the message is one line naming the cause."""


@dataclass(frozen=True)
class NodeLayout:
    """A cluster's node names and roles: the first `voters` of the nodes vote, the rest learn."""

    nodes: tuple[str, ...]
    voters: tuple[str, ...]
    learners: tuple[str, ...]


@dataclass(frozen=True)
class ClusterSpec:
    """What to provision: backend, node count, voters, and backend specifics. A run's spec
    carries its layout as resolved (`harness.resolved_run`); a spec made without a run (a
    test, a benchmark) has its nodes counted or read from `hosts`."""

    backend: str = "auto"
    nodes: int = 5
    voters: int = 3
    nodes_file: Path | None = None
    hosts: SshHosts | None = None  # the nodes file as the run read it
    layout: NodeLayout | None = None  # the run's nodes and roles, as resolved
    image: str | None = None
    local_base: str = "127.0.0.10"
    ready_timeout_s: float = 60.0
    seed: int = 0  # what a simulated world draws every choice from


def check_run_id(run_id: str) -> str:
    """The id itself, or ValueError naming why: every filter of a run's things is built from
    one, and an empty or odd id must never widen a filter to other runs."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ValueError(
            f"not a run id: {run_id!r} (1 to 128 letters, digits, '_', '.', '-'; "
            "starting with a letter or digit)"
        )
    return run_id


def run_comment(run_id: str) -> str:
    """The iptables comment that marks a host rule as this run's.

    A nemesis adding a host rule passes `-m comment --comment <this>` beside the plain
    IPTABLES_COMMENT, so `clean --run-id` can attribute the rule without the run's record."""
    return RUN_COMMENT_PREFIX + check_run_id(run_id)


def _flag_values(rule: str, flags: tuple[str, ...]) -> list[str]:
    """The values of one `iptables -S` line's `flags` (none if it cannot be split)."""
    try:
        args = shlex.split(rule)
    except ValueError:
        return []
    return [value for flag, value in itertools.pairwise(args) if flag in flags]


def rule_comments(rule: str) -> list[str]:
    """The comments of one `iptables -S` line."""
    return _flag_values(rule, ("--comment",))


def _rule_addresses(rule: str) -> set[str]:
    """Source and destination addresses a rule names (`/32` dropped, lists split)."""
    named = _flag_values(rule, ("-s", "-d", "--source", "--destination"))
    return {a.removesuffix("/32") for v in named for a in v.split(",")}


def rule_is_runs(rule: str, run_id: str | None, addresses: Collection[str] | None) -> bool:
    """Whether an `iptables -S` rule is ours and belongs to the run asked for.

    A rule carrying a run comment belongs to that run only; one without (added before the
    nemeses marked rules with the run) belongs to the run whose node addresses it names.
    Neither run id nor addresses: every rule of ours (a full clean)."""
    comments = rule_comments(rule)
    runs = {
        c.removeprefix(RUN_COMMENT_PREFIX) for c in comments if c.startswith(RUN_COMMENT_PREFIX)
    }
    if IPTABLES_COMMENT not in comments and not runs:
        return False
    if runs and run_id is not None:
        return run_id in runs
    if addresses is None:
        return run_id is None
    return not _rule_addresses(rule).isdisjoint(addresses)


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


def spec_layout(spec: ClusterSpec, names: list[str] | None = None) -> NodeLayout:
    """The spec's layout: the run's, as resolved; else (a spec made without a run) `spec.nodes`
    counted, or `names` from a nodes file (which caps the voters, as a run's does)."""
    if spec.layout is not None:
        return spec.layout
    nodes = names if names is not None else node_names(spec.nodes)
    voters, learners = split_roles(
        nodes, spec.voters if names is None else min(spec.voters, len(nodes))
    )
    return NodeLayout(tuple(nodes), tuple(voters), tuple(learners))
