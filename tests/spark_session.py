"""One SparkSession for every checker test of the pytest session (Spark starts slowly)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from tests.conftest import require


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    require(shutil.which("java") is not None, "Spark needs a Java runtime (java on PATH)")
    from checker.session import build_session

    session = build_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()
