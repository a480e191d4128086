"""The shell commands that move a node's clock on a host: its libfaketime file.

Each node process runs with LD_PRELOAD=libfaketime.so.1, FAKETIME_TIMESTAMP_FILE=<file>,
FAKETIME_NO_CACHE=1 and FAKETIME_DONT_FAKE_MONOTONIC=1 (`harness.faketime`): its wall clock
is the real one plus the offset in that file, read on every call; its monotonic clock is
untouched. Offsets are written in seconds with a sign (`+0.25`, `-0.4`): libfaketime reads a
bare `250ms` as 250 *minutes*.
"""

from __future__ import annotations

import shlex

from harness.faketime import offset_literal


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
