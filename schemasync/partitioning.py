"""Which partition a key lives in and which node is its primary (docs/interfaces.md).

Both are pure and deterministic so that every node, the client library and the checker agree
without asking anyone.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence


def partition_of(key: int, partitions: int) -> int:
    """crc32 of the key as 8 big-endian signed bytes, modulo the partition count."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return zlib.crc32(key.to_bytes(8, "big", signed=True)) % partitions


def primary_of(table_id: int, partition: int, nodes: Sequence[str]) -> str:
    """The primary of (table_id, partition): `sorted(nodes)[(table_id + partition) % len]`."""
    if not nodes:
        raise ValueError("no nodes")
    ordered = sorted(nodes)
    return ordered[(table_id + partition) % len(ordered)]


def primaries(table_id: int, partitions: int, nodes: Sequence[str]) -> dict[int, str]:
    """Every partition of a table and its primary."""
    return {p: primary_of(table_id, p, nodes) for p in range(partitions)}
