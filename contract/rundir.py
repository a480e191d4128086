"""The run directory's file names (history.md "Run directory"), named once for every layer.

The harness and the simulator write these files, the checker and the reports read them; a name
spelled here is the same file for all of them. `RunPaths` joins them to one run's directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_JSON = "run.json"  # the test's parameters, nodes, seed and fault schedule
HISTORY = "history.jsonl"  # the history: one event a line, the contract between run and judge
CATALOG = "catalog.jsonl"  # the catalog's versions, as the run left them
RESULTS = "results.json"  # the checker's verdict
COLUMNAR_SUFFIX = ".columnar.parquet"  # the recorder's typed copy of a history: its stem + this
HISTORY_COLUMNAR = "history" + COLUMNAR_SUFFIX  # the typed copy of HISTORY
HISTORY_PARQUET = "history.parquet"  # the checker's Parquet copy (a directory), kept for re-runs
REPORT = "report.html"  # the human report of RESULTS
NODES = "nodes"  # nodes/<name>/: the logs each node left
CONTROLLER_LOG = "controller.log"  # the harness's own log
REAPER_LOG = "reaper.log"  # what the run's reaper did after its controller died
TMP = ".tmp"  # a temp area (ssh keys, local node data) removed at teardown

RUN_MARKERS = (RUN_JSON, HISTORY)  # a directory with neither is not a run


@dataclass(frozen=True)
class RunPaths:
    """The files of the run directory at `path`; nothing is created or read."""

    path: Path

    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def history(self) -> Path:
        return self.path / HISTORY

    @property
    def catalog(self) -> Path:
        return self.path / CATALOG

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def history_columnar(self) -> Path:
        return self.path / HISTORY_COLUMNAR

    @property
    def history_parquet(self) -> Path:
        return self.path / HISTORY_PARQUET

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def controller_log(self) -> Path:
        return self.path / CONTROLLER_LOG

    @property
    def tmp(self) -> Path:
        return self.path / TMP

    def node_dir(self, node: str) -> Path:
        """Where node `node`'s logs go (not created here)."""
        return self.path / NODES / node
