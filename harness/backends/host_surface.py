"""The fault surface of nodes on real hosts (docker, local, ssh): iptables drops and tc shapers
(`host_net`), libfaketime files (`host_clock`) through the nodes' Remotes, and the target's
own process signals, apply inhibitor and live DD.

Remote calls block (ssh, docker, subprocess), so each goes through `harness.remote.in_thread`,
one thread per node, with an explicit timeout; a client call gets an `asyncio.timeout`,
because a paused node accepts a connection and never answers. The run's id reaches every rule
(`host_net`), so this surface's heal and sweep, and `clean --run-id`, touch only this run's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

from contract.fault_surface import Failures, Link, Swept, Undone, failures_of
from contract.remote import CommandResult
from contract.target import (
    ApplyInhibitControl,
    ClockControl,
    ClusterView,
    DelayControl,
    Target,
)
from harness.backends.host_clock import (
    stop_strobe_command,
    strobe_command,
    write_offset_command,
)
from harness.backends.host_net import (
    drop_command,
    remove_rules_command,
    shape_command,
    unshape_command,
)
from harness.cluster_spec import check_run_id
from harness.remote import in_thread

REMOTE_TIMEOUT_S = 15.0
CLIENT_TIMEOUT_S = 3.0
STROBE_SETTLE_S = 0.02  # the node-side loop's first write lands before the caller measures


class HostSurface:
    """Faults on the hosts of one run's nodes."""

    def __init__(self, cluster: ClusterView, target: Target, run_id: str) -> None:
        self.cluster = cluster
        self.target = target
        self.run_id = check_run_id(run_id)

    # -- plumbing ----------------------------------------------------------------------------
    def _host(self, node: str) -> str:
        return self.cluster.remotes[node].host

    def _never_changed(self) -> bool:
        """Nodes on this host without root: nothing could have added a rule or a shaper, and
        nothing can list them."""
        return self.cluster.shared_host and os.geteuid() != 0

    async def _run_each(
        self, commands: Mapping[str, str]
    ) -> tuple[dict[str, CommandResult], Failures]:
        """A shell command as root on each node at once: the results, and the nodes where it
        failed, with why."""
        results: dict[str, CommandResult] = {}

        async def one(node: str) -> None:
            remote = self.cluster.remotes[node]
            results[node] = await in_thread(remote.run, commands[node], REMOTE_TIMEOUT_S, True)

        failed = await failures_of({n: one(n) for n in commands})
        return results, failed

    async def _counted(self, commands: Mapping[str, str]) -> Undone:
        """Commands that print how many of ours remain, as their last word."""
        results, failed = await self._run_each(commands)
        remaining: dict[str, int | None] = {}
        for node, result in results.items():
            words = result.stdout.split()
            remaining[node] = int(words[-1]) if words else None
        return Undone(remaining, failed)

    # -- links -------------------------------------------------------------------------------
    async def cut(self, links: Sequence[Link], tag: str) -> Failures:
        """One rule per receiver and port, naming every source (none when any may send)."""
        sources: dict[tuple[str, int | None], list[str | None]] = {}
        for link in links:
            sources.setdefault((link.dst, link.port), []).append(link.src)
        rules: dict[str, list[str]] = {}
        for (dst, port), srcs in sources.items():
            hosts = None if None in srcs else [self._host(s) for s in srcs if s is not None]
            rule = drop_command(
                self._host(dst), hosts, port, tag, self.run_id, self.cluster.shared_host
            )
            rules.setdefault(dst, []).append(rule)
        _, failed = await self._run_each({n: " && ".join(r) for n, r in rules.items()})
        return failed

    async def heal(self, tag: str) -> Undone:
        return await self._remove_rules(tag)

    async def _remove_rules(self, tag: str | None) -> Undone:
        """Each node removes the run's rules on its own INPUT; on a shared host, the ones
        naming its address (so the nodes' commands do not race for the same rules)."""
        shared = self.cluster.shared_host
        return await self._counted(
            {
                n: remove_rules_command(tag, self.run_id, self._host(n) if shared else None)
                for n in self.cluster.nodes
            }
        )

    async def slow(self, links: Sequence[Link], rate_kbit: int) -> Failures:
        """A shaper on each sender's egress towards its receivers; on a shared host every node
        sends through `lo`, so one shaper (on the first sender) takes every link."""
        nodes = self.cluster.nodes
        senders: dict[str, list[Link]] = {}
        for link in links:
            srcs = [link.src] if link.src is not None else [m for m in nodes if m != link.dst]
            for src in srcs:
                senders.setdefault(src, []).append(link)
        if self.cluster.shared_host and senders:
            senders = {next(iter(senders)): [x for group in senders.values() for x in group]}
        commands = {}
        for src, group in senders.items():
            ports = {x.port for x in group}
            if len(ports) != 1:
                raise ValueError(f"slow: one shaper per sender, on one port (got {ports})")
            dests = list(dict.fromkeys(self._host(x.dst) for x in group))
            commands[src] = shape_command(dests, ports.pop(), rate_kbit, self.run_id)
        _, failed = await self._run_each(commands)
        return failed

    async def unslow(self) -> Undone:
        """The run's own shapers only (`host_net.owner_file`): on a shared host another run's
        shaper may sit on the same device."""
        return await self._counted(dict.fromkeys(self.cluster.nodes, unshape_command(self.run_id)))

    async def sweep(self) -> Swept:
        if self._never_changed():
            return Swept(Undone({}, {}), Undone({}, {}))
        cuts = await self._remove_rules(None)
        return Swept(cuts, await self.unslow())

    # -- clocks ------------------------------------------------------------------------------
    def _faketime_file(self, node: str) -> str:
        if isinstance(self.target, ClockControl):
            return self.target.faketime_file(node)
        return f"{self.cluster.node_dirs[node]}/faketime"

    async def set_clocks(self, offsets: Mapping[str, float]) -> Failures:
        commands = {n: write_offset_command(self._faketime_file(n), s) for n, s in offsets.items()}
        _, failed = await self._run_each(commands)
        return failed

    async def strobe_clock(
        self, node: str, low: float, high: float, period_s: float, duration_s: float
    ) -> Failures:
        cmd = strobe_command(self._faketime_file(node), low, high, period_s, duration_s)
        _, failed = await self._run_each({node: cmd})
        await asyncio.sleep(STROBE_SETTLE_S)
        return failed

    async def reset_clocks(self, nodes: Sequence[str]) -> tuple[dict[str, int], Failures]:
        commands = {
            n: f"{stop_strobe_command(self._faketime_file(n))}; "
            f"{write_offset_command(self._faketime_file(n), 0.0)}"
            for n in nodes
        }
        results, failed = await self._run_each(commands)
        flips = {n: int(r.stdout.split()[-1]) for n, r in results.items() if r.stdout.split()}
        return flips, failed

    # -- processes and the target's own controls ---------------------------------------------
    async def kill(self, nodes: Sequence[str]) -> Failures:
        return await failures_of({n: in_thread(self.target.kill, n) for n in nodes})

    async def start(self, nodes: Sequence[str]) -> Failures:
        return await failures_of({n: in_thread(self.target.start, n) for n in nodes})

    async def pause(self, nodes: Sequence[str]) -> Failures:
        return await failures_of({n: in_thread(self.target.pause, n) for n in nodes})

    async def resume(self, nodes: Sequence[str]) -> Failures:
        return await failures_of({n: in_thread(self.target.resume, n) for n in nodes})

    async def inhibit_apply(self, nodes: Sequence[str], hold: bool) -> Failures:
        target = self.target
        if not isinstance(target, ApplyInhibitControl):
            return dict.fromkeys(nodes, f"target {target.name} cannot hold a node's apply")
        return await failures_of({n: target.inhibit_apply(n, hold) for n in nodes})

    async def set_delay(self, delays_ms: Mapping[str, int]) -> Failures:
        return await failures_of({n: self._set_delay(n, int(ms)) for n, ms in delays_ms.items()})

    async def _set_delay(self, node: str, delay_ms: int) -> None:
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            client = await self.target.client(node)
            try:
                if not isinstance(client, DelayControl):
                    raise RuntimeError(f"target {self.target.name} cannot change its delay")
                await client.set_delay(delay_ms)
            finally:
                await client.close()
