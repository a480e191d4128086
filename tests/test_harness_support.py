"""Fixtures shared by the harness tests (imported by them; holds no tests itself)."""

from __future__ import annotations

import pytest

from tests.conftest import docker_available, require


@pytest.fixture(scope="session")
def node_image() -> str:
    """The node image, built once per session (a no-op when `make test` already built it)."""
    require(docker_available(), "no Docker engine answers")
    from harness.images import ensure_images

    return ensure_images().node
