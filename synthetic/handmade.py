"""Pieces for run directories written by hand, event by event (the verdict tests' small
histories): HLC timestamps, the index and controller time history.md requires of every line,
and the JSON Lines files themselves."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FIRST_EVENT_MS = 4000  # controller time of a numbered history's first event
EVENT_GAP_MS = 10


def hlc(ms: int, logical: int = 0) -> int:
    """The HLC timestamp of physical time `ms` and a logical counter (history.md's `ts`)."""
    return ms << 16 | logical


def numbered(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events with index 0.. and a controller time 10 ms apart, in list order."""
    return [
        {"index": i, "time": (FIRST_EVENT_MS + EVENT_GAP_MS * i) * 1_000_000, **e}
        for i, e in enumerate(events)
    ]


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """One JSON object a line, as history.jsonl and catalog.jsonl are written."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
