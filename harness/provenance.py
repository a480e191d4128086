"""What a run was made with, for run.json's `provenance`: the harness's version and git commit,
the node image tags, the target and its version, and the Python, PySpark and Java that ran
and judged it.

A stored run must be traceable to what it tested. Everything here is cheap (a `git rev-parse`,
package metadata, one `java -version` per process), each with a short timeout, and every
answer degrades to "unknown" rather than failing or slowing a run. The target's version is
asked of the target itself (`VersionReporter`) once its cluster is set up: no target is named
here.
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

from contract.target import VersionReporter

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


def target_version(target: object, node: str) -> str:
    """The version of the software `node` runs, if the target can tell (`VersionReporter`);
    "unknown" otherwise or when asking fails: provenance never fails a run."""
    if not isinstance(target, VersionReporter):
        return UNKNOWN
    try:
        return target.software_version(node) or UNKNOWN
    except Exception:  # a node that cannot answer: the run goes on, the record says so
        return UNKNOWN


def provenance(target: str, harness_version: str) -> dict[str, Any]:
    """run.json's `provenance` before provisioning; `images` is filled in once the docker
    backend has resolved the image tags, the target's version once a node can be asked
    (`target_version`; the run rewrites run.json then)."""
    git = git_state()
    return {
        "harness_version": harness_version,
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "target": {"name": target, "version": UNKNOWN},
        "images": {},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "pyspark": distribution_version("pyspark"),
        "java": java_version(),
    }
