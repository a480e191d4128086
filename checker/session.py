"""The one SparkSession of an analysis: quiet, no UI, few shuffle partitions for small runs.

The caller owns it (tests share one; the CLI makes one and stops it), so every function of the
checker takes a session rather than making its own. Three kinds of engine:
- `local[n]` (the default): the driver and executors in one JVM bound to loopback;
- `spark://HOST:7077`, a standalone cluster: the driver binds every interface and advertises
  the address this machine uses to reach HOST, so executors elsewhere can call back;
- `sc://HOST:15002`, a Spark Connect server: no JVM here at all (a warm engine); the checker
  uses only the DataFrame API, which Connect serves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

# SQL settings of every analysis, set at runtime so that a Connect session gets them too
RUNTIME_CONF = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # Only the small catalog frames are broadcast, by explicit hints: an automatic broadcast
    # of a side estimated small (an exploded final read) ran out of driver memory at 10^6.
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    # a field of the wrong type nulls that field, not the whole event (checker.ingest)
    "spark.sql.json.enablePartialResults": "true",
    # The cached frames (paired completions, ops, participants) are built once and read a
    # few times: compressing them cost more than it saved (ops at 10^7: 35 s -> 24 s).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # One Parquet file of the ingest per task, so a scan ends with both cores busy rather
    # than one finishing a 128 MB split alone (ops at 10^7: 24 s -> 19 s).
    "spark.sql.files.maxPartitionBytes": "32m",
    # Case mappings by the JVM rather than ICU: the checker upper-cases only DDL text, and ICU's
    # first use builds its title-case tables, a CPU-second of every cold analysis (JFR)
    "spark.sql.icu.caseMappings.enabled": "false",
}
# A driver that judges a few small histories and exits never earns back C2's compiles: on a
# cold 8,700-event run they took 30 of the JVM's 79 CPU-seconds, on the core the checks could
# use. C1 alone compiles what is hot at once, at a fraction of the cost.
# With C1 alone HotSpot reserves a 48 MB code cache, which a process that goes on to judge more
# runs in the same JVM (`report` over runs without results, a script) filled on its second
# 2,000-event analysis ("CodeCache is full. Compiler has been disabled"): the tiered default.
SHORT_LIVED_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# HotSpot never compiles a method of over 8,000 bytes of bytecode, and whole-stage codegen makes
# such methods of wide projections: the ingest's parse of a line and its per-line checks is
# one (8,773 bytes), and stayed interpreted (a 10^6-event parse, warm: 11.4-12.1 s as it was,
# 6.6-7.2 s with the limit lifted). Every JVM the checker starts gets this.
JIT_JAVA_OPTIONS = "-XX:-DontCompileHugeMethods"
# The class-data-sharing archive of an analysis's classes that `make setup` builds beside this
# pyspark (checker.class_archive); a JVM maps it instead of looking each class up in 250 jars.
CLASS_ARCHIVE = Path(sys.prefix) / "schemachaos-spark-classes.jsa"


def archive_options() -> str:
    """The driver's option that maps the class archive, or nothing when there is none."""
    return f"-XX:SharedArchiveFile={CLASS_ARCHIVE}" if CLASS_ARCHIVE.is_file() else ""


def driver_memory() -> str:
    """The driver's heap when CHECKER_DRIVER_MEMORY does not say: a third of this machine's
    memory, between 2 and 8 GiB (2 GiB ran out of heap pairing 10^7 events; in local mode the
    executors live in the driver's JVM). A heap grows only as far as the analysis needs."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "2g"
    return f"{max(2, min(8, total // 3 // 2**30))}g"


def reachable_address(host: str, port: int) -> str:
    """The local address this machine sends from to reach host:port (no packet is sent: a
    UDP connect only picks the route), for a driver that executors on `host` must call."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def build_session(
    master: str = "local[*]",
    shuffle_partitions: int = 4,
    *,
    remote: str | None = None,
    short_lived: bool = False,
    java_options: str | None = None,
) -> SparkSession:
    """A SparkSession for `master` (local[n], local-cluster[...], spark://...) or, when
    `remote` (sc://HOST:PORT) is given, a Spark Connect session on that server.

    `short_lived`: the driver will judge only small histories before it stops, so its JVM
    compiles with C1 alone (SHORT_LIVED_JAVA_OPTIONS). `java_options`: the driver JVM's own
    options instead of the defaults (mapping the class archive, CLASS_ARCHIVE, and
    JIT_JAVA_OPTIONS)."""
    if remote is not None:
        if not remote.startswith("sc://"):
            raise ValueError(
                f"--spark-remote: {remote!r} is not a Spark Connect URL (sc://HOST:PORT)"
            )
        return connect_session(remote, shuffle_partitions)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # pyspark names the executors' Python from this variable when the context starts: ours for
    # executors on this machine (local, local-cluster), the workers' own for a standalone
    # cluster (the image of `spark up` has python3 with the same pyspark)
    os.environ["PYSPARK_PYTHON"] = (
        os.environ.get("CHECKER_WORKER_PYTHON", "python3")
        if master.startswith("spark://")
        else sys.executable
    )
    if master.startswith("spark://"):
        first = urlsplit(master.split(",")[0])  # HA masters: spark://h1:7077,h2:7077
        host = reachable_address(first.hostname or "127.0.0.1", first.port or 7077)
        bind = "0.0.0.0"
        # half a worker of `schemachaos spark up` (the Connect server may hold the other half)
        executor_memory = os.environ.get("CHECKER_EXECUTOR_MEMORY", "900m")
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        host = bind = "127.0.0.1"
        executor_memory = None
    builder = (
        SparkSession.builder.master(master)
        .appName("schemachaos-checker")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", bind)
        .config("spark.driver.memory", os.environ.get("CHECKER_DRIVER_MEMORY", driver_memory()))
        # pyspark 4 records the Python call site of every DataFrame function for its error
        # messages: four py4j round trips per F.col, a third of a small run's analysis (a
        # static setting, so a Connect session, where it costs no round trip, keeps it)
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    for key, value in RUNTIME_CONF.items():
        builder = builder.config(key, value)
    jvm_options = [
        f"{archive_options()} {JIT_JAVA_OPTIONS}" if java_options is None else java_options,
        SHORT_LIVED_JAVA_OPTIONS if short_lived else "",
    ]
    if any(jvm_options):
        builder = builder.config(
            "spark.driver.extraJavaOptions", " ".join(filter(None, jvm_options))
        )
    if executor_memory is not None:
        builder = builder.config("spark.executor.memory", executor_memory)
    # executors in JVMs of their own (a cluster's workers, local-cluster); local mode ignores it
    builder = builder.config("spark.executor.extraJavaOptions", JIT_JAVA_OPTIONS)
    try:
        spark = builder.getOrCreate()
    except BaseException:
        # Ctrl-C (or a failure) while the JVM starts: a gateway already launched would outlive
        # us as an orphan holding gigabytes, so it is shut down and killed before re-raising.
        _kill_partial_jvm()
        raise
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(url: str, shuffle_partitions: int = 4) -> SparkSession:
    """A Spark Connect session with the analysis's SQL settings: on the server at `url`
    (sc://HOST:PORT), or, for `local[n]`, on a server that pyspark starts in a JVM of its own."""
    builder = SparkSession.builder.remote(url)
    if not url.startswith("sc://"):  # pyspark starts the server: its JVM's options are ours
        builder = builder.config("spark.driver.extraJavaOptions", JIT_JAVA_OPTIONS)
    spark = builder.getOrCreate()
    for key, value in {
        **RUNTIME_CONF,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
    }.items():
        spark.conf.set(key, value)
    return spark


def discard_session(spark: SparkSession) -> None:
    """Stop `spark`, and if its JVM no longer answers (killed, or exited because a local
    executor lost its heartbeats), forget its gateway too, so that the next build_session
    launches a new JVM instead of calling the dead one."""
    with contextlib.suppress(Exception):
        spark.stop()
    if not is_connect(spark) and not _jvm_answers():
        _kill_partial_jvm()


def _jvm_answers() -> bool:
    """Whether the gateway's JVM answers a call."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return False
    try:
        jvm.java.lang.System.currentTimeMillis()
    except Exception:  # py4j: nothing listens on the gateway's port
        return False
    return True


def executors_in_driver(master: str) -> bool:
    """Whether `master` runs the executors inside the driver's JVM (`local`, `local[n]`,
    `local[n,f]`), not in JVMs of their own (`local-cluster[...]`, a cluster)."""
    return master == "local" or master.startswith("local[")


def local_heap_bytes(spark: SparkSession) -> int | None:
    """The heap that holds the executors' storage when they run in the driver's JVM (a classic
    session on `local` or `local[...]`); None otherwise (Connect, or executors in JVMs of their
    own: a cluster's, or `local-cluster[...]`'s)."""
    if is_connect(spark) or not executors_in_driver(spark.sparkContext.master or ""):
        return None
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    try:
        return int(jvm.java.lang.Runtime.getRuntime().maxMemory())
    except Exception:  # py4j: the JVM is gone; the caller takes the safe default
        return None


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (pyspark gives those their own class)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _spark_children() -> list[int]:
    """Our child processes that are a Spark driver JVM (Linux /proc; none elsewhere): one
    launched but not yet handed to pyspark when Ctrl-C came is known only to the kernel."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if int(fields.get("PPid", "0").strip()) != os.getpid():
                continue
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue  # gone meanwhile
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            found.append(int(status.parent.name))
    return found


def _kill_partial_jvm() -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkContext._active_spark_context = None
    for pid in _spark_children():  # the gateway's JVM, or one not yet handed to pyspark
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
