"""The watchdog left on each SSH host of a run: it sweeps the run's nodes when its lease expires.

An SSH host offers the controller nothing to hold open that survives only as long as the
controller does, so the controller renews a lease instead: it touches a file on the host every
few seconds. When the file is older than the lease, the controller is gone (or cut off): run
the sweep command (kill the node processes, delete our iptables rules) and exit. A clean
teardown deletes the file, and the agent exits without sweeping. Shipped as
`python3 -c <this file>` over the Remote, so it may import only the standard library.

Usage: python3 -c SOURCE LEASE_PATH LEASE_S SWEEP_COMMAND_BASE64
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
import time

POLL_S = 0.5


def watch(lease_path: str, lease_s: float) -> str:
    """Return why the watch ended: 'bye' (lease removed) or 'expired'."""
    while True:
        try:
            age = time.time() - os.stat(lease_path).st_mtime
        except FileNotFoundError:
            return "bye"
        if age > lease_s:
            return "expired"
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    lease_path, lease_s, sweep = argv[0], float(argv[1]), base64.b64decode(argv[2]).decode()
    why = watch(lease_path, lease_s)
    if why == "expired":
        # the command keeps its patterns encoded, so pkill cannot match this agent's argv
        done = subprocess.run(["sh", "-c", sweep], capture_output=True, text=True, timeout=120)
        print(f"lease expired; sweep exit {done.returncode}: {done.stdout.strip()}", flush=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lease_path)
    else:
        print("lease removed: clean teardown", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
