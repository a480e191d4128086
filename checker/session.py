"""The one SparkSession of an analysis: quiet, no UI, few shuffle partitions for small runs.

The caller owns it (tests share one; the CLI makes one and stops it), so every function of the
checker takes a session rather than making its own.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def driver_memory() -> str:
    """The driver's heap when CHECKER_DRIVER_MEMORY does not say: a third of this machine's
    memory, between 2 and 8 GiB (2 GiB ran out of heap pairing 10^7 events; in local mode the
    executors live in the driver's JVM). A heap grows only as far as the analysis needs."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "2g"
    return f"{max(2, min(8, total // 3 // 2**30))}g"


def build_session(master: str = "local[*]", shuffle_partitions: int = 4) -> SparkSession:
    """A SparkSession for `master` (any URL: local[n], local-cluster[...], spark://...)."""
    # Executors started by local-cluster or a standalone master run the same Python as us.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName("schemachaos-checker")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", os.environ.get("CHECKER_DRIVER_MEMORY", driver_memory()))
        # Only the small catalog frames are broadcast, by explicit hints: an automatic broadcast
        # of a side estimated small (an exploded final read) ran out of driver memory at 10^6.
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        # a field of the wrong type nulls that field, not the whole event (checker.ingest)
        .config("spark.sql.json.enablePartialResults", "true")
        # The cached frames (paired completions, ops, participants) are built once and read a
        # few times: compressing them cost more than it saved (ops at 10^7: 35 s -> 24 s).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        # One Parquet file of the ingest per task, so a scan ends with both cores busy rather
        # than one finishing a 128 MB split alone (ops at 10^7: 24 s -> 19 s).
        .config("spark.sql.files.maxPartitionBytes", "32m")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
