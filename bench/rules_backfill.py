"""Backfill throughput: archived messages/s per core for a rule with a JSON-path WHERE, Spark
(the rules' own plan: `spark.rules.backfill.run_backfill`) beside DuckDB running the equivalent
query on the same Parquet files.

    .venv/bin/python -m bench.rules_backfill --messages 10000000 [--dir /tmp/rules-bench] [--write]

The archive is generated with pyarrow as live segments (1M rows per hour of tenant `bench` and as
many of tenant `other`, which the rule must not read; ~100-byte JSON payloads) and compacted by
the archive's own compactor (`compact_hour`: per-tenant history parts, `HISTORY_ROW_GROUP` rows
per row group, the payloads' common fields typed in `payload_fields`), timed apart. The rule:

    SELECT payload.site.id AS site, payload.temp AS temp FROM "sensors/#"
    WHERE payload.temp > 90 AND payload.site.id = 7

No database: the rule is given directly and no action runs (the summary is the result). The
backfill runs `--runs` times in one Spark session, as the rules-runs worker keeps its session: the
first run is a fresh worker's (the JVM's first jobs, the plan's JIT), the later ones every later
run's. DuckDB runs the query as many times; ratios are against its fastest. `--s3`: the history is
put in moto's S3 server on loopback and the backfill reads it from there as a deployment on S3
does (Spark in local mode: a local copy of each chunk, `spark.archive.readable_copy`); DuckDB
still reads the local files (its S3 extension would be a download).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.archive.files import compact_hour, encode_parquet
from common.archive.schema import ARCHIVE_SCHEMA, live_segment_key
from common.stores.object_store import LocalObjectStore, ObjectStore

HOUR_MS = 3_600_000
PER_HOUR = 1_000_000
RULE = (
    'SELECT payload.site.id AS site, payload.temp AS temp FROM "sensors/#" '
    "WHERE payload.temp > 90 AND payload.site.id = 7"
)


def _hour_table(tenant: str, hour_ms: int, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    temp = np.round(rng.uniform(0, 100, rows), 1)
    site = rng.integers(0, 10, rows)
    device = rng.integers(0, 1000, rows)
    text = pc.binary_join_element_wise(
        '{"temp": ',
        pc.cast(pa.array(temp), pa.string()),
        ', "site": {"id": ',
        pc.cast(pa.array(site), pa.string()),
        ', "name": "plant"}, "device": "d',
        pc.cast(pa.array(device), pa.string()),
        '", "ok": true}',
        "",
    )
    topics = pc.binary_join_element_wise(
        "sensors/d", pc.cast(pa.array(device), pa.string()), "/t", ""
    )
    n = rows
    return pa.table(
        {
            "event": pa.array(["message.publish"] * n),
            "tenant": pa.array([tenant] * n),
            "ts": pa.array(hour_ms + np.arange(n) * (HOUR_MS // n), pa.timestamp("ms", tz="UTC")),
            "client_id": pc.binary_join_element_wise(
                "d", pc.cast(pa.array(device), pa.string()), ""
            ),
            "username": pa.array([f"{tenant}/dev"] * n),
            "topic": topics,
            "qos": pa.array(np.ones(n, dtype=np.int8)),
            "retain": pa.array(np.zeros(n, dtype=bool)),
            "payload": pc.cast(text, pa.binary()),
        }
    )


def generate(
    store: LocalObjectStore, messages: int, start_ms: int
) -> tuple[int, int, list[str], float]:
    """Hours of history for `bench` (and as many rows for `other`), written as live segments and
    compacted; returns (start, end, bench files, seconds the compaction took)."""
    hours = -(-messages // PER_HOUR)
    compacting = 0.0
    for index in range(hours):
        hour_ms = start_ms + index * HOUR_MS
        rows = min(PER_HOUR, messages - index * PER_HOUR)
        for number, tenant in enumerate(("bench", "other")):
            table = _hour_table(tenant, hour_ms, rows, seed=index * 2 + (tenant == "other"))
            empty = {n: pa.nulls(rows, ARCHIVE_SCHEMA.field(n).type) for n in ARCHIVE_SCHEMA.names}
            empty.update({n: table[n] for n in table.column_names})
            full = pa.table(empty).cast(ARCHIVE_SCHEMA)
            store.put(live_segment_key(hour_ms, "bench", number), encode_parquet(full))
        started = time.monotonic()
        compact_hour(store, datetime.fromtimestamp(hour_ms / 1000, UTC))
        compacting += time.monotonic() - started
    files = sorted(str(p) for p in (store.root / "archive" / "tenant=bench").rglob("*.parquet"))
    return start_ms, start_ms + hours * HOUR_MS, files, compacting


def run_spark(
    store: ObjectStore, start: int, end: int, runs: int, master: str | None = None
) -> list[dict]:
    """The backfill `runs` times in one Spark session, as the rules-runs worker keeps its
    session (`tenants.rules.runs.execute.spark_session`): the first pays the JVM's first jobs
    and JIT, later ones find them done. `master`: default SPARK_MASTER, else `local[*]`."""
    from spark.rules.backfill import run_backfill
    from spark.rules.plan import RuleSpec
    from spark.session import build_session

    spark = build_session("bench-rules-backfill", master)
    try:
        return [
            run_backfill(spark, None, store, start, end, specs=[RuleSpec(1, "bench", "b", RULE)])
            for _ in range(runs)
        ]
    finally:
        spark.stop()


def run_spark_on_s3(
    local: LocalObjectStore, start: int, end: int, runs: int, master: str | None = None
) -> list[dict]:
    """`run_spark` on a copy of the history in moto's S3 server (loopback: the S3 path's own
    cost, not a network's)."""
    from bench.s3 import create_bucket, moto_server
    from common.stores.object_store import S3ObjectStore

    with moto_server() as env:
        os.environ.update(env)  # before the JVM starts: its Python workers read S3 too
        create_bucket(env, "bench-history")
        store = S3ObjectStore("bench-history", "mqtt", endpoint_url=env["AWS_ENDPOINT_URL"])
        for key in local.list("archive/"):
            store.put(key, local.get(key))
        return run_spark(store, start, end, runs, master)


def run_duckdb(files: list[str], threads: int) -> tuple[int, float]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    listing = ", ".join(f"'{f}'" for f in files)
    started = time.monotonic()
    count = con.execute(
        f"""
        SELECT count(*) FROM (
            SELECT json_extract(decode(payload), '$.site.id') AS site,
                   json_extract(decode(payload), '$.temp') AS temp
            FROM read_parquet([{listing}])
            WHERE tenant = 'bench' AND topic LIKE 'sensors/%'
              AND CAST(json_extract(decode(payload), '$.temp') AS DOUBLE) > 90
              AND CAST(json_extract(decode(payload), '$.site.id') AS BIGINT) = 7
        )
        """
    ).fetchone()[0]
    return count, time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--dir", default="/tmp/rules-backfill-bench")
    parser.add_argument(
        "--runs", type=int, default=3, help="backfills in one Spark session (and DuckDB queries)"
    )
    parser.add_argument(
        "--s3",
        action="store_true",
        help="the backfill reads the history from moto's S3 server, as a deployment on S3 "
        "does; DuckDB still reads the local files",
    )
    parser.add_argument(
        "--master",
        help="Spark master (default SPARK_MASTER, else local[*]); local-cluster[2,1,1024] runs "
        "executors in JVMs of their own (bench.spark_masters sets SPARK_HOME for it)",
    )
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    store = LocalObjectStore(Path(args.dir))
    store.clear()
    start_ms = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    t0 = time.monotonic()
    start, end, files, compacting = generate(store, args.messages, start_ms)
    generated = time.monotonic() - t0
    print(
        f"generated {args.messages:,} messages (+ as many of another tenant) in {generated:.0f}s, "
        f"of which compaction {compacting:.1f}s"
    )
    load = os.getloadavg()[0]
    if args.s3:
        summaries = run_spark_on_s3(store, start, end, args.runs, args.master)
    else:
        summaries = run_spark(store, start, end, args.runs, args.master)
    for run, summary in enumerate(summaries, 1):
        spark_rate = summary["rows_read"] / summary["seconds"]
        print(
            f"spark run {run}: {summary['rows_read']:,} rows, {summary['passed']:,} passed, "
            f"{summary['failed']} failed in {summary['seconds']:.2f}s = {spark_rate:,.0f} msg/s "
            f"({spark_rate / cores:,.0f} per core)"
        )
    durations = []
    for run in range(1, args.runs + 1):
        count, seconds = run_duckdb(files, cores)
        durations.append(seconds)
        duck_rate = args.messages / seconds
        print(
            f"duckdb run {run}: {count:,} rows in {seconds:.2f}s = {duck_rate:,.0f} msg/s "
            f"({duck_rate / cores:,.0f} per core)"
        )
        assert count == summaries[-1]["passed"], "Spark and DuckDB disagree on the result"
    for run, summary in enumerate(summaries, 1):
        print(f"run {run}: Spark/DuckDB time {summary['seconds'] / min(durations):.2f}x")
    summary, seconds = summaries[-1], min(durations)
    spark_rate = summary["rows_read"] / summary["seconds"]
    duck_rate = args.messages / seconds
    if args.write:
        results = Path(__file__).with_name("RESULTS.md")
        with results.open("a") as out:
            out.write(
                "\n## Rules backfill throughput (issue 14)\n\n"
                f"Command: `.venv/bin/python -m bench.rules_backfill --messages {args.messages} --write`  \n"
                f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {cores} cores; load average at start "
                f"{load:.1f} (other jobs share the machine)  \n"
                f"Rule: `{RULE}` over {args.messages:,} archived messages of tenant `bench` "
                f"(compacted history, ~100-byte JSON payloads; another tenant's {args.messages:,} "
                "rows beside them, not read).\n\n"
                "| engine | rows read | result rows | seconds | msg/s | msg/s per core |\n"
                "|---|---:|---:|---:|---:|---:|\n"
                f"| Spark (rules plan: native Spark columns, Python evaluator only for rows it cannot be sure of) | {summary['rows_read']:,} | "
                f"{summary['passed']:,} | {summary['seconds']:.1f} | {spark_rate:,.0f} | "
                f"{spark_rate / cores:,.0f} |\n"
                f"| DuckDB (same files, equivalent SQL, {cores} threads) | {args.messages:,} | {count:,} | "
                f"{seconds:.1f} | {duck_rate:,.0f} | {duck_rate / cores:,.0f} |\n"
            )


if __name__ == "__main__":
    main()
