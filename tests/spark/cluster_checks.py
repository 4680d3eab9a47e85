"""The checks of `tests/spark/test_local_cluster.py`, on whichever SparkSession runs them: the
test runs them in its own process on the suite's local session (`local[2]`), then in a child
process on `local-cluster[2,1,1024]` (`python -m tests.spark.cluster_checks`: a JSON job on
stdin, the results as JSON on stdout; one SparkContext per process), and compares the two.

Each check gives what the platform keeps of its job, stripped of what is not the job's own (times
of the day, ids of database rows): billing's invoice documents (their bytes); a backfill's
summary, webhook calls (the rule outputs the actions were given), counters, dead letters,
action-ledger rows and metering, over a local archive and over S3; the same of the live job's
micro-batch (an Arrow table of the live feed's rows through `createDataFrame`, then
`LiveJob.handle_batch`). The database's rows a check wrote (ledger,
counters) are taken and deleted after it, so each run starts from the same state.

It also records what the executors were handed (`read_from`: the store each chunk of a backfill
was read from; `copies`: the temporary folders the driver made), so the test can check that
nothing an executor reads lives only on the driver's disk.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from common.archive.schema import HISTORY_SCHEMA
from common.charges.pricing import canonical_json
from common.stores.object_store import LocalObjectStore, ObjectStore, S3ObjectStore
from spark.billing import job as billing
from spark.rules import backfill
from spark.rules.feed import spark_table
from spark.rules.live import LiveJob
from tests.spark.conftest import Receiver

MASTER = "local-cluster[2,1,1024]"


def open_store(spec: dict[str, str]) -> ObjectStore:
    if "root" in spec:
        return LocalObjectStore(Path(spec["root"]))
    return S3ObjectStore(spec["bucket"], spec["prefix"], endpoint_url=spec["endpoint"])


def run_checks(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    copies: list[str] = []
    read_from: list[str] = []
    real_mkdtemp, real_read = tempfile.mkdtemp, backfill.read_archive

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        folder = real_mkdtemp(*args, **kwargs)
        copies.append(Path(folder).name)
        return folder

    def recorded_read(spark: SparkSession, store: ObjectStore, *args: Any, **kwargs: Any):
        read_from.append(store.url)
        return real_read(spark, store, *args, **kwargs)

    tempfile.mkdtemp = mkdtemp  # type: ignore[assignment]
    backfill.read_archive = recorded_read  # type: ignore[assignment]
    try:
        results: dict[str, Any] = {"master": spark.sparkContext.master, "seconds": {}}
        clock = time.monotonic()

        def took(what: str) -> None:
            nonlocal clock
            results["seconds"][what] = round(time.monotonic() - clock, 1)
            clock = time.monotonic()

        results["billing"] = {}
        for name, spec in sorted(job["usage"].items()):
            results["billing"][name] = invoices(spark, open_store(spec), job)
            took(f"billing-{name}")
        results["backfill"] = {}
        for name, spec in sorted(job["archives"].items()):
            before = len(read_from)
            results["backfill"][name] = run_backfill(spark, open_store(spec), job)
            results["backfill"][name]["read_from"] = sorted(set(read_from[before:]))
            took(f"backfill-{name}")
        results["live"] = live_batch(spark, job)
        took("live")
        results["copies"] = copies
        return results
    finally:
        tempfile.mkdtemp = real_mkdtemp  # type: ignore[assignment]
        backfill.read_archive = real_read  # type: ignore[assignment]


def invoices(spark: SparkSession, store: ObjectStore, job: dict[str, Any]) -> dict[str, Any]:
    from spark.entry.billing import accounts_of

    result = billing.run(spark, store, job["period"], accounts_of(job["accounts"]))
    return {
        "documents": [canonical_json(invoice).decode() for invoice in result.invoices],
        "files": result.files,
        "rows": result.rows,
    }


def run_backfill(spark: SparkSession, store: ObjectStore, job: dict[str, Any]) -> dict[str, Any]:
    dsn, start, end = job["dsn"], job["from"], job["to"]
    usage_before = set(store.list("usage/"))
    receiver = Receiver(port=job["receiver_port"])
    try:
        # max_chunks: several chunks of hours, so more than one read of the archive
        summary = backfill.run_backfill(spark, dsn, store, start, end, max_chunks=3)
        receiver.wait(job["webhooks"], 30)
        calls = receiver.ok_calls()
    finally:
        receiver.close()
    summary.pop("seconds")
    return {
        "summary": summary,
        "webhooks": sorted(c["body"].decode() for c in calls),
        "usage": usage_totals(store, usage_before),
        **taken_rows(dsn),
    }


def live_batch(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    """One micro-batch as the live feed's loop hands it over: the feed's Arrow rows, through
    `createDataFrame`, to `handle_batch`; the lanes' actions settled by `stop`."""
    rows = [
        {
            **row,
            "ts": datetime.fromtimestamp(row["ts"] / 1000, UTC),
            "payload": row["payload"].encode(),
        }
        for row in job["feed"]
    ]
    table = spark_table([pa.Table.from_pylist(rows, schema=HISTORY_SCHEMA)])
    store = LocalObjectStore(Path(job["live_store"]))
    usage_before = set(store.list("usage/"))
    receiver = Receiver(port=job["receiver_port"])
    checkpoint = tempfile.TemporaryDirectory(prefix="live-checkpoint-")
    live = LiveJob(spark, job["dsn"], store, checkpoint=checkpoint.name)
    stopped = False
    try:
        live.warm_up()  # as `start` does (the file stream's: the feed's own is tested beside)
        frame = spark.createDataFrame(table)
        live.handle_batch(frame, 1)
        receiver.wait(job["live_webhooks"], 30)
        live.stop()  # the lanes settled, the ledger and counters written
        stopped = True
        calls = receiver.ok_calls()  # any action fired twice is here too
    finally:
        if not stopped:
            live.stop()
        receiver.close()
        checkpoint.cleanup()
    assert live.last_batch_error is None, live.last_batch_error
    return {
        "webhooks": sorted(c["body"].decode() for c in calls),
        "usage": usage_totals(store, usage_before),
        **taken_rows(job["dsn"]),
    }


def usage_totals(store: ObjectStore, before: set[str]) -> dict[str, list[int]]:
    """Per tenant, the rules triggered and actions executed the check metered (in the usage
    objects it wrote; their minutes are the wall clock's)."""
    totals: dict[str, list[int]] = {}
    for key in sorted(set(store.list("usage/")) - before):
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist():
            total = totals.setdefault(row["tenant"], [0, 0])
            total[0] += row["rules_triggered"]
            total[1] += row["actions_executed"]
    return totals


def taken_rows(dsn: str) -> dict[str, Any]:
    """The action ledger's rows and the rules' counters the check wrote, then deleted."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ledger = conn.execute(
            "SELECT rule_id, version, message_id, output, action, message_ts, source, fired "
            "FROM tenants_ruleactionledger"
        ).fetchall()
        counters = conn.execute(
            "SELECT rule_id, matched, passed, failed, actions_ok, actions_failed, last_error "
            "FROM tenants_rulemetrics"
        ).fetchall()
        letters = conn.execute("SELECT rule_id, error FROM tenants_ruledeadletter").fetchall()
        for table in ("tenants_ruleactionledger", "tenants_rulemetrics", "tenants_ruledeadletter"):
            conn.execute(f"DELETE FROM {table}")
    return {
        "ledger": sorted([str(v) for v in row] for row in ledger),
        "counters": sorted([str(v) for v in row] for row in counters),
        "dead_letters": sorted([str(v) for v in row] for row in letters),
    }


def spark_home(folder: Path) -> Path:
    """A SPARK_HOME for `local-cluster` whose entries are the pyspark wheel's: its worker writes
    the executors' logs under `$SPARK_HOME/work`, which would otherwise be inside the virtualenv."""
    import pyspark

    wheel = Path(pyspark.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    for entry in wheel.iterdir():
        link = folder / entry.name
        # (a `work` left in the wheel by a run that used it as SPARK_HOME is not linked: the
        # logs would go through the link into the virtualenv again)
        if entry.name != "work" and not link.exists():
            link.symlink_to(entry)
    return folder


def _worker() -> tuple[int, str]:
    return os.getpid(), sys.executable


def main() -> None:
    from spark.session import build_session

    job = json.loads(sys.stdin.read())
    spark = build_session("local-cluster-checks", MASTER)
    try:
        results = run_checks(spark, job)
        context = spark.sparkContext
        results["executors"] = context._jsc.sc().getExecutorMemoryStatus().size() - 1
        # the executors' Python workers: this venv's interpreter (build_session), other processes
        results["workers"] = sorted(
            set(context.parallelize(range(4), 4).map(lambda _: _worker()).collect())
        )
        results["driver"] = [os.getpid(), sys.executable]
    finally:
        spark.stop()
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
