"""libfaketime, as both sides use it: a target starts node processes under it, the clock
nemesis writes the offsets it reads. Ground floor: imports nothing of the project."""

from __future__ import annotations

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def offset_literal(seconds: float) -> str:
    """`+0.25`, `-0.4`, `+0`: the relative format libfaketime reads, in seconds (ms precision)."""
    ms = round(seconds * 1000)
    sign = "-" if ms < 0 else "+"
    whole, frac = divmod(abs(ms), 1000)
    return f"{sign}{whole}" + (f".{frac:03d}".rstrip("0") if frac else "")


def faketime_env(faketime_file: str, lib: str = FAKETIME_LIB) -> dict[str, str]:
    """The environment a node process starts under so the clock nemesis can move its clock:
    the wall clock offset by the file's content, read on every call; monotonic untouched."""
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": faketime_file,
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
