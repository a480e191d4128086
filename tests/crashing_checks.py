"""The checker's checks with one made to crash: a bug not yet known, for the tests of what a
crash of the checker costs a batch of runs (tests/test_checker_batch.py) and a night of them
(tests/test_reports_nightly.py)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from checker.analyze import CHECKS, CheckSpec
from checker.catalog_index import CatalogIndex
from checker.frames import RunFrames


def checks_crashing_on(crashes: Callable[[RunFrames], bool]) -> tuple[CheckSpec, ...]:
    """The checks, lost-write made to raise "a check crashed" where `crashes(frames)`
    (`frames.runs` are the places in the batch of the runs being judged)."""
    real = next(c for c in CHECKS if c.name == "lost-write")

    def check(frames: RunFrames, cat: CatalogIndex) -> DataFrame:
        if crashes(frames):
            raise RuntimeError("a check crashed")
        return real.check(frames, cat)

    spec = CheckSpec(real.name, check, real.needs_clock)
    return tuple(spec if c.name == spec.name else c for c in CHECKS)
