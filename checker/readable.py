"""The run directory's files checked for what the file system allows before anything reads
them: a file that cannot be read, or is not a file, is a reason the run cannot be judged (one
line naming it), never a crash, nor Spark's "File does not exist" for a permission."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from checker.contract import ContractError

RUN_FILES = ("run.json", "catalog.jsonl", "history.jsonl")


def check_run_dir_readable(run_dir: Path) -> None:
    """ContractError naming `run_dir`, or the first of its files that is there but cannot be
    read or is not a regular file (a missing file is the contract's own error)."""
    try:
        os.listdir(run_dir)
    except OSError as e:
        raise ContractError(str(run_dir), None, None, f"cannot be read ({_why(e)})") from None
    for name in RUN_FILES:
        check_file_readable(run_dir / name)


def check_file_readable(path: Path) -> None:
    """ContractError when `path` exists but is not a regular file or cannot be opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise ContractError(path.name, None, None, f"cannot be read ({_why(e)})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ContractError(path.name, None, None, f"is {kind}, not a file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise ContractError(path.name, None, None, f"cannot be read ({_why(e)})") from None


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__
