"""results.json written so that nobody ever reads a stale verdict: before a run directory is
analysed its old results.json is removed (or the analysis refused), the new one is replaced
atomically (a temporary file in the same directory, fsync, rename).

A run directory that takes no file (a read-only mount) is still judged: the verdict is only
printed, never written, and the analysis writes nothing else there either (checker.ingest).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from contract.rundir import RESULTS


class StaleResults(Exception):
    """An earlier results.json stays and cannot be replaced: one line naming it."""


def refuses_files(directory: Path) -> str | None:
    """Why `directory` takes no new file (a read-only mount, no permission), or None.

    Tried, not inferred from its mode: root ignores modes, a read-only mount does not."""
    try:
        fd, name = tempfile.mkstemp(prefix=".schemachaos-probe-", dir=directory)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(fd)
    os.unlink(name)
    return None


def clear_old_results(run_dir: Path) -> bool:
    """Remove `run_dir`'s results.json before it is analysed; whether the new one can be
    written there. StaleResults when an old one would outlive the analysis (an immutable file,
    a read-only directory that holds one): refused before anything is analysed."""
    path = run_dir / RESULTS
    refused = refuses_files(run_dir)
    try:
        os.lstat(path)
    except FileNotFoundError:
        return refused is None
    except OSError:  # the directory cannot be searched: nobody can read what it holds
        return False
    if refused is not None:
        raise StaleResults(
            f"{path}: an earlier verdict that cannot be replaced ({refused}); nothing analysed"
        )
    try:
        os.unlink(path)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise StaleResults(
            f"{path}: an earlier verdict that cannot be replaced ({why}); nothing analysed"
        ) from None
    return True


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    """Replace `run_dir`/results.json atomically: a reader sees the old file or the whole new
    one, never a part; on a crash the temporary file is removed. OSError when it cannot."""
    text = json.dumps(results, indent=2, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{RESULTS}.", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the verdict from other readers
        os.replace(tmp, run_dir / RESULTS)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(run_dir)


def _fsync_directory(directory: Path) -> None:
    """The rename itself made durable (a crash right after still finds the new file)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # a directory some filesystems will not fsync
            os.fsync(fd)
    finally:
        os.close(fd)
