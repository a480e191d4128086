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
