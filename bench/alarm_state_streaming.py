"""Spark's own stateful streaming for Python, timing its timers (issue 46's point 3, measured
before choosing): a rate source of `--rate` rows/s, each row a new key whose state sets a
processing-time timeout of `--for` seconds (`applyInPandasWithState`, the stateful API this
pyspark runs without extra packages: `transformWithStateInPandas` needs protobuf, not in the
wheel's requirements), the key's state dropped when it fires. Reported: how late each timeout
fires after it was due (at the Python worker, and at the driver when its micro-batch is done),
and the micro-batches' durations — the floor a streaming-query alarm keeper would add to a raise.

    .venv/bin/python -m bench.alarm_state_streaming [--rate 2000] [--for 3] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

import pandas as pd


def _timeouts(key, frames: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
    if state.hasTimedOut:
        (due,) = state.get
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "due": [due], "fired": [time.time() * 1000]})
        return
    for _ in frames:
        pass
    if not state.exists:
        due_ms = state.getCurrentProcessingTimeMs() + FOR_MS
        state.update((float(due_ms),))
        state.setTimeoutDuration(FOR_MS)


FOR_MS = 3000


def main(argv: list[str] | None = None) -> None:
    global FOR_MS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--for", dest="hold", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    FOR_MS = int(args.hold * 1000)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers use this venv
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.readStream.format("rate").option("rowsPerSecond", args.rate).load()
    keyed = rows.selectExpr("CAST(value AS STRING) AS key")
    fired = keyed.groupBy("key").applyInPandasWithState(
        _timeouts, "key string, due double, fired double", "due double", "Update",
        GroupStateTimeout.ProcessingTimeTimeout,
    )  # fmt: skip
    late_worker: list[float] = []
    late_driver: list[float] = []
    batches: list[float] = []

    def collect(frame, batch_id: int) -> None:
        found = frame.select("due", "fired").collect()  # runs the batch's plan: fires them
        now = time.time() * 1000
        for due, at in found:
            late_worker.append((at - due) / 1000)
            late_driver.append((now - due) / 1000)

    checkpoint = tempfile.mkdtemp(prefix="bench-alarm-state-")
    query = (
        fired.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
    )
    running = query.trigger(processingTime="0 seconds").start()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        time.sleep(1)
    for progress in running.recentProgress:
        batches.append(progress["durationMs"].get("triggerExecution", 0) / 1000)
    running.stop()
    spark.stop()

    def figures(values: list[float]) -> str:
        if not values:
            return "none"
        values = sorted(values)
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        return f"p50 {statistics.median(values):.2f} s, p99 {p99:.2f} s, max {values[-1]:.2f} s"

    print(f"{args.rate} new keys/s, a {args.hold:g} s timeout each, {args.seconds:g} s")
    print(f"timeouts fired: {len(late_worker)}; late at the worker: {figures(late_worker)}")
    print(f"late at the driver (its micro-batch done): {figures(late_driver)}")
    print(f"micro-batches: {len(batches)} (the last 100 seen): {figures(batches)}")


if __name__ == "__main__":
    main()
