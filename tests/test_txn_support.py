"""Shared pieces of the transaction cluster tests (no tests here): a cluster per module."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from schemasync.client import Client
from schemasync.localcluster import LocalCluster

T = TypeVar("T")
BASE_ADDR = "127.0.3"


def cluster_fixture(
    toggles: tuple[str, ...] = (), **overrides: Any
) -> Callable[[pytest.TempPathFactory], Iterator[LocalCluster]]:
    """A module-scoped 3-node cluster (all voters) on 127.0.3.x with the given toggles."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        root: Path = tmp_path_factory.mktemp("txn-cluster")
        with LocalCluster(
            root, n=3, voters=3, base_addr=BASE_ADDR, toggles=toggles, config_overrides=overrides
        ) as c:
            yield c

    return cluster


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def connect(cluster: LocalCluster, node: str = "n1") -> Client:
    return await cluster.client(node)


async def probe_version(client: Client, table: str, ts: int) -> int | None:
    reply = await client.probe(table, ts)
    version: int | None = reply["table_schema_version"]
    return version
