"""run.json checked for what `repro` reads from it before anything is read: a stored run is
repeated only from the shape this harness writes (the contract also admits foreign ones, whose
nemesis may be a list), and a file of another shape is one line naming the key, not a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# the parts of run.json that options_from_run_json reads as objects
_OBJECTS = ("config", "nemesis", "workload", "options")


def check_repeatable(run_json: Path) -> None:
    """ValueError naming the key when `run_json` is not a run.json `repro` can repeat."""
    try:
        data = json.loads(run_json.read_text("utf-8"))
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror or type(e).__name__})") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"not JSON ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {_kind(data)}")
    for key in _OBJECTS:
        if key in data and not isinstance(data[key], dict):
            raise ValueError(f"{key}: {_kind(data[key])} where an object is due")
    kinds = data.get("nemesis", {}).get("kinds", [])
    if not (isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)):
        raise ValueError(f"nemesis.kinds: {_kind(kinds)} where a list of fault kinds is due")


def _kind(value: Any) -> str:
    """A JSON value named as the file has it: 'a list', 'the string "all"'."""
    if isinstance(value, str):
        return f"the string {json.dumps(value)[:40]}"
    names = {list: "a list", dict: "an object", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value}")
