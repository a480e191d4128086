"""Lagging learners: Meta Storage learners fall behind while the rest of the cluster is healthy.

Three ways: `drop` cuts only metastore traffic to and from the learner (iptables on the
metastore port), `tbf` lets it through a tiny token bucket (an htb class with a tbf leaf on
the senders' egress, matching the learner's address and the metastore port; netem is missing
from the kernels we run on), `inhibit` holds the learner's apply with its admin API
(Ignite's WatchListenerInhibitor). Applied index and safe time are recorded before and after.
A target that names modes in `own_lagging_modes` makes a node lag in those modes itself, with
`lag(node, mode)` / `unlag(node)`: PostgreSQL's clients and its WAL stream share one port, so
only the target can cut the stream alone (and it holds replay instead of an admin API).
"""

from __future__ import annotations

import asyncio
import os
import random
import shlex
from collections.abc import Sequence
from typing import Any

from harness.target import ApplyInhibitControl, LaggingControl
from nemesis.context import (
    NemesisContext,
    each_in_thread,
    failures,
    loop_time,
    run_on_each,
    statuses,
)
from nemesis.fault import FaultPlan, choices
from nemesis.partition import comment_args, remove_rules_command

LAGGING_TAG = "lagging-learner"
QDISC_HANDLE = "5c5c"  # our htb root on a device: "sc" twice, so heal can tell it from others
DEFAULT_RATE_KBIT = 1
LAGGING_MODES = ("drop", "tbf", "inhibit")


def port_match(port: int) -> str:
    """Packets to or from the metastore port: the learner's own requests and the replies."""
    return f"-p tcp -m multiport --ports {port}"


def drop_commands(
    learners: Sequence[str], hosts: dict[str, str], port: int, local: bool
) -> dict[str, str]:
    """On each learner: drop all inbound metastore traffic, whoever sends it (only nodes
    speak on that port). No source match, so it also works locally where nodes connect from
    127.0.0.1: there the rule names the learner's address on `lo` instead."""
    commands = {}
    for learner in learners:
        where = f"-i lo -d {shlex.quote(hosts[learner])} " if local else ""
        commands[learner] = (
            f"iptables -w -A INPUT {where}{port_match(port)} {comment_args(LAGGING_TAG)} -j DROP"
        )
    return commands


def device_of(dest: str) -> str:
    """Shell expression: the device towards dest (eth0 in a container, lo locally)."""
    return f"$(ip -o route get {dest} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')"


def shape_command(learner_hosts: Sequence[str], port: int, rate_kbit: int) -> str:
    """On a sender: an htb root whose default class is unlimited and whose class 10 (a tbf leaf
    at rate_kbit) takes metastore packets to the learners. Idempotent: an existing root of ours
    is replaced."""
    h = QDISC_HANDLE
    first = learner_hosts[0]
    lines = [
        f"dev={device_of(first)}",
        f'{{ tc qdisc del dev "$dev" root handle {h}: 2>/dev/null || true; }}',
        f'tc qdisc add dev "$dev" root handle {h}: htb default 1',
        f'tc class add dev "$dev" parent {h}: classid {h}:1 htb rate 10gbit quantum 60000',
        f'tc class add dev "$dev" parent {h}: classid {h}:10 htb rate {rate_kbit}kbit '
        f"ceil {rate_kbit}kbit quantum 1514",
        f'tc qdisc add dev "$dev" parent {h}:10 handle {int(h, 16) + 1:x}: tbf '
        f"rate {rate_kbit}kbit burst 70000 latency 500ms",  # burst > lo MTU (65536)
    ]
    for dest in learner_hosts:
        for direction in ("dport", "sport"):
            lines.append(
                f'tc filter add dev "$dev" parent {h}: protocol ip prio 1 u32 '
                f"match ip dst {dest}/32 match ip {direction} {port} 0xffff flowid {h}:10"
            )
    return " && ".join(lines)


def unshape_command() -> str:
    """Remove our htb root (only ours, recognized by its handle) from every device; print how
    many remain."""
    h = QDISC_HANDLE
    return (
        "left=0; for dev in $(ls /sys/class/net); do "
        f'if tc qdisc show dev "$dev" | grep -q "qdisc htb {h}: root"; then '
        f'tc qdisc del dev "$dev" root handle {h}: || true; '
        f'tc qdisc show dev "$dev" | grep -q "qdisc htb {h}: root" && left=$((left + 1)); '
        'fi; done; echo "$left"'
    )


async def learner_views(ctx: NemesisContext, learners: Sequence[str]) -> dict[str, Any]:
    """Applied index and safe time of the learners, and the highest applied index of the voters."""
    views = await statuses(ctx)
    voters = [views[v]["applied_index"] for v in ctx.cluster.voters if v in views]
    return {
        "learners": {
            n: {"applied_index": views[n].get("applied_index"), "safe_ts": views[n].get("safe_ts")}
            for n in learners
            if n in views
        },
        "voters_applied_index": max(voters) if voters else None,
    }


async def set_inhibit(ctx: NemesisContext, nodes: Sequence[str], hold: bool) -> dict[str, str]:
    """Hold (or release) the apply of each node, through the target's ApplyInhibitControl;
    the nodes that failed, with why."""
    target = ctx.target
    if not nodes:
        return {}
    if not isinstance(target, ApplyInhibitControl):
        why = f"target {target.name} cannot hold a node's apply"
        return dict.fromkeys(nodes, why)
    results = await asyncio.gather(
        *(target.inhibit_apply(n, hold) for n in nodes), return_exceptions=True
    )
    return {
        n: f"{type(r).__name__}: {r}"
        for n, r in zip(nodes, results, strict=True)
        if isinstance(r, BaseException)
    }


async def start_lagging(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    learners = list(params["learners"])
    mode = params["mode"]
    port = ctx.port("metastore_port")
    before = await learner_views(ctx, learners)
    started = loop_time()
    errors: dict[str, str]
    target = ctx.target
    if isinstance(target, LaggingControl) and mode in target.own_lagging_modes:
        errors = await each_in_thread(lambda n: target.lag(n, mode), learners)
    elif mode == "drop":
        hosts = {n: ctx.host(n) for n in ctx.cluster.nodes}
        errors = failures(await run_on_each(ctx, drop_commands(learners, hosts, port, ctx.local)))
    elif mode == "tbf":
        rate = int(params.get("rate_kbit", ctx.config.get("lagging_rate_kbit", DEFAULT_RATE_KBIT)))
        dests = [ctx.host(n) for n in learners]
        senders = _senders(ctx, learners)
        errors = failures(
            await run_on_each(ctx, dict.fromkeys(senders, shape_command(dests, port, rate)))
        )
    elif mode == "inhibit":
        ctx.state.inhibited.update(learners)
        errors = await set_inhibit(ctx, learners, True)
    else:
        raise ValueError(f"unknown lagging-learner mode {mode!r}")
    out: dict[str, Any] = {
        "before": before,
        "applied_ms": round((loop_time() - started) * 1000, 1),
    }
    if errors:
        out["errors"] = errors
    return out


def _senders(ctx: NemesisContext, learners: Sequence[str]) -> list[str]:
    """Nodes whose egress is shaped. Locally every node shares `lo`: one shaping suffices."""
    others = [n for n in ctx.cluster.nodes if n not in learners] or list(ctx.cluster.nodes)
    return others[:1] if ctx.local else others


async def _nothing() -> dict[str, str]:
    return {}


async def stop_lagging(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Undo whichever mode was used (all three are undone: cheap, and robust to a lost start)."""
    learners = list(params.get("learners") or ctx.cluster.learners)
    before = await learner_views(ctx, learners)
    started = loop_time()
    out: dict[str, Any] = {"before": before}
    errors: dict[str, str] = {}
    # one round trip per node: our rules out, our qdisc off the device towards the learners
    commands = {
        n: remove_rules_command(LAGGING_TAG, ctx.host(n) if ctx.local else None)
        + f"; {unshape_command()}"
        for n in ctx.cluster.nodes
    }
    held = (
        [n for n in learners if n in ctx.state.inhibited]
        if params.get("mode") != "inhibit"
        else learners
    )
    target = ctx.target
    own = target if isinstance(target, LaggingControl) and target.own_lagging_modes else None
    if own is not None:  # the target undoes its own modes; it has no apply inhibitor to release
        held = []
    network, released, unlagged = await asyncio.gather(
        run_on_each(ctx, commands),
        set_inhibit(ctx, held, False),
        each_in_thread(own.unlag, learners) if own is not None else _nothing(),
    )
    errors.update(failures(network))
    errors.update(released)
    errors.update(unlagged)
    ctx.state.inhibited.difference_update(held)
    out["healed_ms"] = round((loop_time() - started) * 1000, 1)
    out["after"] = await learner_views(ctx, learners)
    if errors:
        out["errors"] = errors
    return out


async def unshape_all(ctx: NemesisContext) -> dict[str, Any]:
    """Our qdisc off every device of every node; how many remain per node (0 when healed)."""
    results = await run_on_each(ctx, dict.fromkeys(ctx.cluster.nodes, unshape_command()))
    remaining: dict[str, int | None] = {}
    for n, r in results.items():
        if not isinstance(r, BaseException):
            lines = r.stdout.split()
            remaining[n] = int(lines[-1]) if lines else None
    return {"qdiscs_remaining": remaining, "errors": failures(results)}


class LaggingLearnerNemesis:
    """Meta Storage learners fall behind: drop, tbf or inhibit (or the target's own way)."""

    kind = "lagging-learner"
    start_action = "start-lagging-learner"
    stop_action = "stop-lagging-learner"
    in_all = True
    needs_root = True

    def unusable(self, plan: FaultPlan) -> str | None:
        return None if plan.learners else "lagging-learner needs learners (--voters below --nodes)"

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        learners = list(plan.learners)
        count = rng.randint(1, len(learners))
        chosen = set(rng.sample(learners, count))
        mode = rng.choice(choices(plan.options, "lagging_modes", LAGGING_MODES, LAGGING_MODES))
        return {"mode": mode, "learners": [x for x in learners if x in chosen]}

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_lagging(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        return await stop_lagging(ctx, started)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        """Our qdiscs off every node (unless locally without root: nothing could add one) and
        every learner's apply released, with any node still marked as held."""
        out: dict[str, Any] = {"errors": {}}
        if not (ctx.local and os.geteuid() != 0):
            out.update(await unshape_all(ctx))
        held = sorted(set(ctx.cluster.learners) | ctx.state.inhibited)
        if held and isinstance(ctx.target, ApplyInhibitControl):
            released = await set_inhibit(ctx, held, False)
            out["errors"].update({f"inhibit {n}": why for n, why in released.items()})
        ctx.state.inhibited.clear()
        return out
