"""Per-node clock offsets through libfaketime, measured through each node's admin API.

Each node process runs with LD_PRELOAD=libfaketime.so.1, FAKETIME_TIMESTAMP_FILE=<dir>/faketime,
FAKETIME_NO_CACHE=1 and FAKETIME_DONT_FAKE_MONOTONIC=1: its wall clock is the real one plus the
offset in that file, read on every call; its monotonic clock is untouched. The nemesis rewrites
the file atomically (write then rename). Offsets are written in seconds with a sign (`+0.25`,
`-0.4`): libfaketime reads a bare `250ms` as 250 *minutes*.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nemesis.context import NemesisContext, failures, run_on_each, statuses

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def offset_literal(seconds: float) -> str:
    """`+0.25`, `-0.4`, `+0`: the relative format libfaketime reads, in seconds (ms precision)."""
    ms = round(seconds * 1000)
    sign = "-" if ms < 0 else "+"
    whole, frac = divmod(abs(ms), 1000)
    return f"{sign}{whole}" + (f".{frac:03d}".rstrip("0") if frac else "")


def faketime_env(faketime_file: str, lib: str = FAKETIME_LIB) -> dict[str, str]:
    """The environment a node process starts under so the clock nemesis can move its clock."""
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": faketime_file,
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def write_offset_command(faketime_file: str, seconds: float) -> str:
    """Atomically replace the faketime file: a reader sees the old offset or the new, never a
    half-written file (which libfaketime would read as no offset)."""
    path = shlex.quote(faketime_file)
    tmp = shlex.quote(faketime_file + ".tmp")
    return f"printf '%s\\n' {shlex.quote(offset_literal(seconds))} > {tmp} && mv -f {tmp} {path}"


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
    """Measure, set the offsets of skew / skew-beyond / bump (or the first of strobe), measure."""
    before = await measure(ctx)
    started = time.monotonic()
    if params["mode"] == "strobe":
        offsets = {params["node"]: float(params["offsets"][1])}
    else:
        offsets = {n: float(s) for n, s in params["offsets"].items()}
    errors = await set_offsets(ctx, offsets)
    applied_ms = round((time.monotonic() - started) * 1000, 1)
    out: dict[str, Any] = {
        "written": offsets,
        "before": before,
        "after": await measure(ctx),
        "applied_ms": applied_ms,
    }
    if errors:
        out["errors"] = errors
    return out


async def strobe(ctx: NemesisContext, params: dict[str, Any], stop: asyncio.Event) -> int:
    """Flip one node between two offsets every period until the duration ends or stop is set;
    returns the number of flips (the first offset was set by start_clock)."""
    node = params["node"]
    low, high = (float(x) for x in params["offsets"])
    period = float(params["period_s"])
    deadline = time.monotonic() + float(params["duration_s"])
    flips = 0
    current = high
    while time.monotonic() < deadline and not stop.is_set():
        try:
            async with asyncio.timeout(period):
                await stop.wait()
            break
        except TimeoutError:
            pass
        current = low if current == high else high
        await set_offsets(ctx, {node: current})
        flips += 1
    return flips


async def reset_clocks(ctx: NemesisContext, nodes: Sequence[str] | None = None) -> dict[str, Any]:
    """Every node back to offset +0, measured before and after."""
    names = list(nodes) if nodes is not None else list(ctx.cluster.nodes)
    before = await measure(ctx, names)
    started = time.monotonic()
    errors = await set_offsets(ctx, dict.fromkeys(names, 0.0))
    healed_ms = round((time.monotonic() - started) * 1000, 1)
    out: dict[str, Any] = {
        "written": dict.fromkeys(names, 0.0),
        "before": before,
        "after": await measure(ctx, names),
        "healed_ms": healed_ms,
    }
    if errors:
        out["errors"] = errors
    return out
