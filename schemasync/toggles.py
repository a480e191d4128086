"""Names of the bug toggles of anomalies.md; each breaks one protection, all off by default."""

from __future__ import annotations

NO_SAFE_TIME_WAIT = "no-safe-time-wait"
NO_ACK_WAIT = "no-ack-wait"
ACK_WAIT_NO_SKEW = "ack-wait-no-skew"
HLC_NO_ROUND_UP = "hlc-no-round-up"
NO_OP_VALIDATION = "no-op-validation"
NO_COMMIT_VALIDATION = "no-commit-validation"
DROP_COLUMN_COMPATIBLE = "drop-column-compatible"
LOCAL_SCHEMA_AT_COMMIT = "local-schema-at-commit"
SYNCTIME_REORDER = "synctime-reorder"
MUTABLE_DELAY = "mutable-delay"
SKIP_INDEX_STATES = "skip-index-states"
NO_SAFE_TIME_RECOVERY = "no-safe-time-recovery"
# A racing writer's rows are stored under the commit-time table version instead of the version
# they were written on (I), values unchanged, so a column added in between is missing from them
# where its default belongs (YugabyteDB #4415, the 2021-04-27 comment: a txn that began before
# ADD COLUMN ... NOT NULL DEFAULT 44 inserts a NULL).
OLD_WRITER_NO_DEFAULT = "old-writer-no-default"
# The index backfill reads rows at the driver's own wall clock instead of BUILDING's activation,
# which the gate's HLC-carrying poll lifts past every non-maintaining writer's commit; a writer
# on a node whose clock is ahead commits above that snapshot (CockroachDB #18533).
BACKFILL_IGNORES_SKEW = "backfill-ignores-skew"

# In anomalies.md order (the reported anomalies' toggles after the spec's): the one list the
# node, the CLI and scenarios check toggle names against.
TOGGLES: tuple[str, ...] = (
    NO_SAFE_TIME_WAIT,
    NO_ACK_WAIT,
    ACK_WAIT_NO_SKEW,
    HLC_NO_ROUND_UP,
    NO_OP_VALIDATION,
    NO_COMMIT_VALIDATION,
    DROP_COLUMN_COMPATIBLE,
    LOCAL_SCHEMA_AT_COMMIT,
    SYNCTIME_REORDER,
    MUTABLE_DELAY,
    SKIP_INDEX_STATES,
    NO_SAFE_TIME_RECOVERY,
    OLD_WRITER_NO_DEFAULT,
    BACKFILL_IGNORES_SKEW,
)
ALL_TOGGLES: frozenset[str] = frozenset(TOGGLES)


def validate_toggles(names: object) -> frozenset[str]:
    """The toggles as a frozenset; raises ValueError naming an unknown one."""
    if not isinstance(names, list | tuple | set | frozenset):
        raise ValueError("must be a list of toggle names")
    result = set()
    for name in names:
        if name not in ALL_TOGGLES:
            raise ValueError(f"unknown toggle {name!r} (known: {', '.join(sorted(ALL_TOGGLES))})")
        result.add(str(name))
    return frozenset(result)
