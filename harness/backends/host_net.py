"""The shell commands that cut and slow links on a host: iptables drops and tc shapers.

Every rule carries three comments: ours (`schemachaos`), the run's (`schemachaos.run=<id>`,
`harness.cluster_spec.run_comment`) and the fault's tag, so a heal removes exactly one fault's
rules of one run, and `clean --run-id` finds a run's rules on a host that several runs share
(the local backend). Shapers are an htb root with our own handle; a device has one root and
a qdisc no comment, so the run that installed it is written beside it, in a file named after
the network namespace and the device (`owner_file`), and a run removes only a root it owns,
by its surface's unslow or by its crash sweep alike. What stays shared: the local backend's runs
all send through `lo`, so a run that slows `lo` while another's shaper is there replaces it
(the other run's links are then at full speed until it slows them again).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from harness.cluster_spec import IPTABLES_COMMENT, check_run_id, run_comment

QDISC_HANDLE = "5c5c"  # our htb root on a device: "sc" twice, so heal can tell it from others
OWNER_DIR = "/run/schemachaos"  # root's own tmpfs: gone at reboot, as the shapers are


def _comment_pattern(comment: str) -> str:
    """An extended regex for one exact comment as `iptables -S` prints it: quoted when it has
    a character beyond letters, digits, `_` and `-` (a run comment always does), and never
    a prefix of a longer one (run X must not take X1's rules)."""
    literal = comment.replace(".", "[.]")
    return shlex.quote(f'--comment "?{literal}"?( |$)')


def comment_args(tag: str, run_id: str) -> str:
    """The three comments of a rule: ours, the run's, the fault's."""
    return " ".join(
        f"-m comment --comment {shlex.quote(c)}"
        for c in (IPTABLES_COMMENT, run_comment(run_id), tag)
    )


def drop_command(
    dst_host: str,
    src_hosts: Sequence[str] | None,
    port: int | None,
    tag: str,
    run_id: str,
    shared_host: bool,
) -> str:
    """An iptables rule on the receiving node that drops what arrives from `src_hosts` (None:
    from anyone) on connections to or from `port` (None: any). On a shared host (every node on
    `lo`) the rule also names the receiver's address and `lo`. No source at all cuts nothing:
    `true`, not a rule without `-s`, which would drop from everyone."""
    if src_hosts is not None and not src_hosts:
        return "true"
    where = f"-i lo -d {shlex.quote(dst_host)} " if shared_host else ""
    src = f"-s {','.join(shlex.quote(s) for s in src_hosts)} " if src_hosts is not None else ""
    ports = f"-p tcp -m multiport --ports {int(port)} " if port is not None else ""
    return f"iptables -w -A INPUT {where}{src}{ports}{comment_args(tag, run_id)} -j DROP"


def remove_rules_command(tag: str | None, run_id: str, dst_host: str | None = None) -> str:
    """Delete the run's INPUT rules (only those with `tag`, only those naming destination
    `dst_host`, if given), then print how many of the run's remain (naming `dst_host`).
    `eval`: the run comment is printed quoted."""
    run = f"grep -E -- {_comment_pattern(run_comment(run_id))}"
    mine = [run]
    if dst_host is not None:
        mine.append(f"grep -F -- {shlex.quote(f'-d {dst_host}/32 ')}")
    tagged = [f"grep -E -- {_comment_pattern(tag)}"] if tag is not None else []
    remove = " | ".join(["iptables -w -S INPUT", *mine, *tagged])
    count = " | ".join(["iptables -w -S INPUT", *mine[1:], run.replace("grep -E", "grep -cE")])
    return (
        f"{remove} | sed 's/^-A /-D /' | while read -r rule; do eval iptables -w $rule; done; "
        f"{count} || true"
    )


def owner_file(dev: str) -> str:
    """Shell expression: the file naming the run whose shaper is the root of `dev`. The
    network namespace is in its name because a device name is not unique on a host (every
    container and test namespace has its own `lo`)."""
    ns = "$(readlink /proc/self/ns/net | tr -dc 0-9)"
    return f'"{OWNER_DIR}/qdisc.{ns}.{dev}"'


def device_of(dest: str) -> str:
    """Shell expression: the device towards dest (eth0 in a container, lo locally)."""
    return f"$(ip -o route get {dest} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')"


def shape_command(dest_hosts: Sequence[str], port: int | None, rate_kbit: int, run_id: str) -> str:
    """On a sender: an htb root whose default class is unlimited and whose class 10 (a tbf leaf
    at rate_kbit) takes the packets to dest_hosts (to or from `port` only, when given).
    Idempotent: an existing root of ours is replaced. The run is named as the owner first, so
    a shaper half installed is still the run's to remove."""
    h = QDISC_HANDLE
    lines = [
        f"dev={device_of(dest_hosts[0])}",
        f"mkdir -p {OWNER_DIR}",
        f"echo {shlex.quote(check_run_id(run_id))} > {owner_file('$dev')}",
        f'{{ tc qdisc del dev "$dev" root handle {h}: 2>/dev/null || true; }}',
        f'tc qdisc add dev "$dev" root handle {h}: htb default 1',
        f'tc class add dev "$dev" parent {h}: classid {h}:1 htb rate 10gbit quantum 60000',
        f'tc class add dev "$dev" parent {h}: classid {h}:10 htb rate {rate_kbit}kbit '
        f"ceil {rate_kbit}kbit quantum 1514",
        f'tc qdisc add dev "$dev" parent {h}:10 handle {int(h, 16) + 1:x}: tbf '
        f"rate {rate_kbit}kbit burst 70000 latency 500ms",  # burst > lo MTU (65536)
    ]
    ports = ("dport", "sport")
    matches = [""] if port is None else [f" match ip {d} {port} 0xffff" for d in ports]
    for dest in dest_hosts:
        for match in matches:
            lines.append(
                f'tc filter add dev "$dev" parent {h}: protocol ip prio 1 u32 '
                f"match ip dst {dest}/32{match} flowid {h}:10"
            )
    return " && ".join(lines)


def unshape_command(run_id: str) -> str:
    """Remove our htb root (recognized by its handle) from every device where this run owns
    it; print how many of the run's remain. A root another run installed since is left."""
    h = QDISC_HANDLE
    root = f'tc qdisc show dev "$dev" | grep -q "qdisc htb {h}: root"'
    return (
        "left=0; for dev in $(ls /sys/class/net); do "
        f"owner={owner_file('$dev')}; "
        f'[ "$(cat "$owner" 2>/dev/null)" = {shlex.quote(check_run_id(run_id))} ] || continue; '
        f'if {root}; then tc qdisc del dev "$dev" root handle {h}: || true; fi; '
        f'if {root}; then left=$((left + 1)); else rm -f "$owner"; fi; '
        'done; echo "$left"'
    )
