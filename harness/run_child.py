"""``python -m harness.run_child``: one run_test in this process, asked for by harness.reexec
(RunOptions as JSON on stdin; the outcome as one JSON line on stdout)."""

from __future__ import annotations

import json
import logging
import sys

from harness.reexec import options_from_json
from harness.run import run_test


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    outcome = run_test(options_from_json(json.loads(sys.stdin.read())))
    line = {
        "run_dir": str(outcome.run_dir),
        "exit_code": outcome.exit_code,
        "faults_run": outcome.faults_run,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
