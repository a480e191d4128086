"""Synthetic run directories, written to the history contract (history.md) without a cluster:
the one source of generated histories for the tests and the benchmarks.

`generate_run` runs a model of a correct cluster (synthetic.model) through a scripted run
(synthetic.generate, synthetic.tail) with at most one injected fault; synthetic.handmade holds
the small pieces for run directories written by hand."""

from synthetic.generate import SyntheticRun, generate_run, write_synthetic_run
from synthetic.model import FAULTS, ClusterModel, expected_classes

__all__ = [
    "FAULTS",
    "ClusterModel",
    "SyntheticRun",
    "expected_classes",
    "generate_run",
    "write_synthetic_run",
]
