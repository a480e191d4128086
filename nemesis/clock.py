"""Per-node clock offsets through libfaketime, measured through each node's admin API.

Each node process runs with LD_PRELOAD=libfaketime.so.1, FAKETIME_TIMESTAMP_FILE=<dir>/faketime,
FAKETIME_NO_CACHE=1 and FAKETIME_DONT_FAKE_MONOTONIC=1: its wall clock is the real one plus the
offset in that file, read on every call; its monotonic clock is untouched. The nemesis rewrites
the file atomically (write then rename). Offsets are written in seconds with a sign (`+0.25`,
`-0.4`): libfaketime reads a bare `250ms` as 250 *minutes*.
"""

from __future__ import annotations

import asyncio
import math
import random
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# faketime_env stays importable from here until every target imports harness.faketime
from harness.faketime import faketime_env, offset_literal  # noqa: F401
from nemesis.context import NemesisContext, failures, loop_time, run_on_each, statuses
from nemesis.fault import FaultPlan, choices, rounded

CLOCK_MODES = ("skew", "skew-edge", "skew-beyond", "bump", "strobe")
# what `clock` / `all` draws from unless `clock_modes` says otherwise: within CSmax, the only
# skew the design promises to tolerate (skew-beyond is run only when asked for by name)
DEFAULT_CLOCK_MODES = ("skew", "bump", "strobe")


def write_offset_command(faketime_file: str, seconds: float) -> str:
    """Atomically replace the faketime file: a reader sees the old offset or the new, never a
    half-written file (which libfaketime would read as no offset)."""
    path = shlex.quote(faketime_file)
    tmp = shlex.quote(faketime_file + ".tmp")
    return f"printf '%s\\n' {shlex.quote(offset_literal(seconds))} > {tmp} && mv -f {tmp} {path}"


def strobe_command(
    faketime_file: str, low: float, high: float, period_s: float, duration_s: float
) -> str:
    """Start, on the node, a loop that flips the offset between high and low every period for
    the duration: node-side, so the period does not depend on the controller's round trip.
    Its pid and flip count live next to the faketime file."""
    f = faketime_file
    # the count is written aside and renamed into place: a stop that lands between a plain
    # `>`'s truncation and its write would read an empty count (seen under CI's load)
    count = shlex.quote(f + ".strobe.count")
    aside = shlex.quote(f + ".strobe.count.new")
    flip = f"n=$((n + 1)); echo $n > {aside}; mv -f {aside} {count}"
    body = (
        f"end=$(( $(date +%s%N) + {round(duration_s * 1e9)} )); n=0; "
        'while [ "$(date +%s%N)" -lt "$end" ]; do '
        f"{write_offset_command(f, high)}; {flip}; sleep {period_s:.3f}; "
        f"{write_offset_command(f, low)}; {flip}; sleep {period_s:.3f}; done"
    )
    return (
        f"nohup bash -c {shlex.quote(body)} > /dev/null 2>&1 < /dev/null & "
        f"echo $! > {shlex.quote(f + '.strobe.pid')}"
    )


def stop_strobe_command(faketime_file: str) -> str:
    """Stop a strobe loop if one runs; print its flip count (nothing if there was none)."""
    pid = shlex.quote(faketime_file + ".strobe.pid")
    count = shlex.quote(faketime_file + ".strobe.count")
    aside = shlex.quote(faketime_file + ".strobe.count.new")
    return (
        f"if [ -f {pid} ]; then kill $(cat {pid}) 2>/dev/null; cat {count} 2>/dev/null; fi; "
        f"rm -f {pid} {count} {aside}"
    )


def measured_offsets(views: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per node: its faked wall clock and its HLC physical part minus the controller's clock,
    in seconds, with the round trip that bounds the error."""
    out: dict[str, dict[str, float]] = {}
    for node, s in views.items():
        mid = float(s["controller_mid_ms"])
        entry = {"rtt_ms": round(float(s["rtt_ms"]), 2)}
        if "wall_ms" in s:
            entry["wall_offset_s"] = round((float(s["wall_ms"]) - mid) / 1000, 4)
        if "hlc_now" in s:
            entry["hlc_offset_s"] = round(((int(s["hlc_now"]) >> 16) - mid) / 1000, 4)
        out[node] = entry
    return out


async def measure(
    ctx: NemesisContext, nodes: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    return measured_offsets(await statuses(ctx, nodes))


async def set_offsets(ctx: NemesisContext, offsets: Mapping[str, float]) -> dict[str, str]:
    """Write each node's offset; the nodes whose write failed, with why."""
    commands = {n: write_offset_command(ctx.faketime_file(n), s) for n, s in offsets.items()}
    return failures(await run_on_each(ctx, commands))


async def start_clock(ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
    """Measure, set the offsets of skew / skew-beyond / bump (or start strobe's loop), measure."""
    before = await measure(ctx)
    started = loop_time()
    if params["mode"] == "strobe":
        node = params["node"]
        low, high = (float(x) for x in params["offsets"])
        offsets = {node: high}
        cmd = strobe_command(
            ctx.faketime_file(node),
            low,
            high,
            float(params["period_s"]),
            float(params["duration_s"]),
        )
        errors = failures(await run_on_each(ctx, {node: cmd}))
        await asyncio.sleep(0.02)  # the loop's first write lands before the reading below
    else:
        offsets = {n: float(s) for n, s in params["offsets"].items()}
        errors = await set_offsets(ctx, offsets)
    applied_ms = round((loop_time() - started) * 1000, 1)
    out: dict[str, Any] = {
        "written": offsets,
        "before": before,
        "after": await measure(ctx),
        "applied_ms": applied_ms,
    }
    if errors:
        out["errors"] = errors
    return out


async def reset_clocks(ctx: NemesisContext, nodes: Sequence[str] | None = None) -> dict[str, Any]:
    """Every node back to offset +0, measured before and after."""
    names = list(nodes) if nodes is not None else list(ctx.cluster.nodes)
    before = await measure(ctx, names)
    started = loop_time()
    commands = {
        n: f"{stop_strobe_command(ctx.faketime_file(n))}; "
        f"{write_offset_command(ctx.faketime_file(n), 0.0)}"
        for n in names
    }
    results = await run_on_each(ctx, commands)
    healed_ms = round((loop_time() - started) * 1000, 1)
    errors = failures(results)
    flips = {
        n: int(r.stdout.split()[-1])
        for n, r in results.items()
        if not isinstance(r, BaseException) and r.stdout.split()
    }
    out: dict[str, Any] = {
        "written": dict.fromkeys(names, 0.0),
        **({"strobe_flips": flips} if flips else {}),
        "before": before,
        "after": await measure(ctx, names),
        "healed_ms": healed_ms,
    }
    if errors:
        out["errors"] = errors
    return out


def clock_params(
    mode: str, rng: random.Random, nodes: Sequence[str], max_skew_s: float, interval_s: float
) -> dict[str, Any]:
    """Offsets (seconds) per node for one clock fault.

    skew: every node within +-CSmax/2, so any two differ by at most CSmax (what the design
    tolerates); skew-edge: two seeded groups exactly CSmax apart (the edge of what it
    tolerates, where a missing round-up shows); skew-beyond: two groups 1.5-3 CSmax apart;
    bump: one node jumps within CSmax; strobe: one node flips between 0 and an offset within
    CSmax every period.
    """
    if mode == "skew":
        # whole milliseconds on each side, so that rounding never takes two nodes past CSmax
        # (with CSmax 5 ms, +-2.5 ms rounded is +-3 ms: 6 ms apart)
        half = _whole_ms(max_skew_s / 2)
        return {"mode": mode, "offsets": {n: rounded(rng.uniform(-half, half)) for n in nodes}}
    if mode == "skew-edge":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        # exactly CSmax apart when CSmax is whole milliseconds, odd ones too (5 ms: +3 and -2)
        edge = _whole_ms(max_skew_s)
        behind = _whole_ms(edge / 2)
        lead = rounded(edge - behind)
        back = -behind or 0.0  # no -0.0 in the schedule (CSmax 1 ms: +1 and 0)
        return {"mode": mode, "offsets": {n: lead if n in ahead else back for n in nodes}}
    if mode == "skew-beyond":
        ahead = set(rng.sample(list(nodes), max(1, len(nodes) // 2)))
        gap = rng.uniform(1.5, 3.0) * max_skew_s
        offsets = {n: rounded(gap / 2 if n in ahead else -gap / 2) for n in nodes}
        return {"mode": mode, "offsets": offsets}
    if mode == "bump":
        node = rng.choice(list(nodes))
        jump = rng.uniform(0.2, 0.9) * max_skew_s * rng.choice((-1, 1))
        return {"mode": mode, "offsets": {node: rounded(jump)}}
    if mode == "strobe":
        node = rng.choice(list(nodes))
        delta = rounded(rng.uniform(0.3, 0.9) * max_skew_s * rng.choice((-1, 1)))
        period = rounded(rng.uniform(0.05, 0.2))
        return {
            "mode": mode,
            "node": node,
            "offsets": [0.0, delta],
            "period_s": period,
            "duration_s": rounded(interval_s),
        }
    raise ValueError(f"unknown clock mode {mode!r}")


def _whole_ms(seconds: float) -> float:
    """`seconds` down to a whole millisecond, the resolution offsets are kept to."""
    return math.floor(seconds * 1000 + 1e-9) / 1000


class ClockNemesis:
    """Per-node clock offsets (libfaketime): skew, skew-edge, skew-beyond, bump, strobe."""

    kind = "clock"
    start_action = "start-clock"
    stop_action = "stop-clock"
    in_all = True
    needs_root = False

    def unusable(self, plan: FaultPlan) -> str | None:
        return None

    def draw(self, rng: random.Random, plan: FaultPlan, nth: int) -> dict[str, Any]:
        modes = choices(plan.options, "clock_modes", CLOCK_MODES, DEFAULT_CLOCK_MODES)
        return clock_params(rng.choice(modes), rng, plan.nodes, plan.max_skew_s, plan.interval_s)

    async def start(self, ctx: NemesisContext, params: dict[str, Any]) -> dict[str, Any]:
        return await start_clock(ctx, params)

    async def stop(self, ctx: NemesisContext, started: dict[str, Any]) -> dict[str, Any]:
        return await reset_clocks(ctx)

    async def sweep(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"clock": await reset_clocks(ctx)}
