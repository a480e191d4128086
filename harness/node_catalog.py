"""Run inside a schemasync node's container, after its controller died: the node's catalog log.

The reaper (and `clean`) ship this file as `python3 -c SOURCE` into each of a dead run's node
containers, whose image holds the `schemasync` package the node runs. It finds the node process
by its command line (`schemasync.node --config PATH`), undoes what a nemesis may have left that
keeps it from answering or catching up (a SIGSTOP, a held apply), and prints the catalog log
it answers (admin.catalog_log, as the run's own end reads it) as one JSON line. Exit 0 with
the log, 1 with one line on stderr saying why there is none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

# A node that is up answers its admin API in milliseconds. Below the collector's bound on the
# whole command (reaper_agent.COMMAND_S), so a node that does not answer is named here.
ANSWER_TIMEOUT_S = 2.0


def node_configs() -> list[tuple[int, str]]:
    """(pid, config path) of each schemasync node process in this container."""
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile
        if "schemasync.node" in argv and "--config" in argv[:-1]:
            found.append((int(entry.name), argv[argv.index("--config") + 1]))
    return found


async def catalog_of(config_path: str) -> list[dict[str, Any]]:
    """The node's catalog log, its apply released first (a lagging-learner `inhibit` holds it
    behind the log the leader committed)."""
    from schemasync.client import Client
    from schemasync.config import load_config

    me = load_config(config_path).me
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        client = await Client.connect([f"{me.host}:{me.client_port}"], timeout=ANSWER_TIMEOUT_S)
        try:
            with contextlib.suppress(Exception):  # a node without the inhibitor: its log
                await client.inhibit_apply(False)
            return await client.catalog_log()
        finally:
            await client.close()


def main() -> int:
    nodes = node_configs()
    if not nodes:
        print("no schemasync node process here", file=sys.stderr)
        return 1
    pid, config_path = nodes[0]
    try:
        os.kill(pid, signal.SIGCONT)  # a paused node answers nothing
        entries = asyncio.run(catalog_of(config_path))
    except Exception as e:
        print(f"node {config_path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(entries, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
