"""The ground floor: the run's contract (history.md, anomalies.md) held once, importing nothing
of ours, so that every layer (the system, the harness, the checker, the reports) reads the same."""
