"""Fixtures shared by the harness tests (imported by them; holds no tests itself)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from tests.conftest import docker_available, require

if TYPE_CHECKING:
    from nemesis import NemesisContext


@pytest.fixture(scope="session")
def node_image() -> str:
    """The node image, built once per session (a no-op when `make test` already built it)."""
    require(docker_available(), "no Docker engine answers")
    from harness.images import ensure_images

    return ensure_images().node


def free_local_base(nodes: int = 5) -> str:
    """A loopback range (127.0.X.10 + i) nobody listens on, so parallel runs do not collide."""
    from contract.remote import RemoteError
    from harness.remote_local import check_ports_free, local_address

    rng = random.Random()
    for _ in range(50):
        base = f"127.0.{rng.randrange(20, 250)}.10"
        try:
            check_ports_free([local_address(i, base) for i in range(1, nodes + 1)])
        except RemoteError:
            continue
        return base
    raise RuntimeError("no free loopback range for a local cluster")


async def wait_for(check: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """Poll `check` every 100 ms until it holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.1)
    return False


async def survivors_elected(ctx: NemesisContext) -> bool:
    """Whether the nodes (the killed ones do not answer) name a leader, and one that was not
    killed: one look at the target's primary."""
    from nemesis.leader import current_leader

    leader = (await current_leader(ctx, wait_s=0)).node
    return leader is not None and leader not in ctx.state.killed
