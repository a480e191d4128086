"""The finite range of every numeric run option, held once: the command line's flags, the
scenario loader and `RunOptions` all check against this table, so no path (a backend, a
nightly cell, a repro) takes a value another path refuses, and nothing starts on a value that
cannot finish (`--nodes 100000`, `--time-limit inf`, a seed the history contract refuses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INT64_MAX = (1 << 63) - 1  # run.json's `seed` is an int64 (shared/spec/history.md)
SOAK_S = 7 * 24 * 3600  # the longest run: a 7-day soak
# the longest schedule: a 7-day soak with a fault every other second (1 s interval)
MAX_FAULTS = SOAK_S // 2


@dataclass(frozen=True)
class OptionRange:
    """One option's allowed values: an integer or a finite number between low and high
    (low itself excluded when low_open); `flag` and `key` name it on the command line and in
    a scenario file."""

    field: str
    flag: str
    key: str
    low: float
    high: float
    integer: bool = False
    low_open: bool = False

    def describe(self) -> str:
        """The range as the help and the error say it: `1..64`, `> 0 and <= 604800`."""
        if self.integer:
            return f"an integer in {int(self.low)}..{int(self.high)}"
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        return f"a number {low} and <= {self.high:g}"

    def problem(self, value: object) -> str | None:
        """Why value is refused (None: it is allowed)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"needs {self.describe()}, got {value!r}"
        if self.integer and not isinstance(value, int):
            return f"needs {self.describe()}, got {value!r}"
        too_low = value <= self.low if self.low_open else value < self.low
        if not math.isfinite(value) or too_low or value > self.high:
            return f"needs {self.describe()}, got {value!r}"
        return None


def _int(field: str, flag: str, key: str, low: int, high: int) -> OptionRange:
    return OptionRange(field, flag, key, low, high, integer=True)


RANGES: dict[str, OptionRange] = {
    r.field: r
    for r in (
        _int("seed", "--seed", "seed", 0, INT64_MAX),
        _int("nodes", "--nodes", "target.nodes", 1, 64),
        _int("voters", "--voters", "target.voters", 1, 64),
        _int("concurrency", "--concurrency", "concurrency", 1, 1024),
        OptionRange("time_limit_s", "--time-limit", "time_limit_s", 0, SOAK_S, low_open=True),
        OptionRange("nemesis_interval_s", "--nemesis-interval", "nemesis.interval_s", 0.001, 86400),
        OptionRange("ready_timeout_s", "--ready-timeout", "-", 0, 3600, low_open=True),
    )
}


def range_problem(field: str, value: object) -> str | None:
    """Why `field` cannot take value (None: allowed, or a field without a range)."""
    bounds = RANGES.get(field)
    return bounds.problem(value) if bounds is not None else None


def fault_count(time_limit_s: float, interval_s: float) -> int:
    """How many faults a schedule holds: one every 2 intervals, each healed within the limit."""
    return math.floor((time_limit_s + 1e-9) / (2 * interval_s))


def schedule_problem(time_limit_s: float, interval_s: float) -> str | None:
    """Why the schedule would be too long to build and store (None: it is not)."""
    count = fault_count(time_limit_s, interval_s)
    if count <= MAX_FAULTS:
        return None
    return (
        f"{time_limit_s:g} s at a {interval_s:g} s interval is {count} faults; at most "
        f"{MAX_FAULTS} (a 7-day soak at 1 s)"
    )
