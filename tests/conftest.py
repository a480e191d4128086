"""Shared test policy: environment-dependent tests skip locally but must run in CI."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI") == "true"


def require(condition: bool, why: str) -> None:
    """Skip when a prerequisite is missing, except in CI where it is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {why}")
    pytest.skip(why)


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@pytest.fixture
def needs_docker() -> None:
    require(docker_available(), "no Docker engine answers")


@pytest.fixture
def needs_root() -> None:
    require(os.geteuid() == 0, "needs root for iptables/tc")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every user of the session's Spark (tests/spark_session.py) is marked `spark`, whether it
    says so or not: tests/suite.sh runs such tests beside the system tests by that mark."""
    if item.get_closest_marker("spark") is None and "spark" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.spark)


# Seconds per test file (setup, call and teardown), printed after the run: CI must stay under
# 45 minutes, and a file's total shows where the time goes better than its slowest tests.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest test files")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:12]:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")
