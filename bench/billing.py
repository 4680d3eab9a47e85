"""The billing job at scale: N tenants × D days of per-minute usage, billed by the Spark job, with
DuckDB's time for the same aggregation beside it (and its sums checked against Spark's).

    .venv/bin/python -m bench.billing --tenants 1000 --days 30        # ≈ 43 million rows
    .venv/bin/python -m bench.billing --tenants 50 --days 3 --quick   # smoke run

The log is written once (kept in `--dir`, default .data/bench-usage, reused when it matches):
one Parquet file per hour, all tenants, rows sorted by (tenant, minute), as the broker's writer
lays them out. Timings are wall-clock; the Spark session start is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.archive.schema import USAGE_SCHEMA, usage_segment_key
from common.stores.object_store import LocalObjectStore

PRICE_BOOK = {
    "plan": "bench",
    "version": 1,
    "effective_from": "2026-01-01",
    "currency": "USD",
    "base_fee_cents": 4900,
    "dimensions": {
        "messages": {
            "included": 1_000_000,
            "per": 1_000_000,
            "tiers": [
                {"up_to": 1_000_000_000, "price": "1.00"},
                {"up_to": 5_000_000_000, "price": "0.80"},
                {"up_to": None, "price": "0.70"},
            ],
        },
        "connection_minutes": {
            "included": 0,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "0.08"}],
        },
        "rules_triggered": {
            "included": 0,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "0.15"}],
        },
        "actions_executed": {
            "included": 0,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "0.15"}],
        },
        "storage_gb_hours": {
            "included": 0,
            "per": 1,
            "tiers": [{"up_to": None, "price": "0.0002"}],
        },
    },
}
START = datetime(2026, 9, 1, tzinfo=UTC)


def generate(root: Path, tenants: int, days: int) -> int:
    """Write the log; returns the row count. Skipped when `root` already holds this size."""
    marker = root / "GENERATED.json"
    wanted = {"tenants": tenants, "days": days}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return tenants * days * 1440
    store = LocalObjectStore(root)
    store.clear()
    n = tenants * 60
    # The same tenant and minute-offset columns every hour: built once, sorted (tenant, minute).
    names = pa.array([f"tenant-{i:04d}" for i in range(tenants) for _ in range(60)])
    offsets = pa.array([m * 60_000 for _ in range(tenants) for m in range(60)], type=pa.int64())
    writer = pa.array(["bench-broker"] * n)
    first_of_hour = pa.array([m == 0 for _ in range(tenants) for m in range(60)])

    def uniform(high: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(pc.random(n), high)), pa.int64())

    for hour in range(days * 24):
        at = START + timedelta(hours=hour)
        base = int(at.timestamp() * 1000)
        minute = pc.cast(pc.add(offsets, base), pa.timestamp("ms", tz="UTC"))
        columns = {
            "tenant": names,
            "minute": minute,
            "writer": writer,
            "messages": uniform(400),
            "connection_minutes": uniform(40),
            "rules_triggered": uniform(100),
            "actions_executed": uniform(20),
            # storage sampled once an hour (the first minute)
            "storage_byte_hours": pc.if_else(first_of_hour, uniform(10**9), 0),
            "publishes_in": uniform(200),
            "deliveries_out": uniform(200),
            "bytes_in": uniform(10**6),
            "bytes_out": uniform(10**6),
            "dropped": pa.array([0] * n, type=pa.int64()),
            # As a broker writes them (data_plane/storage/usage_log.py): shadow operations
            # counted, job executions and sink bytes null (only the control plane's jobs writer
            # and the live rules job's sink sender meter them).
            "shadow_operations": pa.array([0] * n, type=pa.int64()),
            "job_executions": pa.nulls(n, pa.int64()),
            "sink_bytes": pa.nulls(n, pa.int64()),
        }
        table = pa.table(columns, schema=USAGE_SCHEMA)
        path = root / usage_segment_key(base, "bench-broker", hour)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="zstd")
    marker.write_text(json.dumps(wanted))
    return tenants * days * 1440


def run_spark(
    root: Path, tenants: int, period: str, master: str | None = None, runs: int = 1
) -> dict:
    """The job `runs` times in one session on `master` (default SPARK_MASTER, else `local[*]`):
    `job_s` the first (a fresh JVM's), `runs_s` every run's."""
    from spark.billing import job
    from spark.session import build_session

    started = time.monotonic()
    spark = build_session("billing-bench", master)
    session_s = time.monotonic() - started
    accounts = [job.Account(f"tenant-{i:04d}", PRICE_BOOK) for i in range(tenants)]
    runs_s = []
    for _ in range(runs):
        started = time.monotonic()
        result = job.run(spark, LocalObjectStore(root), period, accounts)
        runs_s.append(time.monotonic() - started)
    sums = {i["tenant"]: i["usage"] for i in result.invoices}
    master = spark.sparkContext.master
    spark.stop()
    return {
        "master": master,
        "session_s": session_s,
        "job_s": runs_s[0],
        "runs_s": runs_s,
        "files": result.files,
        "rows": result.rows,
        "invoices": len(result.invoices),
        "revenue": result.revenue,
        "sums": sums,
    }


def run_duckdb(root: Path, period: str) -> dict:
    import duckdb

    start = datetime.strptime(period, "%Y-%m").replace(tzinfo=UTC)
    end = (start + timedelta(days=32)).replace(day=1)
    files = sorted(str(p) for p in (root / "usage").rglob("*.parquet"))
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 2}")
    con.execute("SET TimeZone = 'UTC'")
    started = time.monotonic()
    rows = con.execute(
        """
        SELECT tenant, strftime(minute, '%Y-%m') AS period,
               sum(messages), sum(connection_minutes), sum(rules_triggered),
               sum(actions_executed), sum(storage_byte_hours),
               coalesce(sum(job_executions), 0), count(*)
          FROM read_parquet(?)
         WHERE minute >= ? AND minute < ?
         GROUP BY 1, 2
        """,
        [files, start, end],
    ).fetchall()
    elapsed = time.monotonic() - started
    sums = {
        r[0]: {
            "messages": int(r[2]),
            "connection_minutes": int(r[3]),
            "rules_triggered": int(r[4]),
            "actions_executed": int(r[5]),
            "storage_byte_hours": int(r[6]),
            "job_executions": int(r[7]),
        }
        for r in rows
    }
    return {"seconds": elapsed, "groups": len(rows), "rows": sum(r[8] for r in rows), "sums": sums}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--dir", default=".data/bench-usage")
    parser.add_argument(
        "--master",
        help="Spark master (default SPARK_MASTER, else local[*]); local-cluster[2,1,1024] runs "
        "executors in JVMs of their own (bench.spark_masters sets SPARK_HOME for it)",
    )
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    period = START.strftime("%Y-%m")

    started = time.monotonic()
    rows = generate(root, args.tenants, args.days)
    print(f"log: {rows:,} rows in {time.monotonic() - started:.1f} s", flush=True)
    spark = run_spark(root, args.tenants, period, args.master)
    print(
        f"spark ({spark['master']}): session {spark['session_s']:.1f} s, "
        f"job {spark['job_s']:.1f} s for {spark['rows']:,} rows in {spark['files']} files, "
        f"{spark['invoices']} invoices",
        flush=True,
    )
    duck = run_duckdb(root, period)
    print(f"duckdb: aggregation {duck['seconds']:.1f} s for {duck['rows']:,} rows", flush=True)
    same = all(
        spark["sums"][tenant] == {k: duck["sums"][tenant][k] for k in spark["sums"][tenant]}
        for tenant in duck["sums"]
    ) and len(duck["sums"]) == len(spark["sums"])
    print(f"sums agree: {same}; revenue: {json.dumps(spark['revenue'])}")


if __name__ == "__main__":
    main()
