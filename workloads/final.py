"""Final reads: after the last heal, every table and every index read whole at one timestamp.

Lost writes, index-missing and index-orphan are judged against these reads, so they must see
every acknowledged write: they are taken on a node that answers, at one ts after every
timestamp any acknowledged op reported (and after that node's own now), and recorded as
`final-read` events like any other op (a read that fails is recorded too, then tried on the
next node). On a target whose nodes keep their own copies every node is read whole, and each
of its tables probed (null ts) after its reads: the final probes replica-divergence compares
schemas by (anomalies.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from contract.target import ClientError, TargetClient
from workloads.history import HistoryRecorder
from workloads.runner import CLOSE_TIMEOUT_S, CONNECT_TIMEOUT_S, DEFAULT_OP_TIMEOUTS_S

log = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 5.0
FINAL_F = "final-read"
PROBE_F = "probe"


def tables_and_indexes(catalog_line: Mapping[str, Any]) -> list[dict]:
    """What to read, from the newest catalog.jsonl line: `{"table"}` per table and
    `{"table", "index"}` per index (every state: an orphan can hide in any of them)."""
    out: list[dict] = []
    for name, table in sorted((catalog_line.get("tables") or {}).items()):
        out.append({"table": name})
        for index in table.get("indexes") or ():
            out.append({"table": name, "index": index["name"]})
    return out


async def final_reads(
    open_client: Callable[[str], Awaitable[TargetClient]],
    nodes: Sequence[str],
    recorder: HistoryRecorder,
    tables_and_indexes: list[dict],
    *,
    timeout_s: float = DEFAULT_OP_TIMEOUTS_S[FINAL_F],
    every_node: bool = False,
) -> None:
    """Read everything at one ts on the first healthy node; a read that fails on a node is
    retried on the next one. Each attempt is an invoke and a completion in the history.

    `every_node`: a target whose nodes keep their own copies (multi-master) is read whole on
    every node, so replica-divergence can compare the copies."""
    if every_node:
        for node in nodes:
            await _read_on(open_client, [node], recorder, tables_and_indexes, timeout_s, probe=True)
        return
    await _read_on(open_client, nodes, recorder, tables_and_indexes, timeout_s)


async def _read_on(
    open_client: Callable[[str], Awaitable[TargetClient]],
    nodes: Sequence[str],
    recorder: HistoryRecorder,
    tables_and_indexes: list[dict],
    timeout_s: float,
    *,
    probe: bool = False,
) -> None:
    """Everything read once, on the first of `nodes` that answers, then the next for the rest;
    with `probe`, each table also probed on each node that read it."""
    process = recorder.max_process + 1
    pending = list(tables_and_indexes)
    total = len(pending)
    for node in nodes:
        if not pending:
            return
        client = await _open(open_client, node)
        if client is None:
            continue
        try:
            ts = await _read_ts(client, recorder)
            if ts is None:
                continue
            left: list[dict] = []
            for i, target in enumerate(pending):
                value = {**target, "ts": ts}
                ok, crashed = await _recorded(
                    FINAL_F, client.final_read, client, recorder, process, value, timeout_s
                )
                if crashed:  # unknown outcome: a fresh process, and the rest on the next node
                    process = recorder.max_process + 1
                    left.extend(pending[i:])
                    break
                if not ok:
                    left.append(target)
            if probe:
                read = [t for t in pending if t not in left and "index" not in t]
                process = await _probe(client, recorder, process, read, timeout_s)
            pending = left
        finally:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await client.close()
            except Exception as e:
                log.debug("closing the final-read client on %s failed: %s", node, e)
    if pending:
        log.warning("final reads on %s incomplete: %d of %d not read", nodes, len(pending), total)


async def _open(open_client: Callable[[str], Awaitable[TargetClient]], node: str) -> Any:
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            return await open_client(node)
    except Exception as e:
        log.warning("final reads: %s does not accept a client: %s", node, e)
        return None


async def _read_ts(client: TargetClient, recorder: HistoryRecorder) -> int | None:
    """A ts after every timestamp an acknowledged op reported and after the node's now."""
    try:
        async with asyncio.timeout(STATUS_TIMEOUT_S):
            status = await client.status()
    except Exception as e:
        log.warning("final reads: %s does not answer status: %s", client.node, e)
        return None
    now = status.get("hlc_now")
    return max(recorder.max_ts, now if isinstance(now, int) else 0) + 1


async def _probe(
    client: TargetClient,
    recorder: HistoryRecorder,
    process: int,
    tables: list[dict],
    timeout_s: float,
) -> int:
    """A null-ts probe of each table on this node; the process to go on with."""
    for target in tables:
        value = {"table": target["table"], "ts": None}
        _, crashed = await _recorded(
            PROBE_F, client.probe, client, recorder, process, value, timeout_s
        )
        if crashed:  # unknown outcome: this process is done, and so is this node
            return recorder.max_process + 1
    return process


async def _recorded(
    f: str,
    call: Callable[[dict], Awaitable[dict[str, Any]]],
    client: TargetClient,
    recorder: HistoryRecorder,
    process: int,
    value: dict,
    timeout_s: float,
) -> tuple[bool, bool]:
    """One recorded op of `f`: (succeeded, process crashed)."""
    recorder.invoke(process, f, value)
    try:
        async with asyncio.timeout(timeout_s):
            result = await call(value)
    except ClientError as e:
        kind = "fail" if e.definite else "info"
        recorder.complete(process, kind, f, dict(value), client.node, e.to_error())
        return False, kind == "info"
    except TimeoutError:
        error = {"code": "TIMEOUT", "message": f"no reply within {timeout_s} s", "retriable": True}
        recorder.complete(process, "info", f, dict(value), client.node, error)
        return False, True
    except Exception as e:
        error = {"code": "UNAVAILABLE", "message": f"{type(e).__name__}: {e}", "retriable": True}
        recorder.complete(process, "info", f, dict(value), client.node, error)
        return False, True
    recorder.complete(process, "ok", f, {**value, **result}, client.node)
    return True, False
