"""A local run's watchdog: when the controller's pipe ends, kill the run's node processes.

Started detached (own session) by harness/reaper.py with the write end of its stdin held by the
controller. EOF means the controller is gone, however it died; `bye` means a clean teardown
that already removed everything (the sweep below then finds nothing). Either way it kills the
processes tagged with exactly the run id and deletes the run's iptables rules (its run comment,
or its node addresses), then exits.

Usage: python -m harness.watchdog RUN_ID ADDRESS...
"""

from __future__ import annotations

import os
import signal
import sys
import time

from harness.cluster import remove_iptables_rules
from harness.cluster_spec import check_run_id
from harness.remote_local import kill_tagged, tagged_processes

SWEEP_S = 5.0  # a node being started as the controller died may appear a moment later


def sweep(run_id: str, addresses: list[str]) -> list[str]:
    """Kill the run's tagged processes until none is left (or SWEEP_S), remove its rules."""
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_S
    while True:
        killed.update(kill_tagged(run_id))
        time.sleep(0.1)
        if not tagged_processes(run_id) or time.monotonic() >= deadline:
            break
    rules = remove_iptables_rules(addresses, run_id=run_id)
    return [f"process {pid}" for pid in sorted(killed)] + rules


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m harness.watchdog RUN_ID ADDRESS...", file=sys.stderr)
        return 2
    run_id, addresses = argv[0], argv[1:]
    try:
        check_run_id(run_id)  # an empty id would tag nothing, or worse, in a later filter
    except ValueError as e:
        print(f"watchdog: {e}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):  # only the pipe decides when to sweep
        signal.signal(sig, signal.SIG_IGN)
    os.write(1, b"ready\n")
    os.dup2(2, 1)  # the controller closed its read end; later output goes to the log
    why = "controller gone (EOF)"
    while chunk := os.read(0, 64):
        if b"bye" in chunk:
            why = "bye"
            break
    removed = sweep(run_id, addresses)
    print(f"watchdog {run_id}: {why}; removed {len(removed)}: {', '.join(removed)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
