"""What a run was made with, for run.json's `provenance`: the harness's version and git commit,
the node image tags, the target, and the Python, PySpark and Java that ran and judged it.

A stored run must be traceable to what it tested. Everything here is cheap (a `git rev-parse`,
package metadata, one `java -version` per process), each with a short timeout, and every
answer degrades to "unknown" rather than failing or slowing a run.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"
REPO_ROOT = Path(__file__).resolve().parent.parent
GIT_TIMEOUT_S = 2.0
JAVA_TIMEOUT_S = 10.0  # a JVM start on a loaded machine; paid once per controller process


def distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def _git(*args: str) -> str | None:
    """`git -C REPO_ROOT args` stdout, or None outside a checkout, without git, or on timeout."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it (a dirty tree means
    the commit alone does not say what ran)."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return {"commit": UNKNOWN, "dirty": None}
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}


@functools.cache
def java_version() -> str:
    """The first line of `java -version` of the Java Spark will start (JAVA_HOME's first)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        return UNKNOWN
    try:
        done = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            timeout=JAVA_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0].strip() if lines else UNKNOWN


def target_version(target: str, backend: str, commit: str) -> str:
    """What is known without asking a node: schemasync is this tree (its commit), PostgreSQL
    on docker is the major version the image installs; on a host's own binaries, unknown."""
    if target == "schemasync":
        return f"in-tree at {commit}"
    if target == "postgres" and backend == "docker":
        from harness.images_postgres import PG_MAJOR

        return f"PostgreSQL {PG_MAJOR}"
    return UNKNOWN


def provenance(target: str, backend: str, harness_version: str) -> dict[str, Any]:
    """run.json's `provenance` before provisioning; `images` is filled in once the docker
    backend has resolved the image tags (the run rewrites run.json then)."""
    git = git_state()
    return {
        "harness_version": harness_version,
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "target": {"name": target, "version": target_version(target, backend, git["commit"])},
        "images": {},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "pyspark": distribution_version("pyspark"),
        "java": java_version(),
    }
