"""The one SparkSession builder every job uses.

`SPARK_MASTER` (default `local[*]`) points it at a cluster. Nothing is fetched at run time: no
`spark.jars.packages`, only the jars inside the pyspark wheel. `s3://` archives are therefore read
through boto3 by `spark.object_source` (hadoop-aws, for `s3a://`, is not in the wheel); the
embedded default, a `file://` object store, is read as local paths.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J = Path(__file__).with_name("log4j2.properties")


def in_process(master: str) -> bool:
    """Whether `master` runs the executors inside the driver's JVM (`local`, `local[N]`,
    `local[*]`, `local[N,F]`): then the driver's disk is theirs too. `local-cluster[…]`
    (executors in JVMs of their own, as on a cluster) and any cluster master are not."""
    return master == "local" or master.startswith("local[")


# The driver's JIT flag, for the executors' JVMs too where they have their own (a cluster,
# `local-cluster`): the generated code of the native rules has methods beyond HotSpot's limit
# for compiling, which would run interpreted (a warm backfill on local-cluster[2,1,1024]: 3.5x
# local mode's time without it, 1.5x with it; bench/RESULTS.md, issue 42).
EXECUTOR_JIT = "-XX:-DontCompileHugeMethods"
CHOSEN_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


def submitted(key: str) -> str | None:
    """A setting `spark-submit` gave this process when spark-submit started it (its JVM is up,
    its configuration set: PYSPARK_GATEWAY_PORT says so); None otherwise. Read from that JVM:
    before a SparkContext, pyspark's SparkConf() in Python is empty (the entry points read the
    master so, got None, and built their session on `local[*]`: a job submitted to a cluster
    ran in its driver alone)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None  # (a JVM started here now would miss the session's driver settings)
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts none
    return SparkConf().get(key, None)


def submitted_master() -> str | None:
    return submitted("spark.master")


def executor_java_options(given: str | None) -> str:
    """The executors' JVM options: those given (spark-submit's, the cluster's defaults: kept,
    a session's setting would replace them), the driver's JIT flag, and the driver's parallel
    collector unless a collector is chosen there already (two would stop the JVM)."""
    given = (given or "").strip()
    extra = [] if EXECUTOR_JIT in given else [EXECUTOR_JIT]
    if not CHOSEN_COLLECTOR.search(given):
        extra.append("-XX:+UseParallelGC")
    return " ".join([given, *extra]).strip()


def build_session(app_name: str = "mqtt-platform", master: str | None = None) -> SparkSession:
    """`master`, else the one spark-submit was given (the entry points on a cluster), else
    `SPARK_MASTER`, else `local[*]`."""
    master = master or submitted_master() or os.environ.get("SPARK_MASTER") or "local[*]"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Rule batches are small: a handful of partitions, not the default 200.
        .config("spark.sql.shuffle.partitions", os.environ.get("SPARK_SHUFFLE_PARTITIONS", "4"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # PySpark otherwise records the Python call site of every Column operation in the JVM
        # (five py4j calls and a stack walk each, for error messages): building a new rule
        # set's plan took 1.2 s for 4 rules, most of it that (bench/RESULTS.md, issue 43).
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # The native rules' generated code has methods beyond HotSpot's 8,000-byte JIT limit:
        # without this they run interpreted (measured ~2x slower on the backfill benchmark).
        # The parallel collector: parsing payloads as VARIANT allocates a few small objects per
        # row, which G1's barriers and concurrent work make dearer on a small machine (backfill
        # of 4M rows, cold: 11% less CPU; bench/RESULTS.md).
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile={LOG4J} -XX:-DontCompileHugeMethods -XX:+UseParallelGC",
        )
        # Unused by local mode, whose executors are the driver's JVM.
        .config(
            "spark.executor.extraJavaOptions",
            executor_java_options(submitted("spark.executor.extraJavaOptions")),
        )
        # A live segment compacted away between listing and reading is not an error.
        .config("spark.sql.files.ignoreMissingFiles", "true")
        .config("spark.sql.streaming.stateStore.stateSchemaCheck", "false")
    )
    if master.startswith("local"):
        # Local mode and `local-cluster[…]` (executors in JVMs of their own, on this machine,
        # as the tests run them): the Python workers are this interpreter (this venv, with its
        # pyarrow), on loopback only. (PySpark takes the workers' interpreter from
        # PYSPARK_PYTHON, not from a config key.)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    # py4j logs every callback at INFO, and once more from __del__ at interpreter exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return session
