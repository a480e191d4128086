"""The anomaly classes of anomalies.md, in report order: the one list every part names them by
(the checker's registry, scenario `expect`, JUnit cases, nightly pages)."""

from __future__ import annotations

ANOMALY_CLASSES: tuple[str, ...] = (
    "ap-violation",
    "mixed-schema-commit",
    "transborder-op",
    "incompatible-commit",
    "stale-schema-read",
    "schema-conformance",
    "lost-write",
    "lost-ddl",
    "index-missing",
    "index-orphan",
    "activation-order",
    "ddl-outcome",
    "replica-divergence",
)

# What `expect` may name beside the classes: the one liveness finding, judged from
# results.json's statistics (`stats.restarts`) rather than its anomalies (no-safe-time-recovery)
UNAVAILABILITY = "unavailability"
