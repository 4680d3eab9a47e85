"""The billing job's SparkSession (the rules' `spark.session.build_session` does the same; the two
will be one once both are merged). `SPARK_MASTER` (default `local[*]`) points it at a cluster;
nothing is fetched at run time, only the jars inside the pyspark wheel."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def build_session(app_name: str = "billing", master: str | None = None) -> SparkSession:
    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return session
